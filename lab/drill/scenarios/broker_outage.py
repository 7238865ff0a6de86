"""``broker-outage``: real broker faults on the drill's 3-node Kafka cluster — a leader
SIGKILLed, a preferred leader election, a leader SIGSTOPped, every node down."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import KafkaException

from lab.broker import KafkaCluster
from lab.drill.rig import Rig
from lab.drill.scenarios.steps import (
    COMMIT_TIMEOUT_S,
    finish,
    first_commit,
    need_kafka,
    supervise,
    wait_recovered,
)

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
    kafka = need_kafka(rig)
    first_commit(rig)
    parts = range(rig.spec.partitions)
    # 1. the leader dies
    node, led = _busiest_leader(rig, kafka)
    t_kill = rig.now()
    kafka.kill(node)
    rig.event("broker-kill", f"SIGKILL node {node} ({len(led)} leaders)")
    _leaders_moved_off(rig, kafka, node, led, t_kill)
    rig.recovery_from_now()
    wait_recovered(rig, COMMIT_TIMEOUT_S, f"for a commit with node {node} down")
    supervise(rig, LEADER_DOWN_S - (rig.now() - t_kill))
    kafka.restart(node)
    rig.event("broker-restart", f"node {node}, {rig.now() - t_kill:.0f} s down")
    _await_healthy(rig, kafka)
    # 2. leaders move, no node lost
    moved = _elect_preferred(kafka, rig.topic, parts)
    rig.event("leader-change", f"preferred: {moved} to node {node}")
    if moved == 0:
        rig.result.problems.append(f"the preferred leader election moved no partition to {node}")
    rig.recovery_from_now()
    wait_recovered(rig, COMMIT_TIMEOUT_S, "for a commit after the leader change")
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    # 3. the leader freezes
    node, led = _busiest_leader(rig, kafka)
    t_pause = rig.now()
    kafka.pause(node)
    rig.event("broker-pause", f"SIGSTOP node {node} ({len(led)} leaders)")
    _leaders_moved_off(rig, kafka, node, led, t_pause)
    rig.recovery_from_now()
    wait_recovered(rig, COMMIT_TIMEOUT_S, f"for a commit with node {node} frozen")
    supervise(rig, PAUSE_S - (rig.now() - t_pause))
    kafka.resume(node)
    rig.event("broker-resume", f"SIGCONT node {node}, {rig.now() - t_pause:.0f} s frozen")
    _await_healthy(rig, kafka)
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    # 4. the whole cluster goes down
    nodes = kafka.node_ids()
    for n in nodes:
        kafka.kill(n)
    rig.event("broker-down", f"SIGKILL all {len(nodes)} nodes, 10 s")
    supervise(rig, OUTAGE_S)
    rig.recovery_from_now()  # the clock starts when the nodes are asked to start
    t_up = rig.now()
    for n in nodes:
        kafka.restart(n, wait=False)  # together: one alone cannot form a quorum
    rig.event("broker-up", f"all {len(nodes)} nodes restarting")
    _await_healthy(rig, kafka)
    rig.result.notes.append(f"cluster whole again {rig.now() - t_up:.1f}s after the restart")
    wait_recovered(rig, COMMIT_TIMEOUT_S, "for a commit after the outage")
    finish(rig)
