"""A drill's recoveries split at the recovering driver's milestones
(lab/drill/phases.py, scripts/restart-phases.py), on logs written as the
pipeline and Spark write them."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from lab.drill.model import DrillResult, FaultEvent
from lab.drill.phases import medians, recoveries

T0 = datetime(2026, 11, 30, 4, 0, 0).timestamp()


def ours(t: float, text: str) -> str:
    return datetime.fromtimestamp(T0 + t).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3] + " " + text


def sparks(t: float, text: str) -> str:
    return datetime.fromtimestamp(T0 + t).strftime("%y/%m/%d %H:%M:%S.%f")[:-3] + " " + text


def write_driver(work: Path, n: int, lines: list[str], full: list[str] | None = None) -> None:
    """driver-NN.out; with ``full``, a log file it names holding Spark's lines as well."""
    out = work / f"driver-{n:02d}.out"
    if full is None:
        out.write_text("\n".join(lines) + "\n")
        return
    log = work / f"full-{n}.log"
    first = lines[0] + str(log)
    log.write_text("\n".join([first, *full]) + "\n")
    out.write_text("\n".join([first, *lines[1:]]) + "\n")


@pytest.fixture
def drill(tmp_path: Path) -> tuple[DrillResult, Path]:
    committed = "INFO pipeline.runtime.batches: batch {} committed: instant 1, 9 records"
    write_driver(tmp_path, 0, [ours(1.0, "INFO pipeline: log file: /nowhere.log"),
                               ours(8.0, committed.format(0))])  # fmt: skip
    # the cold restart: every milestone after the kill at 10.0
    write_driver(
        tmp_path,
        1,
        [ours(11.0, "INFO pipeline: log file: "), ours(19.5, committed.format(4))],
        [
            ours(12.0, "INFO pipeline.commit.lease: took the lease (generation 3)"),
            ours(12.1, "INFO pipeline.commit.coordinator: pipeline p: writer epoch 4 acquired"),
            sparks(15.0, "INFO SharedState: Warehouse path is 'file:/w'."),
            sparks(17.0, "INFO MicroBatchExecution: Starting ingest-p [id = a, runId = b]."),
            sparks(17.5, "INFO MicroBatchExecution: Resuming at batch 4 with committed offsets"),
            sparks(18.0, "INFO MicroBatchExecution: Committed offsets for batch 4. Metadata"),
            ours(19.5, committed.format(4)),
            ours(39.9, committed.format(9)),  # before the next fault: not the standby's
        ],
    )
    # a warm standby: session and rehearsal before the kill of the active at 40.0
    write_driver(
        tmp_path,
        2,
        [ours(26.0, "INFO pipeline: log file: ")],
        [
            sparks(30.0, "INFO SharedState: Warehouse path is 'file:/w'."),
            sparks(31.0, "INFO MicroBatchExecution: Starting ingest-p-rehearsal [id = c]."),
            sparks(31.5, "INFO MicroBatchExecution: Committed offsets for batch 0. Metadata"),
            ours(40.05, "INFO pipeline.standby.replica: took over the lease (generation 4)"),
            ours(40.15, "INFO pipeline.commit.coordinator: pipeline p: writer epoch 5 acquired"),
            sparks(40.25, "INFO MicroBatchExecution: Starting ingest-p [id = a, runId = d]."),
            # batch 10 was the killed driver's: Spark runs it again, the driver recommits it
            sparks(40.8, "INFO MicroBatchExecution: Resuming at batch 10 with committed offsets"),
            ours(
                41.3, "INFO pipeline.formats.iceberg.catalog_table: commit of batch 10 (a): 2 files"
            ),
            sparks(41.5, "INFO MicroBatchExecution: Committed offsets for batch 11. Metadata"),
            ours(41.9, committed.format(11)),
        ],
    )
    events = [
        FaultEvent(0.0, "start", "driver 0"),
        FaultEvent(10.2, "kill-solo", "SIGKILL driver 0, no standby"),  # stamped after it
        FaultEvent(10.05, "start", "driver 1"),
        FaultEvent(20.0, "recovered", "10.0s"),
        FaultEvent(25.0, "start", "driver 2"),
        FaultEvent(40.0, "kill-active", "SIGKILL active driver 1, driver 2 warm"),
        FaultEvent(41.4, "recovered", "1.4s"),
    ]
    result = DrillResult("soak", "iceberg", events=events, recover_s=[10.0, 1.4], started_at=T0)
    return result, tmp_path


def test_a_cold_restart_is_split_at_every_milestone_of_the_new_driver(
    drill: tuple[DrillResult, Path],
) -> None:
    cold, _ = recoveries(*drill)
    assert (cold.kind, cold.driver, cold.total_s) == ("kill-solo", 1, 10.0)
    assert cold.segments == {
        "launch": 0.05, "logging": 0.95, "lease": 1.0, "epoch": 0.1, "session": 2.9,
        "query": 2.0, "init": 0.5, "plan": 0.5, "commit": 1.5, "seen": 0.5,
    }  # fmt: skip


def test_a_take_over_counts_only_what_the_standby_did_after_the_kill(
    drill: tuple[DrillResult, Path],
) -> None:
    _, warm = recoveries(*drill)
    assert (warm.kind, warm.driver) == ("kill-active", 2)  # driver 1's commit came before
    # no launch, session or rehearsal (the standby had them before the kill), no plan (a
    # plan after the first commit is a later batch's)
    assert warm.segments == {
        "lease": 0.05, "epoch": 0.1, "query": 0.1, "init": 0.55, "commit": 0.5, "seen": 0.1,
    }  # fmt: skip
    assert medians(recoveries(*drill))["kill-active"]["query"] == 0.1


def test_a_report_without_the_drills_wall_clock_is_refused(
    drill: tuple[DrillResult, Path],
) -> None:
    result, work = drill
    result.started_at = 0.0
    with pytest.raises(ValueError, match="started_at"):
        recoveries(result, work)
