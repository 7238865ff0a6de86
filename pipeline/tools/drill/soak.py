"""Soak drill (``ingest drill --soak MINUTES``): one long drill of random faults against
a warm-standby pair, then the exactly-once count of every other drill.

Every driver runs with ``ha.mode=auto`` (the first holds the lease and writes, the next
stands by and warms up). Once the pair is up (the first commit in, the standby warm), for
MINUTES a producer writes at ``--rate`` and faults are injected at random
(``random.Random(seed)``, the seed is in the report), one every 4-9 s plus the active's
next commit and whatever the previous fault's recovery took (~12-15 s on average):

* ``kill-active`` — with a warm standby ("standing by, warm" in its log): SIGKILL the
  active's process group 0-1 s after a commit; the standby must take over ("took over
  the lease") and commit. Recovery ``warm``: the kill to its first commit. A new standby
  is started.
* ``kill-standby`` — SIGKILL the standby, warm or still warming; then either start a new
  one or not (the next fault is then ``kill-solo``). The active must keep committing.
* ``kill-solo`` — no standby running: SIGKILL the only driver, start a new one. Recovery
  ``cold``: the kill to the new driver's first commit. Then a new standby.
* ``checkpoint-deleted`` — every 5 minutes (once, halfway, in a soak under 10 minutes):
  stop both drivers with SIGTERM (a standby still warming up stops only once warm: after
  20 s it is SIGKILLed, noted), delete the Spark checkpoint, start again; the pipeline
  must resume from the table's offsets. Recovery ``checkpoint``: the start to the first
  commit.

A warm standby is needed for ``kill-active``, but a standby killed while warming starts
from zero, so the picker (:class:`FaultPicker`) sometimes lets the standby warm (then
kills the active) and sometimes kills it; behind a pace of one kill per 14 s (a slow
host: warm-up took ~35 s, a cold start ~20 s on a loaded 2-core one) it kills the
warming standby and starts another more often. The first kill-active and the first
kill-solo come as soon as they can, so a short soak has each.

What it asserts (``problems`` in the report, verdict FAILED): 0 missing and 0 duplicated
records (``Rig.verify``: every acknowledged (topic, partition, offset) once in the
tables, and ``ingest verify``); every kill-active taken over by the standby; the active
commits after every fault; no driver exits by itself (an active that lost its lease on a
starved host is a note, counted as an unplanned exit); no wait times out. Every wait is
bounded: a timeout is a problem that ends the faults; the soak still drains and verifies.
Report: ``soak-<format>.json`` (the drill plus a ``soak`` summary: kills by kind,
recovery median / p90 / max by kind, checkpoint deletions, counts, verdict) and
``soak-<format>.png`` (the timeline).
"""

from __future__ import annotations

import random
import shutil
import statistics
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rich.console import Console, Group
from rich.text import Text

from pipeline.tools.drill.harness import DrillTimeout, DriverProcess, Rig, broker_info
from pipeline.tools.drill.model import DrillResult, DrillSpec, Recovery, TableFormat
from pipeline.tools.drill.report import summary_table, write_json, write_timeline
from pipeline.tools.drill.runner import DrillOptions, live_display, run_one

StandbyState = Literal["none", "warming", "warm"]
KILLS = ("kill-active", "kill-standby", "kill-solo")
CHECKPOINT = "checkpoint-deleted"
AWAIT_WARM = "await-warm"  # a pick that injects nothing: let the standby get warm
RECOVERY_KINDS = ("warm", "cold", "checkpoint", "unplanned")
HA = ("ha.mode=auto",)
WARM_LINE = "standing by, warm"
TOOK_OVER_LINE = "took over the lease"

