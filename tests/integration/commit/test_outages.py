"""The pipeline under infrastructure faults: real broker, Spark, PostgreSQL.

* Broker outage on three real Kafka nodes: one SIGKILLed (its partitions fail over), then
  the other two SIGSTOPped, then all back: the running pipeline waits and resumes, exactly
  once. Past ``source.brokerRetrySeconds`` it stops with a one-line broker error; a
  restart resumes.
* Partition leaders SIGKILLed mid-batch (before the read) and mid-commit (after the
  precommit), and a leader SIGSTOPped for longer than the consumer's request timeout:
  no stall, no duplicate, no loss.
* Catalog outage (a private PostgreSQL cluster stopped and restarted): a table load at
  batch start and a commit wait and resume; past ``commit.catalogRetrySeconds`` the
  driver stops with a one-line error naming the catalog and the next run recommits.
* A log truncated by an unclean leader election (same topic id, end below the committed
  offset): the restart stops with the truncated-log error.
* Retention overtaking a stopped pipeline, through the driver subprocess: exit 2 with the
  partition and offsets under failOnDataLoss, else continue, recorded and counted.

Zombie drivers (two live OS processes, the 5 s idle fence check) are covered by
tests/integration/commit/test_fencing.py::test_second_driver_fences_the_first; a deleted
checkpoint by tests/integration/formats/iceberg/test_pipeline_iceberg.py
::test_exactly_once_with_dead_letters_restart_and_replay.
Exactly-once is shown by counting (topic, partition, offset).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.drivers import (
    coords,
    pipeline_config,
    produced,
    recorded_data_loss,
    run_driver,
    write_config,
)
from support.kafka_fixtures import KafkaTestBroker, unique_topic
from support.pg_fixtures import pg_cluster_fixture  # noqa: F401  (provides ``pg_cluster``)

from lab.generator import GeneratorSpec, produce
from lab.pgcluster import PgCluster
from pipeline.app import Pipeline
from pipeline.commit.faults import FaultPoints
from pipeline.config import parse_config
from pipeline.errors import find_pipeline_error
from pipeline.observe.base import OutcomeCallback


def _config(
    tmp: Path,
    bootstrap: str,
    topic: str,
    *,
    catalog: dict[str, Any] | None = None,
    trigger: dict[str, Any] | None = None,
    source: dict[str, Any] | None = None,
    commit: dict[str, Any] | None = None,
) -> dict[str, Any]:
    sink = {
        "catalog": catalog or {"warehouse": str(tmp / "warehouse")},
        "table": f"db_{topic.replace('-', '_')}.events",
    }
    return pipeline_config(
        tmp,
        bootstrap,
        topic,
        sink,
        source=source,
        trigger=trigger or {"mode": "available-now"},
        spark={"master": "local[2]"},
        commit=commit or {},
    )


class _AtPoints(FaultPoints):
    """Runs an action when the coordinator reaches a named point of a batch (once each)."""

    def __init__(self, plan: dict[tuple[str, int], Callable[[], None]]) -> None:
        super().__init__("")
        self.plan = dict(plan)
        self.hit_at: dict[tuple[str, int], float] = {}

    def hit(self, point: str, batch_id: int | None = None) -> None:
        key = (point, batch_id if batch_id is not None else -1)
        action = self.plan.pop(key, None)
        if action is not None:
            self.hit_at[key] = time.monotonic()
            action()


class _CatalogOutageAt(FaultPoints):
    """Stops the private catalog cluster when the coordinator reaches a named point of a
    batch (and starts it again ``restart_after`` seconds later, unless None)."""

    def __init__(self, cluster: PgCluster, plan: dict[tuple[str, int], float | None]) -> None:
        super().__init__("")
        self.cluster = cluster
        self.plan = dict(plan)
        self.stopped_at: dict[int, float] = {}
        self.restarted_at: dict[int, float] = {}
        self.timers: list[threading.Timer] = []

    def hit(self, point: str, batch_id: int | None = None) -> None:
        key = (point, batch_id if batch_id is not None else -1)
        if key not in self.plan:
            return
        restart_after = self.plan.pop(key)
        self.cluster.stop()
        self.stopped_at[key[1]] = time.monotonic()
        if restart_after is not None:

            def restart(batch: int = key[1]) -> None:
                self.restarted_at[batch] = time.monotonic()  # PostgreSQL starts in ~2 s
                self.cluster.start()

            timer = threading.Timer(restart_after, restart)
            self.timers.append(timer)
            timer.start()


def _committed_at(p: Pipeline) -> dict[int, float]:
    """Records when each batch's outcome reached the driver."""
    seen: dict[int, float] = {}

    def on_outcome(outcome: Any) -> None:
        seen.setdefault(outcome.batch_id, time.monotonic())

    p.add_observer(OutcomeCallback(on_outcome))
    return seen


