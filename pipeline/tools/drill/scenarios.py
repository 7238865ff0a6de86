"""One function per drill scenario. Each runs against a ``Rig`` and fills its result.

Every scenario ends the same way: the producer stops, a healthy driver drains the topic,
and the tables are counted against the producer's acknowledged offsets. What each
scenario proves is in docs/drills.md.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pipeline.commit.offsets import TopicPartition
from pipeline.tools.drill.harness import DrillTimeout, DriverProcess, Rig

# Driver fault points in the order that exercises every recovery path: the run after
# after-requested/after-write rolls back, during-rollback dies inside that rollback,
# after-precommit/after-dead-letter-commit are recommitted, after-commit-before-checkpoint
# is replayed and skipped (tests/test_recovery_spark.py CHAIN).
KILL_POINTS = (
    "after-requested",
    "after-write",
    "during-rollback",
    "after-precommit",
    "after-dead-letter-commit",
    "after-commit",
    "after-commit-before-checkpoint",
)
# the both table format: the Iceberg table committed, the Hudi table not yet (rolled forward)
DUAL_KILL_POINTS = (*KILL_POINTS[:-2], "between-table-commits", *KILL_POINTS[-2:])
# Driver start-up is 15-25 s on an idle 2-core machine and several minutes when other Spark
# jobs share it: generous limits, so a slow machine is not reported as a broken pipeline.
POINT_TIMEOUT_S = 360.0  # start-up + a few batches; a point not reached by then is noted
COMMIT_TIMEOUT_S = 480.0  # a (re)started driver's first commit
SCENARIOS: dict[str, Callable[[Rig], None]] = {}


class SkipDrill(Exception):
    """The scenario cannot run here (reason in the message)."""


def scenario(name: str) -> Callable[[Callable[[Rig], None]], Callable[[Rig], None]]:
    def register(fn: Callable[[Rig], None]) -> Callable[[Rig], None]:
        SCENARIOS[name] = fn
        return fn

    return register


def _exited(d: DriverProcess) -> Callable[[], bool]:
    return lambda: not d.alive()


def _wait_recovered(rig: Rig, timeout: float, what: str) -> None:
    """Wait for the commit that closes the latest recovery; restart a driver that died."""

    def recovered() -> bool:
        d = rig.driver
        if d is not None and not d.alive():
            d.reap()
            rig.result.notes.append(f"driver {d.n} exited {d.poll()}: {d.error_line()[:160]}")
            rig.start_driver()
        return rig.recoveries[-1].first_commit is not None

    rig.wait_until(recovered, timeout, what)


def _first_commit(rig: Rig) -> None:
    rig.start_driver(restart=False)
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)


def _finish(rig: Rig) -> None:
    rig.drain()
    rig.verify()


@scenario("kill")
def kill(rig: Rig) -> None:
    """SIGKILL the driver at each named fault point, then at random times, ``kills`` times."""
    rng = random.Random(rig.spec.kills)
    named = DUAL_KILL_POINTS if rig.spec.table_format == "both" else KILL_POINTS
    points = list(named[: rig.spec.kills])
    kills = 0
    # fault-point kills: each run is armed with the next point and dies there by itself
    for i, point in enumerate(points):
        d = rig.start_driver(fault=f"{point}:kill", restart=i > 0)
        try:
            rig.wait_until(_exited(d), POINT_TIMEOUT_S, f"for fault {point}")
        except DrillTimeout:
            rig.kill_driver(f"SIGKILL (random; {point} not reached)")
            rig.result.notes.append(f"{point} not reached within {POINT_TIMEOUT_S:.0f}s")
            kills += 1
            continue
        d.reap()
        rc = d.poll()
        if rc != -9:
            rig.result.problems.append(
                f"driver armed with {point} exited {rc}: {d.error_line() or d.stderr()[-300:]}"
            )
        rig.event("kill", f"{point}")
        kills += 1
    # random-time kills: after the restarted driver committed, kill it mid-batch
    while kills < rig.spec.kills:
        rig.start_driver(restart=bool(rig.drivers))
        rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
        time.sleep(rng.uniform(0.0, 2.5))
        rig.kill_driver("SIGKILL random")
        kills += 1
    rig.start_driver()
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    _finish(rig)


@scenario("task-failure")
def task_failure(rig: Rig) -> None:
    """A worker process dies inside each task's first attempt (after staging its files),
    then raises instead; Spark retries every task. Faults = batches whose tasks all failed
    once (every batch of the armed drivers that carried records)."""
    rig.start_driver(fault="mid-write:kill", restart=False)
    rig.event("task-kill", "mid-write: worker SIGKILLed in every first attempt")
    rig.wait_commits(5, timeout=COMMIT_TIMEOUT_S)
    assert rig.driver is not None
    rig.driver.stop()
    rig.start_driver(fault="mid-write:raise")
    rig.event("task-raise", "mid-write: exception in every first attempt")
    rig.wait_commits(3, timeout=COMMIT_TIMEOUT_S)
    _finish(rig)
    rig.result.faults = sum(
        1
        for d in rig.drivers
        for ln in d.batch_lines()
        if ln.get("outcome") == "committed" and ln.get("records", 0) > 0
    )


def _need_embedded(rig: Rig) -> Any:
    if rig.broker.embedded is None:
        raise SkipDrill("broker faults need the embedded broker (not available with --bootstrap)")
    return rig.broker.embedded


def _supervise(rig: Rig, seconds: float) -> None:
    """Keep a driver running for ``seconds``: restart it if it exits (counted)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        d = rig.driver
        if d is not None and not d.alive():
            d.reap()
            rig.result.notes.append(f"driver {d.n} exited {d.poll()}: {d.error_line()[:160]}")
            rig.start_driver()
        time.sleep(0.5)