GAP_S = (4.0, 9.0)  # from one fault to the next, then the active's next commit
KILL_DELAY_S = 1.0  # an active is killed 0-1 s after a commit: anywhere in a batch
TARGET_INTERVAL_S = 14.0  # behind this pace a warming standby is killed more often
P_KILL_ACTIVE = 0.7  # a warm standby: kill the active, else the standby
P_KILL_WARMING = (0.4, 0.9)  # a warming standby (on pace, behind): kill it, else let it warm
P_RESPAWN = (0.4, 0.8)  # after kill-standby (on pace, behind): start another, else kill-solo
CHECKPOINT_EVERY_S = 300.0
CHECKPOINT_TAIL_S = 30.0  # no checkpoint deletion this close to the end of the faults
# bounds of every wait: a slow host stretches a soak, a stuck driver fails it, never a hang
FIRST_COMMIT_TIMEOUT_S = 480.0
COLD_TIMEOUT_S = 300.0
TAKEOVER_TIMEOUT_S = 120.0
WARM_TIMEOUT_S = 240.0
PROGRESS_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 480.0
STANDBY_STOP_S = 20.0  # SIGTERM grace of a standby (one still warming up stops after it)
MAX_LABELS = 40  # a longer soak's timeline draws its faults without labels


# -- the schedule (pure) ---------------------------------------------------------------
@dataclass(frozen=True)
class Pick:
    """The next fault (or :data:`AWAIT_WARM`: let the standby get warm, then kill the
    active); ``respawn``: after a kill-standby, start another standby at once."""

    kind: str
    respawn: bool = True


class FaultPicker:
    """The soak's random choices, from one seed: gaps, kill delays, faults."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def gap(self) -> float:
        return self.rng.uniform(*GAP_S)

    def kill_delay(self) -> float:
        return self.rng.uniform(0.0, KILL_DELAY_S)

    def pick(self, standby: StandbyState, counts: Mapping[str, int], behind: bool) -> Pick:
        """The fault the state allows: kill-solo needs no standby, kill-active a warm one.
        The first kill-active and kill-solo are not left to chance."""
        if standby == "none":
            return Pick("kill-solo")
        if standby == "warm":
            if not counts.get("kill-active") or self.rng.random() < P_KILL_ACTIVE:
                return Pick("kill-active")
            return Pick("kill-standby", self._respawn(counts, behind))
        if not counts.get("kill-active"):
            return Pick(AWAIT_WARM)
        if not counts.get("kill-solo"):
            return Pick("kill-standby", respawn=False)
        if self.rng.random() < P_KILL_WARMING[int(behind)]:
            return Pick("kill-standby", self._respawn(counts, behind))
        return Pick(AWAIT_WARM)

    def _respawn(self, counts: Mapping[str, int], behind: bool) -> bool:
        return bool(counts.get("kill-solo")) and self.rng.random() < P_RESPAWN[int(behind)]


def behind(kills: int, elapsed_s: float) -> bool:
    """Fewer kills than one per :data:`TARGET_INTERVAL_S` so far."""
    return kills < elapsed_s / TARGET_INTERVAL_S


def checkpoint_times(duration_s: float) -> list[float]:
    """Seconds into the faults of each checkpoint deletion: every 5 minutes, halfway in
    a soak under 10 minutes, none in the last :data:`CHECKPOINT_TAIL_S`."""
    every = min(CHECKPOINT_EVERY_S, duration_s / 2)
    times, t = [], every
    while every > 0 and t <= duration_s - CHECKPOINT_TAIL_S:
        times.append(round(t, 1))
        t += every
    return times


@dataclass(frozen=True)
class Timings:
    """Modelled durations (s) of a 2-core host, for :func:`simulate`."""

    warm: float = 15.0  # a standby's start to "standing by, warm"
    takeover: float = 2.5  # kill-active to the standby's first commit
    cold: float = 13.0  # a start to the first commit
    commit: float = 1.0  # the active's next commit
    stop: float = 5.0  # stopping both drivers cleanly


def simulate(minutes: float, seed: int, t: Timings = Timings()) -> Counter[str]:
    """The faults the live soak (:meth:`SoakRun.faults`) injects in ``minutes`` when
    every step takes its modelled time: the schedule's pace, without a cluster."""
    picker = FaultPicker(seed)
    counts: Counter[str] = Counter()
    duration = minutes * 60.0
    ckpts = checkpoint_times(duration)
    now = last = 0.0
    standby_since: float | None = -t.warm  # the clock starts with the pair up
    while True:
        now = max(now, last + picker.gap()) + t.commit
        if now >= duration:
            return counts
        if ckpts and now >= ckpts[0]:
            ckpts.pop(0)
            counts[CHECKPOINT] += 1
            last = now + t.stop
            now, standby_since = last + t.cold, last + t.cold
            continue
        state: StandbyState = (
            "none"
            if standby_since is None
            else ("warm" if now - standby_since >= t.warm else "warming")
        )
        pick = picker.pick(state, counts, behind(sum(counts[k] for k in KILLS), now))
        if pick.kind == AWAIT_WARM:
            assert standby_since is not None
            now = max(now, standby_since + t.warm)
            if now >= duration:
                return counts
            pick = Pick("kill-active")
        if pick.kind in ("kill-active", "kill-solo"):
            now += t.commit + picker.kill_delay()
        last = now
        counts[pick.kind] += 1
        if pick.kind == "kill-active":
            now += t.takeover
            standby_since = now
        elif pick.kind == "kill-standby":
            standby_since = now if pick.respawn else None
        else:
            now += t.cold
            standby_since = now