@pytest.fixture
def catalog_outage_config(
    kafka_broker: KafkaTestBroker, tmp_path: Path, pg_cluster: PgCluster
) -> Callable[..., tuple[Any, dict[str, Any]]]:
    """``make(name, partitions, spec, retry_s)``: a topic with ``spec``'s records, read 300 a
    batch into a table of the private catalog ``outage`` whose commits wait ``retry_s``;
    returns (the ``produce`` result, the config)."""

    def make(
        name: str, partitions: int, spec: GeneratorSpec, retry_s: int
    ) -> tuple[Any, dict[str, Any]]:
        topic = kafka_broker.new_topic(name, partitions)
        r = produce(kafka_broker.bootstrap_servers, topic, spec)
        catalog = {"name": "outage", "uri": pg_cluster.sqlalchemy_uri, "warehouse": str(tmp_path)}
        data = _config(
            tmp_path,
            kafka_broker.bootstrap_servers,
            topic,
            catalog=catalog,
            source={"maxRecordsPerTrigger": 300},
            commit={"catalogRetrySeconds": retry_s},
        )
        return r, data

    return make


# -- catalog ---------------------------------------------------------------------------


@pytest.mark.extended  # CI's budget: the drill stage's catalog-outage drill covers it
def test_catalog_outage_at_batch_start_and_mid_commit_waits_and_resumes(
    spark: Any, pg_cluster: PgCluster, catalog_outage_config: Any
) -> None:
    r, data = catalog_outage_config("cat-wait", 3, GeneratorSpec(count=900, seed=51), retry_s=60)
    p = Pipeline(parse_config(data), spark)
    outage_s = 4.0
    # batch 1: the catalog goes away before the table is loaded for the write;
    # batch 2: after the precommit, so the table commit itself meets the outage
    hook = _CatalogOutageAt(
        pg_cluster, {("after-requested", 1): outage_s, ("after-precommit", 2): outage_s}
    )
    p.coordinator.faults = hook
    committed = _committed_at(p)
    try:
        p.run(timeout_s=240)
    finally:
        for timer in hook.timers:
            timer.join()

    assert coords(p) == produced(r)  # nothing lost, nothing twice
    assert set(hook.stopped_at) == {1, 2} and set(hook.restarted_at) == {1, 2}
    for batch in (1, 2):
        waited = committed[batch] - hook.stopped_at[batch]
        resumed = committed[batch] - hook.restarted_at[batch]
        print(f"catalog outage at batch {batch}: waited {waited:.1f}s, {resumed:.1f}s after up")
        assert waited >= outage_s  # it really waited for the catalog
        assert resumed < 30, "no prompt resume after the catalog came back"
    assert p.stats.last is not None and p.stats.last.outcome == "committed"
    assert p.timeline is not None and not p.timeline.pending()


