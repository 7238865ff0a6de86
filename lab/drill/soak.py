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

import shutil
import time
from typing import Any

from rich.console import Console, Group
from rich.text import Text

from lab.drill.brokers import broker_info
from lab.drill.driver import DriverProcess
from lab.drill.model import DrillResult, DrillSpec, DrillTimeout, Recovery, TableFormat
from lab.drill.report import summary_table, write_json, write_timeline
from lab.drill.rig import Rig
from lab.drill.runner import DrillOptions, live_display, run_one
from lab.drill.soak_schedule import (
    AWAIT_WARM,
    CHECKPOINT,
    KILLS,
    FaultPicker,
    Pick,
    StandbyState,
    behind,
    checkpoint_times,
)
from lab.drill.soak_summary import SoakLog, SoakRecovery, summarize, summary_line

HA = ("ha.mode=auto",)
WARM_LINE = "standing by, warm"
TOOK_OVER_LINE = "took over the lease"
# bounds of every wait: a slow host stretches a soak, a stuck driver fails it, never a hang
FIRST_COMMIT_TIMEOUT_S = 480.0
COLD_TIMEOUT_S = 300.0
TAKEOVER_TIMEOUT_S = 120.0
WARM_TIMEOUT_S = 240.0
PROGRESS_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 480.0
STANDBY_STOP_S = 20.0  # SIGTERM grace of a standby (one still warming up stops after it)
MAX_LABELS = 40  # a longer soak's timeline draws its faults without labels


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
