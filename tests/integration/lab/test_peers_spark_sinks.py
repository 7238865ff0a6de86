"""The Spark streaming-sink peers end to end: real Apache Kafka, real Spark on each peer's
own PySpark line, real Iceberg / Hudi jars. Each peer's ``launch`` command drains a
two-partition topic (available-now) and exits; its table must then hold every produced
(topic, partition, offset) exactly once, read back through the peer's own ``rows``, and
its ``progress`` must count the same. The Iceberg peer is also stopped with SIGTERM to its
process group while it idles on a processing-time trigger, and resumed from its checkpoint.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.kafka_fixtures import KafkaTestBroker, await_condition

from lab.generator import GeneratorSpec, ProduceResult, produce
from lab.peers.model import Launch, PeerJob, PeerSystem
from lab.peers.spark_sinks import SparkHudiSink, SparkIcebergSink

pytestmark = pytest.mark.extended

EVENTS = 3000
PARTITIONS = 2
PER_TRIGGER = 1000


@pytest.fixture(scope="module")
def dataset(kafka_broker: KafkaTestBroker) -> tuple[str, ProduceResult]:
    topic = kafka_broker.new_topic("peer-spark", PARTITIONS)
    spec = GeneratorSpec(count=EVENTS, seed=23)
    result = produce(kafka_broker.bootstrap_servers, topic, spec, partitions=PARTITIONS)
    assert result.produced == EVENTS
    return topic, result


def _job(broker: KafkaTestBroker, topic: str, work: Path, trigger: str) -> PeerJob:
    return PeerJob(
        bootstrap=broker.bootstrap_servers, topic=topic, partitions=PARTITIONS, payload=False,
        work=work, max_records_per_trigger=PER_TRIGGER, trigger=trigger, cores=2,
    )  # fmt: skip


def _start(launch: Launch) -> subprocess.Popen[bytes]:
    """As the bench's runner starts a peer: its own session, PYSPARK_* left out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    env.update(launch.env)
    assert launch.log is not None
    with open(launch.log, "ab") as log:
        return subprocess.Popen(
            launch.argv, cwd=launch.cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip


def _wait(proc: subprocess.Popen[bytes], launch: Launch, timeout_s: float) -> None:
    try:
        rc = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        rc = None
    assert launch.log is not None
    tail = launch.log.read_text(errors="replace")[-3000:]
    assert rc == 0, f"exit {rc}; its output ends:\n{tail}"


def _assert_exactly_once(system: PeerSystem, job: PeerJob, produced: ProduceResult) -> pa.Table:
    rows = system.rows(job)
    want = {
        (topic, part, off)
        for (topic, part), (first, last) in produced.offsets.items()
        for off in range(first, last + 1)
    }
    coords = (rows.column(c).to_pylist() for c in ("topic", "partition", "offset"))
    seen = Counter(zip(*coords, strict=True))
    assert len(want) == EVENTS
    assert set(seen) == want, f"missing {len(want - set(seen))}, unexpected {len(set(seen) - want)}"
    assert [k for k, n in seen.items() if n > 1] == []
    assert rows.column("kafka_ts_ms").null_count == 0
    assert rows.column("commit_ts_ms").null_count == 0
    return rows


@pytest.mark.parametrize("system", [SparkIcebergSink(), SparkHudiSink()], ids=lambda s: s.name)
def test_peer_drains_the_topic_exactly_once(
    system: Any, kafka_broker: KafkaTestBroker, dataset: tuple[str, ProduceResult],
    tmp_path: Path,
) -> None:  # fmt: skip
    topic, produced = dataset
    job = _job(kafka_broker, topic, tmp_path, "available-now")
    system.prepare(job)
    assert system.progress(job).records == 0  # no table yet: zeros, not an error
    launch = system.launch(job)
    _wait(_start(launch), launch, timeout_s=420)

    rows = _assert_exactly_once(system, job, produced)
    progress = system.progress(job)
    assert progress.records == rows.num_rows == EVENTS
    assert progress.commits == EVENTS // PER_TRIGGER  # one commit per micro-batch
    assert progress.data_files >= 1 and progress.data_bytes > 0
    commit_ms = rows.column("commit_ts_ms")
    assert progress.first_commit_ms == min(commit_ms.to_pylist())
    assert len(set(commit_ms.to_pylist())) == progress.commits
    # every row committed after Kafka stamped it
    late = [(k, c) for k, c in zip(rows["kafka_ts_ms"].to_pylist(), commit_ms.to_pylist(),
                                   strict=True) if c < k]  # fmt: skip
    assert late == []
    assert system.describe()["sink package"].endswith(("1.11.0", "1.2.0"))


def test_iceberg_peer_stops_on_sigterm_and_resumes(
    kafka_broker: KafkaTestBroker, dataset: tuple[str, ProduceResult], tmp_path: Path
) -> None:
    topic, produced = dataset
    system = SparkIcebergSink()
    job = _job(kafka_broker, topic, tmp_path, "1 second")
    system.prepare(job)
    launch = system.launch(job)
    proc = _start(launch)
    try:
        await_condition(
            "the table holds every record", lambda: system.progress(job).records >= EVENTS, 300
        )
    finally:
        time.sleep(2)  # a few idle triggers
        os.killpg(proc.pid, signal.SIGTERM)  # the whole group, as the harness's cgroup stop
    _wait(proc, launch, timeout_s=60)
    commits = system.progress(job).commits

    # the same job again from its checkpoint: nothing left to read, nothing written twice
    again = system.launch(_job(kafka_broker, topic, tmp_path, "available-now"))
    _wait(_start(again), again, timeout_s=300)
    _assert_exactly_once(system, job, produced)
    assert system.progress(job).commits == commits