def test_catalog_outage_past_the_deadline_fails_clearly_then_recommits(
    spark: Any, pg_cluster: PgCluster, catalog_outage_config: Any
) -> None:
    r, data = catalog_outage_config("cat-fail", 2, GeneratorSpec(count=600, seed=52), retry_s=3)
    p = Pipeline(parse_config(data), spark)
    hook = _CatalogOutageAt(pg_cluster, {("after-precommit", 1): None})
    p.coordinator.faults = hook
    with pytest.raises(Exception) as info:
        p.run(timeout_s=240)
    failed_after = time.monotonic() - hook.stopped_at[1]
    message = find_pipeline_error(info.value)
    print(f"catalog down past the deadline: failed {failed_after:.1f}s after the stop")
    print(f"  error: {message}")
    assert message is not None and "\n" not in message, info.value
    assert "catalog 'outage'" in message and "unreachable" in message, message
    assert "catalogRetrySeconds=3" in message and f":{pg_cluster.port}/" in message, message
    assert 3 <= failed_after < 30

    pg_cluster.start()
    again = Pipeline(parse_config(data), spark)
    again.run(timeout_s=240)
    assert again.stats.recovered.get("recommitted") == 1, again.stats.recovered
    assert coords(again) == produced(r)


# -- broker ----------------------------------------------------------------------------


@pytest.mark.slow
def test_broker_outage_mid_run_waits_and_resumes_exactly_once(
    spark: Any, kafka_cluster3: KafkaTestBroker, tmp_path: Path
) -> None:
    cluster = kafka_cluster3.own()
    bootstrap = cluster.bootstrap_servers
    topic = kafka_cluster3.new_topic("brk-out", 3)
    results = [produce(bootstrap, topic, GeneratorSpec(count=1200, seed=53))]
    cfg = parse_config(
        _config(
            tmp_path,
            bootstrap,
            topic,
            trigger={"mode": "processing-time", "interval": "1 second"},
            source={"maxRecordsPerTrigger": 300},
        )
    )
    p = Pipeline(cfg, spark)
    committed = _committed_at(p)
    outage_s = 10.0
    marks: dict[str, float] = {}

    def faults() -> None:
        # one node dies (its partitions fail over to the others), then the two left stop
        # answering (SIGSTOP: connections hang, as in a network partition); then all back
        first = cluster.leader(topic, 0)
        cluster.kill(first)
        time.sleep(5)
        for node in cluster.node_ids():
            cluster.pause(node)
        marks["down"] = time.monotonic()
        time.sleep(outage_s)
        for node in cluster.node_ids():
            cluster.resume(node)
        cluster.restart(first)  # returns once it is registered again
        marks["up"] = time.monotonic()
        results.append(produce(bootstrap, topic, GeneratorSpec(count=600, seed=54)))

    fault_thread = threading.Thread(target=faults)
    started = False
    total = lambda: sum(x.produced for x in results)  # noqa: E731

    def until(stats: Any) -> bool:
        nonlocal started
        if not started and stats.batches >= 2:
            started = True
            fault_thread.start()
        return "up" in marks and not fault_thread.is_alive() and stats.records >= total()

    try:
        p.run(until=until, timeout_s=300)
    finally:
        if fault_thread.is_alive():
            fault_thread.join()
        cluster.restart_all()
    assert "up" in marks, "the pipeline ended before the outage"
    after_up = [t for t in committed.values() if t > marks["up"]]
    assert after_up, "no batch committed after the brokers came back"
    print(
        f"broker outage {outage_s:.0f}s: first commit {min(after_up) - marks['up']:.1f}s after up"
    )
    assert min(after_up) - marks["up"] < 30
    assert coords(p) == produced(*results)


