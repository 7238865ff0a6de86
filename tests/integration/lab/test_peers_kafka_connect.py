"""The ``iceberg-kafka-connect`` peer end to end: a real Connect worker running Iceberg's
sink against a real broker, read back through pyiceberg.

3,000 generated events in 2 partitions; the peer's own ``launch`` command runs as a
subprocess until its table shows every record, is stopped with SIGTERM, and the table must
hold each produced (topic, partition, offset) exactly once, with the record's Kafka
timestamp and the committing snapshot's time. The same SQLite catalog file is written by
Iceberg's JdbcCatalog (Java) and read by pyiceberg's SqlCatalog: the snapshots pyiceberg
sees carry the sink's own summary properties.

Many tables from one job: three topics routed by the sink's static routes (the topic
column as route field, an exact regex per table) into a table each, run and measured by
the bench's own entry point; names chosen so that an unquoted or unanchored regex would
route a topic's records into a neighbour's table too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import psutil
import pyarrow.compute as pc
import pytest
from support.kafka_fixtures import KafkaTestBroker

from lab.generator import GeneratorSpec, generate_events, produce
from lab.peers import kafka_connect_config as conf
from lab.peers.connect_tables import run_connect_tables
from lab.peers.kafka_connect import IcebergKafkaConnectPeer
from lab.peers.model import COORDS, PeerJob

EVENTS = 3_000
PARTITIONS = 2
TIMEOUT_S = 240.0
SPEC = GeneratorSpec(count=EVENTS, seed=23)

pytestmark = pytest.mark.extended


def _run_until(peer: IcebergKafkaConnectPeer, job: PeerJob, records: int) -> float:
    """Run the peer's command until its table shows ``records``; SIGTERM it; seconds taken."""
    launch = peer.launch(job)
    assert launch.log is not None
    t0 = time.monotonic()
    with open(launch.log, "ab") as log:
        proc = subprocess.Popen(
            launch.argv,
            cwd=launch.cwd,
            env={**os.environ, **launch.env},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        while peer.progress(job).records < records:
            assert proc.poll() is None, f"the Connect worker exited: see {launch.log}"
            # a killed task is not restarted by the worker: fail now, not at the timeout
            assert b"unrecoverable exception" not in launch.log.read_bytes(), launch.log
            assert time.monotonic() - t0 < TIMEOUT_S, f"not all records within: {launch.log}"
            time.sleep(1.0)
        # one JVM is the whole system: SIGKILL of it leaves nothing behind
        assert psutil.Process(proc.pid).children(recursive=True) == []
        return time.monotonic() - t0
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_iceberg_kafka_connect_exactly_once(kafka_broker: KafkaTestBroker, tmp_path: Path) -> None:
    topic = kafka_broker.new_topic("peer-kc", PARTITIONS)
    produced = produce(kafka_broker.bootstrap_servers, topic, SPEC, PARTITIONS)
    assert produced.produced == EVENTS
    job = PeerJob(
        bootstrap=kafka_broker.bootstrap_servers,
        topic=topic,
        partitions=PARTITIONS,
        payload=False,
        work=tmp_path / "job",
        cores=2,
    )
    peer = IcebergKafkaConnectPeer()
    peer.prepare(job)

    _run_until(peer, job, EVENTS)

    progress = peer.progress(job)
    assert progress.records == EVENTS
    assert progress.commits >= 1 and progress.data_files >= 1  # one task (tasks.max 1)
    assert progress.data_bytes > 0 and progress.first_commit_ms is not None

    rows = peer.rows(job)
    assert rows.schema == COORDS
    assert rows.num_rows == EVENTS
    seen = set(
        zip(
            rows["topic"].to_pylist(),
            rows["partition"].to_pylist(),
            rows["offset"].to_pylist(),
            strict=True,
        )
    )
    expected = {
        (topic, p, o)
        for (_, p), (first, last) in produced.offsets.items()
        for o in range(first, last + 1)
    }
    assert len(expected) == EVENTS
    assert seen == expected  # every record, and (num_rows == EVENTS) each exactly once
    assert rows["kafka_ts_ms"].null_count == 0 and rows["commit_ts_ms"].null_count == 0
    assert pc.min(rows["commit_ts_ms"]).as_py() >= progress.first_commit_ms

    # pyiceberg's SqlCatalog reads what Iceberg's JdbcCatalog committed: the sink's snapshots
    table = peer._table(job)
    summaries = [s.summary.additional_properties for s in table.snapshots() if s.summary]
    assert summaries and all("kafka.connect.commit-id" in s for s in summaries)
    assert str(table.schema().find_field("ts").field_type) == "timestamptz"
    # ... and the JSON values arrive with the events' own types (ts a timestamptz, not text)
    values = table.scan(selected_fields=("event_id", "ts", "amount")).to_arrow()
    cols = (values[c].to_pylist() for c in ("event_id", "ts", "amount"))
    got = {e: (t, a) for e, t, a in zip(*cols, strict=True)}
    want = {}
    for _, raw in generate_events(SPEC):
        event = json.loads(raw)
        ts = datetime.fromisoformat(event["ts"].replace("Z", "+00:00"))
        want[event["event_id"]] = (ts, event["amount"])
    assert got == want


def test_iceberg_kafka_connect_many_tables(kafka_broker: KafkaTestBroker, tmp_path: Path) -> None:
    base = kafka_broker.new_topic("peer-kcm", PARTITIONS)
    # "<base>.1" as a bare regex also matches "<base>x1"; "<base>" unanchored, all three
    topics = [f"{base}.1", f"{base}x1", base]
    for t in topics[:2]:
        kafka_broker.create_topic(t, PARTITIONS)
    counts = {t: n for t, n in zip(topics, (1_000, 1_500, 2_000), strict=True)}
    expected: dict[str, set[tuple[str, int, int]]] = {}
    for i, (t, n) in enumerate(counts.items()):
        produced = produce(
            kafka_broker.bootstrap_servers, t, GeneratorSpec(count=n, seed=31 + i), PARTITIONS
        )
        assert produced.produced == n
        expected[t] = {
            (t, p, o)
            for (_, p), (first, last) in produced.offsets.items()
            for o in range(first, last + 1)
        }

    result = run_connect_tables(
        kafka_broker.bootstrap_servers, topics, tmp_path / "job", batch=500, timeout_s=TIMEOUT_S
    )

    total = sum(counts.values())
    assert result.run.records == total and result.run.cpu_s > 0
    assert result.run.peak_rss_bytes > 50 * 2**20  # the cgroup saw the worker's JVM
    assert len(set(result.tables.values())) == len(topics)
    assert result.table_records == {result.tables[t]: n for t, n in counts.items()}
    assert result.exactly_once, {t: x.as_dict() for t, x in result.tallies.items()}

    # the same, counted here from the tables themselves: each holds its topic's records,
    # each once, and none of another topic's
    job = PeerJob(
        kafka_broker.bootstrap_servers,
        topics[0],
        PARTITIONS,
        False,
        tmp_path / "job",
        topics=tuple(topics),
    )
    by_topic = IcebergKafkaConnectPeer().table_rows(job)
    for t in topics:
        rows = by_topic[t]
        triples = list(
            zip(
                rows["topic"].to_pylist(),
                rows["partition"].to_pylist(),
                rows["offset"].to_pylist(),
                strict=True,
            )
        )
        assert len(triples) == counts[t] and set(triples) == expected[t], t
    sink = (tmp_path / "job" / "connect" / "sink.properties").read_text()
    assert f"iceberg.tables.route-field={conf.ROUTE_FIELD}\n" in sink
