"""The soak drill's pure parts (lab/drill/soak_schedule.py, soak_summary.py):
the fault picker, the checkpoint schedule, the pace the schedule reaches on modelled
timings, the summary. The live soak itself (``ingest drill --soak MINUTES``) is run by
hand, not in CI."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path

import pytest

from lab.drill.model import DrillResult, Recovery
from lab.drill.report import read_json, write_json
from lab.drill.soak_schedule import (
    AWAIT_WARM,
    CHECKPOINT,
    KILLS,
    FaultPicker,
    Timings,
    behind,
    checkpoint_times,
    simulate,
)
from lab.drill.soak_summary import (
    SoakLog,
    SoakRecovery,
    percentile,
    recovery_stats,
    summarize,
    summary_line,
)

SEEDS = range(40)
DONE = Counter({"kill-active": 1, "kill-standby": 1, "kill-solo": 1})


def test_checkpoint_deletions_every_five_minutes_or_once_halfway() -> None:
    assert checkpoint_times(1800) == [300, 600, 900, 1200, 1500]
    assert checkpoint_times(600) == [300]
    assert checkpoint_times(180) == [90]
    assert checkpoint_times(50) == []  # halfway is inside the last 30 s
    assert checkpoint_times(0) == []


def test_the_state_decides_what_may_be_killed() -> None:
    picker = FaultPicker(1)
    for _ in range(200):
        assert picker.pick("none", DONE, behind=False).kind == "kill-solo"
        assert picker.pick("warm", DONE, False).kind in ("kill-active", "kill-standby")
        assert picker.pick("warming", DONE, False).kind in ("kill-standby", AWAIT_WARM)


def test_first_kill_active_and_kill_solo_are_not_left_to_chance() -> None:
    picker = FaultPicker(2)
    none: Counter[str] = Counter()
    assert picker.pick("warming", none, behind=True).kind == AWAIT_WARM  # then kill-active
    assert picker.pick("warm", none, behind=True).kind == "kill-active"
    only_active = Counter({"kill-active": 1})
    first_solo = picker.pick("warming", only_active, behind=False)
    assert (first_solo.kind, first_solo.respawn) == ("kill-standby", False)
    # no respawn until the first kill-solo: the next fault is that kill-solo
    for _ in range(50):
        p = picker.pick("warm", only_active, False)
        assert p.kind == "kill-active" or not p.respawn


def test_behind_the_pace_a_warming_standby_is_killed_more_often() -> None:
    def share(late: bool) -> float:
        picker = FaultPicker(3)
        picks = [picker.pick("warming", DONE, late).kind for _ in range(2000)]
        return picks.count("kill-standby") / len(picks)

    assert 0.35 < share(False) < 0.45 < 0.85 < share(True) < 0.95
    assert behind(kills=5, elapsed_s=100) and not behind(kills=8, elapsed_s=100)


def test_same_seed_same_schedule() -> None:
    def draws(seed: int) -> list[object]:
        p = FaultPicker(seed)
        return [(p.gap(), p.kill_delay(), p.pick("warm", DONE, False)) for _ in range(20)]

    assert draws(7) == draws(7) != draws(8)
    p = FaultPicker(9)
    assert all(4.0 <= p.gap() <= 9.0 and 0.0 <= p.kill_delay() <= 1.0 for _ in range(500))
    assert simulate(30, 11) == simulate(30, 11)


@pytest.mark.parametrize("seed", SEEDS)
def test_thirty_minutes_reach_a_hundred_kills_on_a_two_core_host(seed: int) -> None:
    counts = simulate(30, seed)
    kills = sum(counts[k] for k in KILLS)
    assert kills >= 100, counts
    assert 1800 / kills <= 15  # a fault every ~12-15 s on average
    assert counts[CHECKPOINT] == 5
    assert min(counts[k] for k in KILLS) >= 10, counts


@pytest.mark.parametrize("seed", SEEDS)
def test_three_minutes_reach_eight_kills_of_every_kind(seed: int) -> None:
    counts = simulate(3, seed)
    assert sum(counts[k] for k in KILLS) >= 8, counts
    assert all(counts[k] >= 1 for k in KILLS), counts
    assert counts[CHECKPOINT] == 1


def test_a_slower_host_still_reaches_a_hundred_kills_in_thirty_minutes() -> None:
    slow = Timings(warm=20.0, takeover=3.0, cold=16.0, stop=8.0)
    kills = [sum(simulate(30, s, slow)[k] for k in KILLS) for s in SEEDS]
    assert min(kills) >= 100, kills
    # as measured on a loaded 2-core host (load 4-7): behind the pace, the picker kills
    # warming standbys more often, so kill-active gets rarer but the pace holds
    loaded = Timings(warm=35.0, takeover=4.3, cold=20.0, stop=20.0)
    runs = [simulate(30, s, loaded) for s in SEEDS]
    assert statistics.mean(sum(c[k] for k in KILLS) for c in runs) >= 110
    assert all(c["kill-active"] >= 5 for c in runs)


def test_percentiles_and_recovery_stats() -> None:
    assert percentile([5.0], 90) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0], 90) == 9.1
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert recovery_stats([]) == {"n": 0, "median": None, "p90": None, "max": None}
    assert recovery_stats([2.0, 3.0, 2.5, 10.0]) == {
        "n": 4,
        "median": 2.75,
        "p90": 7.9,
        "max": 10.0,
    }


def _result_and_log() -> tuple[DrillResult, SoakLog]:
    result = DrillResult("soak", "hudi", faults=12, restarts=7, produced=18_000)
    result.committed, result.duration_s = 18_000, 301.5
    log = SoakLog(minutes=3, seed=4242, fault_s=180.0)
    log.counts.update({"kill-active": 3, "kill-standby": 6, "kill-solo": 2, CHECKPOINT: 1})
    warm = [(10.0, 12.0), (40.0, 42.5), (70.0, 73.0)]
    cold = [(100.0, 113.0), (150.0, 164.0)]
    for kind, spans in (("warm", warm), ("cold", cold)):
        log.recoveries += [SoakRecovery(kind, Recovery(a, b)) for a, b in spans]
    log.recoveries += [
        SoakRecovery("checkpoint", Recovery(90.0, 105.0)),
        SoakRecovery("cold", Recovery(170.0)),  # no commit seen
    ]
    return result, log


def test_summary_counts_kills_and_recoveries_by_kind(tmp_path: Path) -> None:
    result, log = _result_and_log()
    s = summarize(result, log)
    assert s["kills"] == {"kill-active": 3, "kill-standby": 6, "kill-solo": 2, "total": 11}
    assert (s["seed"], s["minutes"], s["checkpoint_deletions"]) == (4242, 3, 1)
    assert s["recovery_s"]["warm"] == {"n": 3, "median": 2.5, "p90": 2.9, "max": 3.0}
    assert s["recovery_s"]["cold"] == {"n": 2, "median": 13.5, "p90": 13.9, "max": 14.0}
    assert s["recovery_s"]["checkpoint"]["median"] == 15.0
    assert "unplanned" not in s["recovery_s"]
    assert s["recoveries_without_commit"] == {"cold": 1}
    assert s["mean_kill_interval_s"] == 16.4
    assert (s["produced"], s["missing"], s["duplicated"], s["verdict"]) == (18_000, 0, 0, "ok")
    line = summary_line(s)
    assert line.startswith("soak/hudi: ok (302s, seed 4242, 11 kills: 3 kill-active, ")
    assert "warm 2.5/2.9/3.0s (n=3)" in line and "cold 13.5/13.9/14.0s (n=2)" in line
    assert line.endswith("18000 produced, 0 missing, 0 duplicated)")
    # the report: the drill as every drill's, the summary beside it
    path = write_json([result], {"soak": s}, tmp_path / "soak-hudi.json")
    assert json.loads(path.read_text())["soak"]["kills"]["total"] == 11
    results, meta = read_json(path)
    assert results[0].scenario == "soak" and meta["soak"]["seed"] == 4242


def test_summary_of_a_failed_soak() -> None:
    result, log = _result_and_log()
    result.missing = 2
    result.problems.append("soak: timed out after 120s waiting for driver 5 to take over")
    s = summarize(result, log)
    assert s["verdict"] == "FAILED" and s["missing"] == 2
    assert summary_line(s, result.problems).endswith("driver 5 to take over")
    empty = summarize(DrillResult("soak", "iceberg"), SoakLog(minutes=1, seed=1))
    assert empty["kills"]["total"] == 0 and empty["mean_kill_interval_s"] is None
    assert "recovery median/p90/max -;" in summary_line(empty)