@pytest.mark.slow
def test_broker_outage_past_the_deadline_fails_clearly_and_restart_resumes(
    spark: Any, kafka_cluster3: KafkaTestBroker, tmp_path: Path
) -> None:
    cluster = kafka_cluster3.own()
    bootstrap = cluster.bootstrap_servers
    topic = kafka_cluster3.new_topic("brk-fail", 2)
    r1 = produce(bootstrap, topic, GeneratorSpec(count=400, seed=55))
    data = _config(
        tmp_path,
        bootstrap,
        topic,
        trigger={"mode": "processing-time", "interval": "1 second"},
        source={"brokerRetrySeconds": 5},
    )
    p = Pipeline(parse_config(data), spark)
    down: dict[str, float] = {}

    def until(stats: Any) -> bool:
        if stats.records >= r1.produced and not down:
            for node in cluster.node_ids():  # and they stay down past brokerRetrySeconds
                cluster.kill(node)
            down["at"] = time.monotonic()
        return False

    try:
        with pytest.raises(Exception) as info:
            p.run(until=until, timeout_s=180)
        failed_after = time.monotonic() - down["at"]
    finally:
        cluster.restart_all()
    message = find_pipeline_error(info.value)
    print(f"brokers down past brokerRetrySeconds=5: failed {failed_after:.1f}s after down")
    print(f"  error: {message}")
    assert message is not None and "\n" not in message, info.value
    assert bootstrap in message and "unreachable" in message, message
    assert failed_after < 60
    r2 = produce(bootstrap, topic, GeneratorSpec(count=300, seed=56))
    data["trigger"] = {"mode": "available-now"}
    again = Pipeline(parse_config(data), spark)
    again.run(timeout_s=180)
    assert coords(again) == produced(r1, r2)


@pytest.mark.slow
@pytest.mark.extended  # CI's budget (62 s): in the rotation; the broker drills cover it
def test_leaders_killed_mid_batch_and_mid_commit_and_paused_lose_nothing(
    spark: Any, kafka_cluster3: KafkaTestBroker, tmp_path: Path
) -> None:
    cluster = kafka_cluster3.own()
    bootstrap = cluster.bootstrap_servers
    topic = kafka_cluster3.new_topic("leader", 3)
    r = produce(bootstrap, topic, GeneratorSpec(count=3000, seed=57))
    request_timeout_s = 6
    data = _config(
        tmp_path,
        bootstrap,
        topic,
        source={
            "maxRecordsPerTrigger": 300,
            "kafka": {"socket.timeout.ms": str(request_timeout_s * 1000)},
        },
    )
    p = Pipeline(parse_config(data), spark)
    faults: list[str] = []
    restarts: list[threading.Thread] = []

    def kill_leader_of(partition: int, why: str) -> Callable[[], None]:
        def act() -> None:
            for t in restarts:  # the last victim is back: two of three controllers live
                t.join()
            node = cluster.leader(topic, partition)
            cluster.kill(node)
            faults.append(f"{why}: SIGKILL node {node} (leader of {topic}[{partition}])")
            t = threading.Timer(3.0, cluster.restart, args=(node,))
            restarts.append(t)
            t.start()

        return act

    def pause_leader_of(partition: int) -> None:
        for t in restarts:
            t.join()
        node = cluster.leader(topic, partition)
        cluster.pause(node)
        faults.append(f"SIGSTOP node {node} for {request_timeout_s + 4}s")
        t = threading.Timer(request_timeout_s + 4.0, cluster.resume, args=(node,))
        restarts.append(t)
        t.start()

    p.coordinator.faults = _AtPoints(
        {
            ("after-requested", 1): kill_leader_of(0, "mid-batch"),
            ("after-precommit", 3): kill_leader_of(1, "mid-commit"),
            ("after-requested", 6): lambda: pause_leader_of(2),
        }
    )
    started = time.monotonic()
    try:
        p.run(timeout_s=300)
    finally:
        for t in restarts:
            t.join()
        cluster.restart_all()
    took = time.monotonic() - started
    print(f"{p.stats.batches} batches in {took:.1f}s through: " + "; ".join(faults))
    assert len(faults) == 3, faults
    assert coords(p) == produced(r)
    assert p.stats.last is not None and p.stats.last.outcome == "committed"


