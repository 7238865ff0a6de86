"""One function per drill scenario. Each runs against a ``Rig`` and fills its result.

Every scenario ends the same way: the producer stops, a healthy driver drains the topic,
and the tables are counted against the producer's acknowledged offsets. What each
scenario proves is in docs/drills.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from pipeline.commit.offsets import TopicPartition
from pipeline.tools.broker import KafkaCluster
from pipeline.tools.cluster import StandaloneCluster, Worker
from pipeline.tools.drill.harness import DrillTimeout, DriverProcess, Rig, SkipDrill

# Driver fault points in the order that exercises every recovery path: the run after
# after-requested/after-write rolls back, during-rollback dies inside that rollback,
# after-precommit/after-dead-letter-commit are recommitted, after-commit-before-checkpoint
# is replayed and skipped (tests/test_recovery_spark.py CHAIN). Then the background
# compaction's (the drill runs with it on, compactions.DRILL_COMPACTION): killed with its
# files written but not committed (orphans; the table unchanged), then right after its
# commit (the replaced files stay until expiry); the next driver must carry on exactly.
KILL_POINTS = (
    "after-requested",
    "after-write",
    "during-rollback",
    "after-precommit",
    "after-dead-letter-commit",
    "after-commit",
    "after-commit-before-checkpoint",
    "compaction-after-write",
    "compaction-after-commit",
)
# the both table format: also between-table-commits (the Iceberg table committed, the Hudi
# table not yet: rolled forward)
DUAL_KILL_POINTS = (
    "after-requested",
    "after-write",
    "during-rollback",
    "after-precommit",
    "after-dead-letter-commit",
    "between-table-commits",
    "after-commit",
    "after-commit-before-checkpoint",
    "compaction-after-write",
    "compaction-after-commit",
)
# Driver start-up is 15-25 s on an idle 2-core machine and several minutes when other Spark
# jobs share it: generous limits, so a slow machine is not reported as a broken pipeline.
POINT_TIMEOUT_S = 360.0  # start-up + a few batches; a point not reached by then is noted
COMMIT_TIMEOUT_S = 480.0  # a (re)started driver's first commit
HA = ("ha.mode=auto",)  # the standby drills' replicas: active when free, else warm standby
SCENARIOS: dict[str, Callable[[Rig], None]] = {}


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
    """SIGKILL the driver at each named fault point, then at random times, ``kills`` times;
    background compaction runs throughout (two of the points are its own)."""
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
    rig.await_compaction()
    _finish(rig)


# executor-loss: write tasks pause after staging their files (first attempt) and the driver
# after its precommit, so the kills land inside those phases on a loaded host too
EXECUTOR_LOSS_FAULTS = "mid-write:sleep=1.5,after-precommit:sleep=1.5"
PHASE_TIMEOUT_S = 120.0
# executor log lines (Spark's default INFO log, see harness.cluster_spark) of a task's
# start and end
_TASK_LINE = re.compile(
    r"(Running|Finished|Exception in|killed) task \S+ in stage \S+ \(TID (\d+)\)"
)


@scenario("executor-loss")
def executor_loss(rig: Rig) -> None:
    """On the standalone cluster: SIGKILL a worker JVM together with its executor JVM (and
    its Python workers) ``kills`` times — while that executor runs a task of a batch's
    write stage; the 2nd, 5th, 8th … kill while the driver commits — then restart it.
    Spark reruns the lost tasks on the other executor; the driver is never restarted and
    must keep committing."""
    cluster = rig.cluster
    if cluster is None:
        raise SkipDrill("executor-loss runs on the standalone cluster (DrillSpec.cluster)")
    rng = random.Random(rig.spec.kills)
    rig.start_driver(fault=EXECUTOR_LOSS_FAULTS, restart=False)
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    write_kills = 0
    for i in range(rig.spec.kills):
        rig.wait_until(
            lambda: all(w.executor_pids() for w in cluster.workers),
            PHASE_TIMEOUT_S,
            "for an executor on every worker",
        )
        phase = "commit" if i % 3 == 1 else "write"
        n, t_kill, what = _kill_in_phase(rig, cluster, phase, rng)
        write_kills += phase == "write"
        rig.event("executor-kill", what)
        rig.recovery_from_now(since=t_kill)
        cluster.restart_worker(n)
        rig.result.restarts += 1  # the worker, not the driver
        rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)  # the driver lives on and commits
    _finish(rig)
    lost = _lost_task_attempts(rig.workdir / "spark-events")
    rig.result.notes.append(
        f"{lost} task attempt(s) lost with their executor and rerun (driver's event log)"
    )
    if write_kills and lost == 0:
        rig.result.problems.append(f"{write_kills} mid-write kill(s) but no task attempt lost")


def _kill_in_phase(
    rig: Rig, cluster: StandaloneCluster, phase: str, rng: random.Random
) -> tuple[int, float, str]:
    """Wait for ``phase`` of a batch — write: the newest instant REQUESTED and a task running
    on an executor (then 0-0.8 s more, if it still runs); commit: the newest instant
    INFLIGHT — and SIGKILL that (write) or a random (commit) worker with its descendants.
    Returns (worker slot, time of the kill, what was killed)."""
    from pipeline.commit.instant import InstantState

    want = InstantState.REQUESTED if phase == "write" else InstantState.INFLIGHT
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while time.monotonic() < deadline:
        pending = rig.tables().timeline(rig.cfg.id).pending()
        newest = pending[-1] if pending else None
        if newest is not None and newest.state is want:
            if phase == "commit":
                n = rng.randrange(len(cluster.workers))
                t, pids = rig.now(), cluster.kill_worker(n)
                return n, t, f"worker {n} mid-commit of {newest.time} ({len(pids)} processes)"
            busy = {w.n: tids for w in cluster.workers if (tids := _running_tasks(w))}
            if busy:
                n = rng.choice(sorted(busy))
                time.sleep(rng.uniform(0.0, 0.8))
                if _running_tasks(cluster.workers[n]) & busy[n]:
                    t, pids = rig.now(), cluster.kill_worker(n)
                    what = f"worker {n} mid-write, TID {sorted(busy[n])}"
                    return n, t, f"{what}, instant {newest.time} ({len(pids)} processes)"
        time.sleep(0.05)
    raise DrillTimeout(f"executor-loss: no {phase} phase seen within {PHASE_TIMEOUT_S:.0f}s")


def _running_tasks(worker: Worker) -> set[int]:
    """Task ids the worker's executor runs now, from its log (``stderr`` in its working
    directory, ``<work dir>/<app id>/<executor id>``)."""
    running: set[int] = set()
    for pid in worker.executor_pids():
        try:
            text = (Path(os.readlink(f"/proc/{pid}/cwd")) / "stderr").read_text(errors="replace")
        except OSError:
            continue
        for m in _TASK_LINE.finditer(text):
            if m[1] == "Running":
                running.add(int(m[2]))
            else:
                running.discard(int(m[2]))
    return running


def _lost_task_attempts(events: Path) -> int:
    """Task attempts that ended with ``ExecutorLostFailure`` in Spark event logs under
    ``events`` (a killed driver's log may end in a partial line)."""
    lost = 0
    for log in events.rglob("*"):
        if not log.is_file() or log.name.startswith((".", "appstatus")):
            continue
        for line in log.read_text(errors="replace").splitlines():
            if '"ExecutorLostFailure"' not in line:
                continue
            with contextlib.suppress(ValueError):
                ev = json.loads(line)
                if ev.get("Event") == "SparkListenerTaskEnd":
                    lost += ev.get("Task End Reason", {}).get("Reason") == "ExecutorLostFailure"
    return lost


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


def _need_kafka(rig: Rig) -> KafkaCluster:
    if rig.broker.kafka is None:
        raise SkipDrill(
            "broker faults need the drill's own Kafka cluster (not available with --bootstrap)"
        )
    return rig.broker.kafka


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


# A node SIGKILLed or SIGSTOPped is fenced by the controller after broker.session.timeout.ms
# (4 s here), then its partitions get new leaders; a restart takes ~3-5 s, the whole
# cluster's ~6-8 s. Bounds for those waits, generous for a loaded host.
BROKER_TIMEOUT_S = 120.0
LEADER_DOWN_S = 8.0  # the killed leader stays down at least this long
PAUSE_S = 10.0  # the paused leader stays frozen at least this long
OUTAGE_S = 10.0  # every node down this long


def _partitions(kafka: KafkaCluster, topic: str) -> dict[int, tuple[int, tuple[int, ...]]] | None:
    """Partition -> (leader, in-sync replicas) as the cluster's metadata says now; None
    when no node answered within 5 s (a paused node may be the one asked)."""
    try:
        t = kafka.admin().list_topics(topic, timeout=5).topics.get(topic)
    except KafkaException:
        return None
    if t is None or t.error is not None:
        return None
    return {p: (int(m.leader), tuple(int(r) for r in m.isrs)) for p, m in t.partitions.items()}


def _await_partitions(
    rig: Rig, kafka: KafkaCluster, ok: Callable[[int, tuple[int, ...]], bool], what: str
) -> dict[int, tuple[int, tuple[int, ...]]]:
    """Wait (bounded) until ``ok(leader, isr)`` holds for every partition of the topic; the
    metadata that showed it."""
    seen: dict[int, tuple[int, tuple[int, ...]]] = {}

    def done() -> bool:
        state = _partitions(kafka, rig.topic)
        if state is None or len(state) < rig.spec.partitions:
            return False
        seen.update(state)
        return all(ok(leader, isr) for leader, isr in state.values())

    rig.wait_until(done, BROKER_TIMEOUT_S, what)
    return seen


def _await_healthy(rig: Rig, kafka: KafkaCluster) -> None:
    """Every partition led, with every replica in sync again (all nodes back and caught
    up), so the next fault starts from a whole cluster."""
    rf = kafka.replication_factor
    _await_partitions(
        rig,
        kafka,
        lambda leader, isr: leader >= 0 and len(isr) >= rf,
        f"for every partition to have a leader and all {rf} replicas in sync",
    )


def _busiest_leader(rig: Rig, kafka: KafkaCluster) -> tuple[int, list[int]]:
    """The node leading the most partitions of the topic (lowest id on a tie) and those
    partitions."""
    state = _await_partitions(rig, kafka, lambda leader, _: leader >= 0, "for the leaders")
    led: dict[int, list[int]] = {}
    for p, (leader, _) in sorted(state.items()):
        led.setdefault(leader, []).append(p)
    node = min(led, key=lambda n: (-len(led[n]), n))
    return node, led[node]


def _leaders_moved_off(
    rig: Rig, kafka: KafkaCluster, node: int, led: list[int], since: float
) -> None:
    """Wait until no partition is led by ``node`` (the controller fenced it and elected
    new leaders from the in-sync replicas); note how long that took since the fault."""
    _await_partitions(
        rig,
        kafka,
        lambda leader, _: leader >= 0 and leader != node,
        f"for the partitions of node {node} to get new leaders",
    )
    rig.result.notes.append(
        f"partitions {led} got new leaders {rig.now() - since:.1f}s after the fault on node {node}"
    )


def _elect_preferred(kafka: KafkaCluster, topic: str, partitions: range) -> int:
    """A preferred leader election on ``partitions`` (the admin API): each goes back to
    its first replica where that is not its leader now; the number that moved."""
    from confluent_kafka import ElectionType
    from confluent_kafka import TopicPartition as KTopicPartition

    tps = [KTopicPartition(topic, p) for p in partitions]
    # no request_timeout / operation_timeout: confluent-kafka 2.16's binding rejects them
    # (SystemError); the defaults are socket.timeout.ms (60 s)
    fut = kafka.admin().elect_leaders(ElectionType.PREFERRED, tps)
    result = fut.result(timeout=90)  # tp -> None (elected) or the error (e.g. not needed)
    return sum(1 for err in result.values() if err is None)


@scenario("broker-outage")
def broker_outage(rig: Rig) -> None:
    """Real broker faults on the drill's 3-node cluster (replication factor 3,
    ``min.insync.replicas`` 2), one after the other, each from a whole cluster:

    1. the node leading the most partitions is SIGKILLed mid-batch (the controller
       fences it after ~4 s and elects new leaders from the in-sync replicas); it stays
       down until the pipeline committed without it, 8 s at least, then restarts;
    2. a preferred leader election moves those partitions back to it: leaders change
       mid-batch with no node lost;
    3. the node leading the most partitions is SIGSTOPped (a long GC pause or a hung
       host: its connections stay open and nothing answers; it is fenced and its
       partitions move) until the pipeline committed without it, 10 s at least, then
       SIGCONTed; it rejoins;
    4. every node is SIGKILLed, the cluster is down 10 s, then all nodes restart
       together (the KRaft quorum needs a majority).

    Time to recover: from the end of each outage (new leaders elected; for the full
    outage, the restart of the nodes) to the next commit. A driver that stops is
    restarted (counted)."""
    kafka = _need_kafka(rig)
    _first_commit(rig)
    parts = range(rig.spec.partitions)
    # 1. the leader dies
    node, led = _busiest_leader(rig, kafka)
    t_kill = rig.now()
    kafka.kill(node)
    rig.event("broker-kill", f"SIGKILL node {node} ({len(led)} leaders)")
    _leaders_moved_off(rig, kafka, node, led, t_kill)
    rig.recovery_from_now()
    _wait_recovered(rig, COMMIT_TIMEOUT_S, f"for a commit with node {node} down")
    _supervise(rig, LEADER_DOWN_S - (rig.now() - t_kill))
    kafka.restart(node)
    rig.event("broker-restart", f"node {node}, {rig.now() - t_kill:.0f} s down")
    _await_healthy(rig, kafka)
    # 2. leaders move, no node lost
    moved = _elect_preferred(kafka, rig.topic, parts)
    rig.event("leader-change", f"preferred: {moved} to node {node}")
    if moved == 0:
        rig.result.problems.append(f"the preferred leader election moved no partition to {node}")
    rig.recovery_from_now()
    _wait_recovered(rig, COMMIT_TIMEOUT_S, "for a commit after the leader change")
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    # 3. the leader freezes
    node, led = _busiest_leader(rig, kafka)
    t_pause = rig.now()
    kafka.pause(node)
    rig.event("broker-pause", f"SIGSTOP node {node} ({len(led)} leaders)")
    _leaders_moved_off(rig, kafka, node, led, t_pause)
    rig.recovery_from_now()
    _wait_recovered(rig, COMMIT_TIMEOUT_S, f"for a commit with node {node} frozen")
    _supervise(rig, PAUSE_S - (rig.now() - t_pause))
    kafka.resume(node)
    rig.event("broker-resume", f"SIGCONT node {node}, {rig.now() - t_pause:.0f} s frozen")
    _await_healthy(rig, kafka)
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    # 4. the whole cluster goes down
    nodes = kafka.node_ids()
    for n in nodes:
        kafka.kill(n)
    rig.event("broker-down", f"SIGKILL all {len(nodes)} nodes, 10 s")
    _supervise(rig, OUTAGE_S)
    rig.recovery_from_now()  # the clock starts when the nodes are asked to start
    t_up = rig.now()
    for n in nodes:
        kafka.restart(n, wait=False)  # together: one alone cannot form a quorum
    rig.event("broker-up", f"all {len(nodes)} nodes restarting")
    _await_healthy(rig, kafka)
    rig.result.notes.append(f"cluster whole again {rig.now() - t_up:.1f}s after the restart")
    _wait_recovered(rig, COMMIT_TIMEOUT_S, "for a commit after the outage")
    _finish(rig)


@scenario("zombie")
def zombie(rig: Rig) -> None:
    """A second driver starts while the first runs; the first must be fenced and stop.
    Both run background compaction: the fenced one's must stop too."""
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
    rig.await_compaction()
    _finish(rig)


@scenario("standby")
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
        active.kill()
        rig.event("kill", f"SIGKILL active driver {active.n}")
        _await_takeover(rig, waiting)
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


@scenario("standby-pause")
def standby_pause(rig: Rig) -> None:
    """SIGSTOP the active past its lease (a long GC, a lost network): the warm standby
    takes over; SIGCONT the old one: it must commit nothing more and exit non-zero."""
    old = rig.start_driver(sets=HA, restart=False)
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    new = rig.start_driver(sets=HA, restart=False)
    _await_warm(rig, new)
    _pause_past_the_lease(rig, old, new)
    _finish(rig)


def _await_warm(rig: Rig, d: DriverProcess) -> None:
    """``d`` stands by warm and the active committed once more since."""
    rig.wait_until(
        lambda: "standing by, warm" in d.log(), COMMIT_TIMEOUT_S, f"for driver {d.n} to stand by"
    )
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)