# -- the record and its summary (pure) ---------------------------------------------------
@dataclass(frozen=True)
class SoakRecovery:
    kind: str  # warm | cold | checkpoint | unplanned
    recovery: Recovery  # its first_commit is filled in by the rig's sampler


@dataclass
class SoakLog:
    """What the soak did, beside the drill result."""

    minutes: float
    seed: int
    counts: Counter[str] = field(default_factory=Counter)
    recoveries: list[SoakRecovery] = field(default_factory=list)
    unplanned_exits: int = 0
    fault_s: float = 0.0  # the fault phase as it ran (first commit to the last fault)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated ``q`` percentile (0-100) of a non-empty sequence."""
    v = sorted(values)
    pos = (len(v) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def recovery_stats(seconds: Sequence[float]) -> dict[str, Any]:
    if not seconds:
        return {"n": 0, "median": None, "p90": None, "max": None}
    return {
        "n": len(seconds),
        "median": round(statistics.median(seconds), 2),
        "p90": round(percentile(seconds, 90), 2),
        "max": round(max(seconds), 2),
    }


def summarize(result: DrillResult, log: SoakLog) -> dict[str, Any]:
    """The soak section of the report."""
    by_kind: dict[str, list[float]] = {k: [] for k in RECOVERY_KINDS}
    unrecovered: Counter[str] = Counter()
    for r in log.recoveries:
        secs = r.recovery.seconds
        if secs is None:
            unrecovered[r.kind] += 1
        else:
            by_kind.setdefault(r.kind, []).append(round(secs, 2))
    kills = {k: log.counts.get(k, 0) for k in KILLS}
    total = sum(kills.values())
    return {
        "minutes": log.minutes,
        "seed": log.seed,
        "format": result.table_format,
        "fault_s": round(log.fault_s, 1),
        "kills": {**kills, "total": total},
        "mean_kill_interval_s": round(log.fault_s / total, 1) if total else None,
        "checkpoint_deletions": log.counts.get(CHECKPOINT, 0),
        "recovery_s": {k: recovery_stats(v) for k, v in by_kind.items() if v},
        "recoveries_without_commit": dict(unrecovered),
        "unplanned_exits": log.unplanned_exits,
        "produced": result.produced,
        "committed": result.committed,
        "missing": result.missing,
        "duplicated": result.duplicated,
        "duration_s": result.duration_s,
        "verdict": result.verdict,
    }


def summary_line(s: dict[str, Any], problems: Sequence[str] = ()) -> str:
    """The one line printed at the end, like every drill's."""
    kills = s["kills"]
    kinds = ", ".join(f"{kills[k]} {k}" for k in KILLS)
    rec = ", ".join(
        f"{k} {v['median']:.1f}/{v['p90']:.1f}/{v['max']:.1f}s (n={v['n']})"
        for k, v in s["recovery_s"].items()
    )
    line = (
        f"soak/{s['format']}: {s['verdict']} ({s['duration_s']:.0f}s, seed {s['seed']}, "
        f"{kills['total']} kills: {kinds}; {s['checkpoint_deletions']} checkpoint "
        f"deletion(s); recovery median/p90/max {rec or '-'}; {s['produced']} produced, "
        f"{s['missing']} missing, {s['duplicated']} duplicated)"
    )
    return line + (f" — {'; '.join(problems)[:300]}" if problems else "")


# -- the live soak ------------------------------------------------------------------------
class SoakRun:
    """One soak on a rig: the fault loop, then drain and verify."""

    def __init__(self, rig: Rig, log: SoakLog) -> None:
        self.rig, self.log = rig, log
        self.picker = FaultPicker(log.seed)
        self.active: DriverProcess | None = None
        self.standby: DriverProcess | None = None
        self.mark = 0  # the commit count after the last fault: the active must pass it

    def run(self) -> None:
        try:
            self.faults()
        except DrillTimeout as e:
            self.rig.result.problems.append(f"{e} (faults ended there; drained, verified)")
        self.drain()
        self.rig.verify()

    # -- the fault loop ---------------------------------------------------------------------
    def faults(self) -> None:
        rig = self.rig
        self.active = self._start()
        first = self.active
        rig.wait_until(
            lambda: rig.commit_count > 0 or not first.alive(),
            FIRST_COMMIT_TIMEOUT_S,
            "for the first commit",
        )
        self._reconcile()
        self.standby = self._start()
        self._await_warm(float("inf"))  # the soak's clock starts with the pair up
        t0 = rig.now()
        duration = self.log.minutes * 60.0
        ckpts = [t0 + t for t in checkpoint_times(duration)]
        self.mark, last = rig.commit_count, t0
        try:
            while True:
                self._pace(last + self.picker.gap())
                self._await_progress()
                now = rig.now()
                if now >= t0 + duration:
                    break
                if ckpts and now >= ckpts[0]:
                    ckpts.pop(0)
                    last = self.checkpoint_deleted()
                else:
                    kills = sum(self.log.counts[k] for k in KILLS)
                    pick = self.picker.pick(self._state(), self.log.counts, behind(kills, now - t0))
                    if pick.kind == AWAIT_WARM:
                        if not self._await_warm(t0 + duration):
                            continue
                        pick = Pick("kill-active")
                    last = self._inject(pick)
                self.mark = rig.commit_count
        finally:
            self.log.fault_s = rig.now() - t0

    def _inject(self, pick: Pick) -> float:
        if pick.kind == "kill-active":
            return self.kill_active()
        if pick.kind == "kill-standby":
            return self.kill_standby(pick.respawn)
        return self.kill_solo()

    def kill_active(self) -> float:
        a, s = self.active, self.standby
        assert a is not None and s is not None
        self._after_commit()
        t = self.rig.now()
        a.kill()
        self._fault("kill-active", f"SIGKILL active driver {a.n}, driver {s.n} warm")
        self.active, self.standby = s, None
        r = self._recovery("warm", t)
        self._await_recovery(r, s, TAKEOVER_TIMEOUT_S, f"for driver {s.n} to take over")
        if TOOK_OVER_LINE not in s.log():
            self.rig.result.problems.append(f"driver {s.n} committed without taking over")
        self.standby = self._start()
        return t

    def kill_standby(self, respawn: bool) -> float:
        s = self.standby
        assert s is not None
        warm = WARM_LINE in s.log()
        t = self.rig.now()
        s.kill()
        self._fault(
            "kill-standby", f"SIGKILL standby driver {s.n} ({'warm' if warm else 'warming'})"
        )
        self.standby = self._start() if respawn else None
        return t

    def kill_solo(self) -> float:
        a = self.active
        assert a is not None and self.standby is None
        self._after_commit()
        t = self.rig.now()
        a.kill()
        self._fault("kill-solo", f"SIGKILL driver {a.n}, no standby")
        r = self._recovery("cold", t)
        self.active = self._start()
        self._await_recovery(r, self.active, COLD_TIMEOUT_S, "for the restarted driver")
        self.standby = self._start()
        return t

    def checkpoint_deleted(self) -> float:
        """Stop both drivers (the standby first: it would take the released lease), delete
        the checkpoint, start again from the table's offsets."""
        self._stop_standby()
        a = self.active
        assert a is not None
        rc = a.stop()
        self.rig.event("stop", f"driver {a.n} stopped ({rc})")
        if rc != 0:
            self.rig.result.notes.append(f"driver {a.n} exited {rc} on SIGTERM")
        path = self.rig.cfg.checkpoint_location
        shutil.rmtree(path, ignore_errors=True)
        self._fault(CHECKPOINT, path)
        t = self.rig.now()
        r = self._recovery("checkpoint", t)
        self.active = self._start()
        self._await_recovery(r, self.active, COLD_TIMEOUT_S, "after the checkpoint deletion")
        self.standby = self._start()
        return t

    def drain(self) -> None:
        """Stop the standby, stop producing, let the active commit everything, stop it."""
        rig = self.rig
        self._stop_standby()
        rig.producer.stop()
        rig.event("drain", "producer stopped")
        a = self.active
        if a is None or not a.alive():
            if a is not None:
                a.reap()
            a = self.active = self._start()
        rig.wait_until(rig.caught_up, DRAIN_TIMEOUT_S, "draining to the produced end offsets")
        rc = a.stop()
        rig.event("stop", f"driver {a.n} stopped ({rc})")
        time.sleep(1.0)

    # -- helpers -----------------------------------------------------------------------------
    def _start(self) -> DriverProcess:
        return self.rig.start_driver(sets=HA, restart=False)

    def _fault(self, kind: str, detail: str) -> None:
        self.log.counts[kind] += 1
        self.rig.event(kind, detail)

    def _state(self) -> StandbyState:
        s = self.standby
        if s is None:
            return "none"
        return "warm" if WARM_LINE in s.log() else "warming"

    def _stop_standby(self) -> None:
        s, self.standby = self.standby, None
        if s is not None:
            t = time.monotonic()
            rc = s.stop(timeout=STANDBY_STOP_S)
            self.rig.event("stop", f"standby driver {s.n} stopped ({rc})")
            if rc == -9:
                self.rig.result.notes.append(
                    f"standby driver {s.n} ({'warm' if WARM_LINE in s.log() else 'warming'}) "
                    f"still running {time.monotonic() - t:.0f}s after SIGTERM: SIGKILLed"
                )

    def _recovery(self, kind: str, since: float) -> Recovery:
        self.rig.result.restarts += 1
        r = self.rig.recovery_from_now(since=since)
        self.log.recoveries.append(SoakRecovery(kind, r))
        return r

    def _await_recovery(self, r: Recovery, d: DriverProcess, timeout: float, what: str) -> None:
        def done() -> bool:
            if not d.alive():
                raise DrillTimeout(
                    f"soak: driver {d.n} exited ({d.poll()}) waiting {what}: "
                    f"{d.error_line() or d.stderr()[-300:]}"
                )
            return r.first_commit is not None

        self.rig.wait_until(done, timeout, f"waiting {what}")

    def _after_commit(self) -> None:
        """Wait for the active's next commit, then 0-1 s: a kill anywhere in a batch."""
        a = self.active
        assert a is not None
        target = self.rig.commit_count + 1
        self.rig.wait_until(
            lambda: self.rig.commit_count >= target or not a.alive(),
            PROGRESS_TIMEOUT_S,
            f"for a commit of driver {a.n}",
        )
        time.sleep(self.picker.kill_delay())

    def _pace(self, until: float) -> None:
        while self.rig.now() < until:
            self._reconcile()
            time.sleep(0.2)

    def _await_progress(self) -> None:
        """The active commits after every fault (a killed standby must not stop it)."""
        a, mark = self.active, self.mark
        assert a is not None
        self.rig.wait_until(
            lambda: self.rig.commit_count > mark or not a.alive(),
            PROGRESS_TIMEOUT_S,
            f"for driver {a.n} to commit after the last fault",
        )
        self._reconcile()

    def _await_warm(self, deadline: float) -> bool:
        """Until the standby is warm (True), it exits, or the faults are over."""
        s = self.standby
        assert s is not None
        self.rig.wait_until(
            lambda: WARM_LINE in s.log() or not s.alive() or self.rig.now() >= deadline,
            WARM_TIMEOUT_S,
            f"for driver {s.n} to stand by warm",
        )
        self._reconcile()
        return self._state() == "warm"

    def _reconcile(self) -> None:
        """Drivers that exited by themselves. A standby must not; an active may have lost
        its lease (a starved host, the standby took over: noted), anything else is a
        problem. The standby (or a new driver) becomes the active."""
        s = self.standby
        if s is not None and not s.alive():
            self._exited(s, "standby")
            self.standby = None
        a = self.active
        if a is None or a.alive():
            return
        self._exited(a, "active")
        t = self.rig.now()
        if self.standby is not None:
            self.active, self.standby = self.standby, None
        else:
            self.active = self._start()
        r = self._recovery("unplanned", t)
        self._await_recovery(r, self.active, COLD_TIMEOUT_S, "after an unplanned exit")

    def _exited(self, d: DriverProcess, role: str) -> None:
        d.reap()
        self.log.unplanned_exits += 1
        line = d.error_line()
        msg = f"{role} driver {d.n} exited {d.poll()} by itself: {line[:200] or d.stderr()[-200:]}"
        lease_lost = role == "active" and any(w in line for w in ("lease", "fenced"))
        (self.rig.result.notes if lease_lost else self.rig.result.problems).append(msg)


# -- the command ----------------------------------------------------------------------------
def run_soak(
    minutes: float, table_format: TableFormat, seed: int, opts: DrillOptions, console: Console
) -> tuple[DrillResult, dict[str, Any]]:
    """Run one soak, write ``soak-<format>.json`` and ``.png`` under ``opts.out``, print
    the one-line summary; the result and the soak summary."""
    spec = DrillSpec("soak", table_format, kills=0, rate=opts.rate)
    log = SoakLog(minutes=minutes, seed=seed)
    status = [f"soak/{table_format}: starting", ""]
    started = time.monotonic()

    def render() -> Group:
        kills = sum(log.counts[k] for k in KILLS)
        return Group(
            Text(
                f"soak {minutes:g} min, seed {seed}, elapsed {time.monotonic() - started:.0f}s, "
                f"kills {kills} ({', '.join(f'{k} {log.counts[k]}' for k in KILLS)})",
                style="bold",
            ),
            Text(status[0]),
            Text(status[1]),
        )

    with live_display(console, render):
        result = run_one(spec, opts, status, body=lambda rig: SoakRun(rig, log).run())
    summary = summarize(result, log)
    broker = broker_info(opts.bootstrap)
    meta = {
        "soak": summary,
        "rate": opts.rate,
        "broker": broker,
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    report = write_json([result], meta, opts.out / f"soak-{table_format}.json")
    png = write_timeline(
        [result], opts.out / f"soak-{table_format}.png", max_labels=MAX_LABELS, compact=True
    )
    wide = console if console.is_terminal else Console(file=console.file, width=160)
    wide.print(summary_table([result], broker["description"]))
    console.print(summary_line(summary, result.problems))
    console.print(f"report: {report}, timeline: {png or '-'}")
    return result, summary