@pytest.mark.slow
def test_a_log_truncated_by_an_unclean_election_is_told_from_a_recreated_topic(
    spark: Any, kafka_cluster3: KafkaTestBroker, tmp_path: Path
) -> None:
    """Two replicas; the follower is SIGKILLed, the leader takes 200 more records (one
    in-sync replica suffices), the pipeline ingests all 300, the leader is SIGKILLed and the
    stale follower is elected uncleanly: the same topic now ends at 100. The restart stops
    with the truncated-log error, not the re-created-topic one, and commits nothing."""
    cluster = kafka_cluster3.own()
    bootstrap = cluster.bootstrap_servers
    topic = unique_topic("truncated")
    cluster.create_topic(topic, 1, replication_factor=2, config={"min.insync.replicas": "1"})
    (old_leader, follower), _ = cluster.replicas(topic, 0)
    r1 = produce(bootstrap, topic, GeneratorSpec(count=100, seed=58))
    data = _config(tmp_path, bootstrap, topic)
    try:
        cluster.kill(follower)
        deadline = time.monotonic() + 30
        while cluster.replicas(topic, 0)[1] != [old_leader]:
            assert time.monotonic() < deadline, "the killed follower stayed in sync"
            time.sleep(0.2)
        r2 = produce(bootstrap, topic, GeneratorSpec(count=200, seed=59))
        first = Pipeline(parse_config(data), spark)
        first.run(timeout_s=120)
        assert coords(first) == produced(r1, r2)
        cluster.kill(old_leader)
        cluster.restart(follower)
        cluster.elect_unclean(topic, 0)
        again = Pipeline(parse_config(data), spark)
        with pytest.raises(Exception) as raised:
            again.run(timeout_s=120)
        assert re.fullmatch(
            rf"\[ingest:log-truncated\] partition {topic}\[0\]: the log now ends at offset "
            r"100, below the committed next offset 300, in the same topic \(id \S+\): .*",
            find_pipeline_error(raised.value, tagged=True) or str(raised.value),
        )
        assert coords(again) == produced(r1, r2)  # nothing committed by the refused run
    finally:
        cluster.restart_all()


# -- retention -------------------------------------------------------------------------


def _last_error(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.startswith("error: ")]
    assert lines, stderr[-3000:]
    return lines[-1]


@pytest.mark.slow
def test_retention_overtakes_a_stopped_driver(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    broker = kafka_broker.own()
    topic = kafka_broker.new_topic("ret", 2)
    bootstrap = kafka_broker.bootstrap_servers
    data = _config(tmp_path, bootstrap, topic)
    config = write_config(tmp_path, data)
    r1 = produce(bootstrap, topic, GeneratorSpec(count=400, seed=58), partitions=2)
    Pipeline(parse_config(data), spark).run(timeout_s=180)  # then the driver stops
    r2 = produce(bootstrap, topic, GeneratorSpec(count=400, seed=59), partitions=2)
    committed = r1.offsets[(topic, 0)][1] + 1  # next offset the table holds for partition 0
    lost_to = committed + 50
    broker.delete_records(topic, 0, lost_to)  # retention while the driver is stopped

    strict = run_driver(config)
    assert strict.returncode == 2, strict.stderr[-3000:]
    err = _last_error(strict.stderr)
    # one line at default verbosity: Spark's ERROR and the traces go to the run's log file
    assert strict.stderr.splitlines() == [err], strict.stderr[-3000:]
    print(f"retention past the committed offsets, failOnDataLoss=true: exit 2, {err}")
    assert f"{topic}[0]" in err and str(committed) in err and str(lost_to) in err, err

    # failOnDataLoss=false, in-process so the metrics registry can be read afterwards
    lenient = parse_config({**data, "source": {**data["source"], "failOnDataLoss": False}})
    p = Pipeline(lenient, spark)
    metrics = p.attach_metrics(serve=False)
    try:
        p.run(timeout_s=180)
        counted = metrics.registry.get_sample_value(
            "ingest_data_loss_records_total", {"topic": topic}
        )
    finally:
        metrics.stop()
    assert counted == lost_to - committed
    want = produced(r1, r2)
    for o in range(committed, lost_to):
        del want[(topic, 0, o)]
    assert coords(p) == want  # everything Kafka still had, once
    recorded = recorded_data_loss(p)
    assert recorded == [{topic: {"0": [committed, lost_to]}}], recorded