@scenario("broker-outage")
def broker_outage(rig: Rig) -> None:
    """Leader changes mid-batch, one broker down, then every broker down, then back."""
    broker = _need_embedded(rig)
    _first_commit(rig)
    parts = range(rig.spec.partitions)
    for p in parts:  # leader change mid-batch (batches run back to back at 1 s)
        broker.set_partition_leader(rig.topic, p, 1 + (p % 3))
    rig.event("leader-change", "every partition to a new leader")
    rig.recovery_from_now()
    rig.wait_commits(2, timeout=COMMIT_TIMEOUT_S)
    for p in parts:
        broker.set_partition_leader(rig.topic, p, 2)
    rig.event("leader-change", "every partition to broker 2")
    broker.broker_down(2)
    rig.event("broker-down", "broker 2 (leader of all partitions) down 8 s")
    _supervise(rig, 8)
    broker.broker_up(2)
    rig.event("broker-up", "broker 2")
    rig.recovery_from_now()
    _wait_recovered(rig, COMMIT_TIMEOUT_S, "for a commit after broker 2 came back")
    for b in range(1, rig.broker.brokers + 1):
        broker.broker_down(b)
    rig.event("broker-down", "all brokers down 10 s")
    _supervise(rig, 10)
    for b in range(1, rig.broker.brokers + 1):
        broker.broker_up(b)
    rig.event("broker-up", "all brokers")
    rig.recovery_from_now()
    _wait_recovered(rig, COMMIT_TIMEOUT_S, "for a commit after the outage")
    _finish(rig)


@scenario("zombie")
def zombie(rig: Rig) -> None:
    """A second driver starts while the first runs; the first must be fenced and stop."""
    _first_commit(rig)
    first = rig.driver
    assert first is not None
    rig.start_driver(restart=False)
    rig.event(
        "zombie", f"driver {rig.driver.n if rig.driver else '?'} started beside driver {first.n}"
    )
    try:
        rig.wait_until(lambda: not first.alive(), 240, "for the old driver to stop")
    except DrillTimeout:
        rig.result.problems.append("the old driver was not fenced within 240 s")
        first.kill()
    first.reap()
    # Both drivers commit until the old one is fenced, so a commit right after the second
    # start is not the takeover's. Time to recover is the stall an operator sees: from the
    # fenced driver's exit to the next commit.
    rig.result.restarts += 1
    rig.recovery_from_now()
    msg = first.error_line()
    fence_words = ("superseded", "fenced", "must stop")  # coordinator / table fence messages
    if first.poll() != 2 or not any(w in msg for w in fence_words):
        rig.result.problems.append(
            f"old driver exited {first.poll()} without a fence message: {msg!r}"
        )
    else:
        rig.result.notes.append(f"old driver: {msg[:160]}")
    rig.wait_commits(2, timeout=COMMIT_TIMEOUT_S)
    _finish(rig)