def _await_takeover(rig: Rig, d: DriverProcess) -> None:
    """The active just died or froze: count a restart, wait for ``d``'s first commit."""
    rig.result.restarts += 1
    rig.recovery_from_now()
    rig.wait_until(
        lambda: rig.recoveries[-1].first_commit is not None,
        COMMIT_TIMEOUT_S,
        f"for driver {d.n} to take over",
    )


def _pause_past_the_lease(rig: Rig, old: DriverProcess, new: DriverProcess) -> None:
    """SIGSTOP ``old`` (the active) until warm ``new`` took over and committed twice, then
    SIGCONT it: it must commit nothing more and exit non-zero within the lease."""
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
    if old.poll() in (0, None) or not any(w in line for w in ("lease", "fenced", "epoch")):
        rig.result.problems.append(f"resumed driver exited {old.poll()}: {line!r}")
    if late:
        rig.result.problems.append(f"resumed driver committed {len(late)} batch(es)")
    rig.result.problems.extend(_superseded_writes(rig, resumed))
    rig.result.notes.append(f"resumed driver stopped {exit_s:.1f}s after SIGCONT: {line[:120]}")


def _superseded_writes(rig: Rig, since: float) -> list[str]:
    """What the tables and the journal hold of a superseded writer: a commit whose epoch
    is below one committed before it (the table's history, read independently), or an
    instant requested after ``since`` (epoch seconds) below the newest epoch."""
    from pipeline.commit.instant import format_instant_time
    from pipeline.tools.verify import commit_epochs

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
    """Offsets deleted while the pipeline is stopped (the admin API's DeleteRecords on the
    drill's own cluster: the log start moves past them, as retention moves it):
    failOnDataLoss true stops with a clear error; false continues and records the loss in
    the commit metadata."""
    kafka = _need_kafka(rig)
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
    kafka.delete_records(rig.topic, 0, start + gap)  # DeleteRecords: the log start moves
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
