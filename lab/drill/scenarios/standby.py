"""Warm-standby takeovers (``ha.mode: auto``): the active SIGKILLed (``standby``) or
paused past its lease and resumed (``standby-pause``); a superseded writer must commit
nothing more."""

from __future__ import annotations

import os
import random
import signal
import time
from datetime import UTC, datetime

from lab.drill.driver import DriverProcess
from lab.drill.rig import Rig
from lab.drill.scenarios.steps import (
    COMMIT_TIMEOUT_S,
    HA,
    exited,
    finish,
)
from pipeline.commit.instant import parse_instant_time


def standby(rig: Rig) -> None:
    """Two replicas with ``ha.mode: auto``; SIGKILL the active ``kills`` times. The warm
    standby takes over each time (recovery: the kill to its first commit), then a new
    standby is started beside it. Last, the active is paused past its lease and resumed
    (``standby-pause``), so one drill shows both ways of taking over."""
    rng = random.Random(rig.spec.kills)
    active = rig.start_driver(sets=HA, restart=False)
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    waiting = rig.start_driver(sets=HA, restart=False)
    for _ in range(rig.spec.kills):
        _await_warm(rig, waiting)
        time.sleep(rng.uniform(0.0, 1.0))  # anywhere in a batch
        killed_at = rig.now()  # timed from the signal, not from the process reaped
        active.kill()
        rig.event("kill", f"SIGKILL active driver {active.n}")
        _await_takeover(rig, waiting, killed_at)
        if "took over the lease" not in waiting.log():
            rig.result.problems.append(f"driver {waiting.n} committed without taking over")
        active, waiting = waiting, rig.start_driver(sets=HA, restart=False)
    _await_warm(rig, waiting)
    _pause_past_the_lease(rig, active, waiting)
    rig.producer.stop()
    rig.event("drain", "producer stopped")
    rig.wait_until(rig.caught_up, 480, "draining to the produced end offsets")
    waiting.stop()
    rig.event("stop", f"driver {waiting.n} stopped")
    rig.verify()


def standby_pause(rig: Rig) -> None:
    """SIGSTOP the active past its lease (a long GC, a lost network): the warm standby
    takes over; SIGCONT the old one: it must commit nothing more and exit non-zero."""
    old = rig.start_driver(sets=HA, restart=False)
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    new = rig.start_driver(sets=HA, restart=False)
    _await_warm(rig, new)
    _pause_past_the_lease(rig, old, new)
    finish(rig)


def _await_warm(rig: Rig, d: DriverProcess) -> None:
    """``d`` stands by warm and the active committed once more since."""
    rig.wait_until(
        lambda: "standing by, warm" in d.log(), COMMIT_TIMEOUT_S, f"for driver {d.n} to stand by"
    )
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)


def _await_takeover(rig: Rig, d: DriverProcess, since: float | None = None) -> None:
    """The active just died (at ``since``) or froze: count a restart, wait for ``d``'s
    first commit."""
    rig.result.restarts += 1
    rig.recovery_from_now(since)
    rig.wait_until(
        lambda: rig.recoveries[-1].first_commit is not None,
        COMMIT_TIMEOUT_S,
        f"for driver {d.n} to take over",
    )


def _pause_past_the_lease(rig: Rig, old: DriverProcess, new: DriverProcess) -> None:
    """SIGSTOP ``old`` (the active) until warm ``new`` took over and committed twice, then
    SIGCONT it: it must commit nothing it requested after the SIGSTOP and exit non-zero
    within the lease. A commit it had sent before (a REST catalog applies one request on
    its own while the client is frozen) may be reported once it wakes; the table's history
    must show it before the new epoch (:func:`_superseded_writes`)."""
    paused = time.time()
    os.killpg(old.pid, signal.SIGSTOP)
    rig.event("pause", f"SIGSTOP active driver {old.n}")
    _await_takeover(rig, new)
    rig.wait_commits(2, timeout=COMMIT_TIMEOUT_S)  # the new active is well under way
    resumed = time.time()
    os.killpg(old.pid, signal.SIGCONT)
    rig.event("resume", f"SIGCONT driver {old.n}")
    t0 = time.monotonic()
    rig.wait_until(exited(old), 120, f"for the resumed driver {old.n} to stop")
    exit_s = time.monotonic() - t0
    old.reap()
    reported = [b for b in old.batch_lines() if _after(b, resumed)]
    late = [b for b in reported if parse_instant_time(str(b["instant"])).timestamp() >= paused]
    in_flight = [b["batch_id"] for b in reported if b not in late]
    line = old.error_line()
    if old.poll() in (0, None) or not any(w in line for w in ("lease", "fenced", "epoch")):
        rig.result.problems.append(f"resumed driver exited {old.poll()}: {line!r}")
    if late:
        rig.result.problems.append(f"resumed driver committed {len(late)} batch(es)")
    if in_flight:
        rig.result.notes.append(
            f"resumed driver reported batch(es) {in_flight} it requested before the SIGSTOP: "
            "their commits reached the catalog before the take-over"
        )
    rig.result.problems.extend(_superseded_writes(rig, resumed))
    rig.result.notes.append(f"resumed driver stopped {exit_s:.1f}s after SIGCONT: {line[:120]}")


def _after(line: dict[str, object], since: float) -> bool:
    """A batch line logged after ``since`` (epoch seconds) with a committed outcome."""
    ts = datetime.fromisoformat(str(line["ts"]).replace("Z", "+00:00")).timestamp()
    return line.get("outcome") in ("committed", "recommitted") and ts > since


def _superseded_writes(rig: Rig, since: float) -> list[str]:
    """What the tables and the journal hold of a superseded writer: a commit whose epoch
    is below one committed before it (the table's history, read independently), or an
    instant requested after ``since`` (epoch seconds) below the newest epoch."""
    from pipeline.commit.instant import format_instant_time
    from pipeline.ops.verify import commit_epochs

    out = []
    epochs = commit_epochs(rig.cfg)
    back = [(i, e) for i, e in enumerate(epochs) if i and e < max(epochs[:i])]
    if back:
        out.append(f"table history goes back to a superseded epoch at commit(s) {back[:5]}")
    timeline = rig.tables().timeline(rig.cfg.id)
    newest = max(timeline.epochs(), default=0)
    after = format_instant_time(datetime.fromtimestamp(since, tz=UTC))
    stale = [
        i.time
        for i in timeline.instants()
        if i.time > after and i.epoch is not None and i.epoch < newest
    ]
    if stale:
        out.append(f"journal: instant(s) {stale[:5]} requested after SIGCONT at an old epoch")
    return out