def _standing_by(d: DriverProcess) -> Callable[[], bool]:
    return lambda: "standing by, warm" in d.log()


def _await_takeover(rig: Rig, d: DriverProcess) -> None:
    """The active just died or froze: count a restart, wait for ``d``'s first commit."""
    rig.result.restarts += 1
    rig.recovery_from_now()
    rig.wait_until(
        lambda: rig.recoveries[-1].first_commit is not None,
        COMMIT_TIMEOUT_S,
        f"for driver {d.n} to take over",
    )


@scenario("standby")
def standby(rig: Rig) -> None:
    """Two replicas with ``ha.mode: auto``; SIGKILL the active ``kills`` times. The warm
    standby takes over each time (recovery: the kill to its first commit), then a new
    standby is started beside it."""
    rng = random.Random(rig.spec.kills)
    ha = ["ha.mode=auto"]
    active = rig.start_driver(sets=ha, restart=False)
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    waiting = rig.start_driver(sets=ha, restart=False)
    for _ in range(rig.spec.kills):
        rig.wait_until(
            _standing_by(waiting),
            COMMIT_TIMEOUT_S,
            f"for driver {waiting.n} to stand by",
        )
        rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
        time.sleep(rng.uniform(0.0, 1.0))  # anywhere in a batch
        active.kill()
        rig.event("kill", f"SIGKILL active driver {active.n}")
        _await_takeover(rig, waiting)
        if "took over the lease" not in waiting.log():
            rig.result.problems.append(f"driver {waiting.n} committed without taking over")
        active, waiting = waiting, rig.start_driver(sets=ha, restart=False)
    rig.producer.stop()
    rig.event("drain", "producer stopped")
    rig.wait_until(rig.caught_up, 480, "draining to the produced end offsets")
    for d in (waiting, active):
        d.stop()
    rig.event("stop", "both replicas stopped")
    rig.verify()


@scenario("standby-pause")
def standby_pause(rig: Rig) -> None:
    """SIGSTOP the active past its lease (a long GC, a lost network): the warm standby
    takes over; SIGCONT the old one: it must commit nothing more and exit non-zero."""
    ha = ["ha.mode=auto"]
    old = rig.start_driver(sets=ha, restart=False)
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    new = rig.start_driver(sets=ha, restart=False)
    rig.wait_until(_standing_by(new), COMMIT_TIMEOUT_S, f"for driver {new.n} to stand by")
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    os.killpg(old.pid, signal.SIGSTOP)
    rig.event("pause", f"SIGSTOP active driver {old.n}")
    _await_takeover(rig, new)
    rig.wait_commits(2, timeout=COMMIT_TIMEOUT_S)  # the new active is well under way
    resumed = time.time()
    os.killpg(old.pid, signal.SIGCONT)
    rig.event("resume", f"SIGCONT driver {old.n}")
    t0 = time.monotonic()
    rig.wait_until(_exited(old), 120, f"for the resumed driver {old.n} to stop")
    exit_s = time.monotonic() - t0
    old.reap()
    late = [
        b
        for b in old.batch_lines()
        if b.get("outcome") in ("committed", "recommitted")
        and datetime.fromisoformat(str(b["ts"]).replace("Z", "+00:00")).timestamp() > resumed
    ]
    line = old.error_line()
    if old.poll() in (0, None) or not any(w in line for w in ("lease", "fenced")):
        rig.result.problems.append(f"resumed driver exited {old.poll()}: {line!r}")
    if late:
        rig.result.problems.append(f"resumed driver committed {len(late)} batch(es)")
    rig.result.notes.append(f"resumed driver stopped {exit_s:.1f}s after SIGCONT: {line[:120]}")
    _finish(rig)


@scenario("checkpoint-deleted")
def checkpoint_deleted(rig: Rig) -> None:
    """Stop, delete the Spark checkpoint, restart: resume from the table's offsets."""
    _first_commit(rig)
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    assert rig.driver is not None
    rig.driver.stop()
    shutil.rmtree(rig.cfg.checkpoint_location, ignore_errors=True)
    rig.event("checkpoint-deleted", rig.cfg.checkpoint_location)
    rig.start_driver()
    rig.wait_commits(2, timeout=COMMIT_TIMEOUT_S)
    _finish(rig)


@scenario("retention")
def retention(rig: Rig) -> None:
    """Offsets deleted while the pipeline is stopped: failOnDataLoss true stops with a
    clear error; false continues and records the loss in the commit metadata."""
    broker = _need_embedded(rig)
    _first_commit(rig)
    assert rig.driver is not None
    # Stop when caught up: a driver stopped mid-batch leaves an instant whose staged files
    # the next run recommits, so records past the committed offsets would be in the table
    # already and their deletion no loss at all.
    rig.producer.pause()
    rig.wait_until(rig.caught_up, COMMIT_TIMEOUT_S, "for the pipeline to catch up")
    rig.driver.stop()
    rig.event("stop", "driver stopped")
    committed = rig.committed_offsets(fresh=True)
    rig.producer.resume()
    tp = TopicPartition(rig.topic, 0)
    start = committed.get(tp, 0)
    gap = 40
    rig.wait_until(lambda: rig.producer.ends().get(tp, 0) >= start + gap + 10, 60, "for new data")
    broker.delete_records(rig.topic, 0, start + gap)
    rig.event("retention", f"{tp} offsets [{start}, {start + gap}) deleted")
    d = rig.start_driver()
    rig.wait_until(
        lambda: not d.alive(), COMMIT_TIMEOUT_S, "for failOnDataLoss=true to stop the driver"
    )
    d.reap()
    msg = d.error_line()
    if d.poll() != 2 or "deleted by retention" not in msg:
        rig.result.problems.append(f"failOnDataLoss=true: exit {d.poll()}, message {msg!r}")
    else:
        rig.result.notes.append(f"failOnDataLoss=true: {msg[:200]}")
    rig.start_driver(sets=["source.failOnDataLoss=false"])
    rig.event("fail-on-data-loss", "restarted with source.failOnDataLoss=false")
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    rig.producer.stop()
    rig.wait_until(rig.caught_up, COMMIT_TIMEOUT_S, "draining")
    recorded = _recorded_data_loss(rig)
    deliberate = {tp: [(start, start + gap)]}
    if recorded != deliberate:
        rig.result.problems.append(
            f"ingest.data-loss recorded {_fmt(recorded)}, deleted on purpose {_fmt(deliberate)}"
        )
    else:
        rig.result.notes.append(f"ingest.data-loss recorded: {_fmt(recorded)}")
    if rig.driver is not None:
        rig.driver.stop()
    # lost = what the table says it skipped; anything else absent is missing
    rig.verify(recorded)


def _fmt(ranges: dict[TopicPartition, list[tuple[int, int]]]) -> str:
    return (
        ", ".join(f"{tp} [{s}, {e})" for tp, ivs in sorted(ranges.items()) for s, e in ivs)
        or "nothing"
    )


def _recorded_data_loss(rig: Rig) -> dict[TopicPartition, list[tuple[int, int]]]:
    """The ``ingest.data-loss`` ranges the table's commits recorded, merged per partition."""
    from pipeline.tools.verify import recorded_data_loss

    return recorded_data_loss(rig.cfg)


@scenario("catalog-outage")
def catalog_outage(rig: Rig) -> None:
    """PostgreSQL catalog stopped for a while and restarted: wait or fail clearly, resume."""
    cluster = rig.extra.get("pg")
    if cluster is None:
        raise SkipDrill(rig.extra.get("pg_skip", "no private PostgreSQL cluster"))
    _first_commit(rig)
    cluster.stop()
    rig.event("catalog-down", "PostgreSQL stopped 15 s")
    _supervise(rig, 15)
    rig.recovery_from_now()  # the clock starts when the server is asked to start
    rig.event("catalog-up", "PostgreSQL starting")
    cluster.start()
    _wait_recovered(rig, COMMIT_TIMEOUT_S, "for a commit after the catalog came back")
    for d in rig.drivers:
        line = d.error_line()
        if d.poll() not in (None, -9, 0) and not line:
            rig.result.problems.append(f"driver {d.n} exited {d.poll()} without a one-line error")
    _finish(rig)


def private_pg_cluster() -> tuple[Any, str]:
    """A private PostgreSQL cluster (pipeline/tools/pgcluster.py) the drill may stop and
    start, or None and the reason it cannot exist here."""
    from pipeline.tools.pgcluster import PgCluster, PgClusterUnavailable

    try:
        return PgCluster.create(name=f"drill_{uuid.uuid4().hex[:8]}"), ""
    except PgClusterUnavailable as e:
        return None, str(e)
