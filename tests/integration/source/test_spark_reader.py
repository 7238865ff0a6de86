"""``source.reader: spark`` (Spark's own Kafka source) against real Apache Kafka, on whatever
PySpark runs the tests: the default one, and PySpark 3.5 in CI's own stage.

* Real retention under a stopped pipeline: the restart stops with ``[ingest:data-loss]``
  in one line; ``failOnDataLoss: false`` reads what Kafka still has, once, and the table
  records the lost range, as on the Python reader.
* Transactions: ``read_committed`` by default (aborted records never land).
* SASL/SCRAM: the librdkafka settings of the config reach the Java client.
* A lost checkpoint resumes from the table; partitions added to the topic are read, from
  their first offset, by the next start of the query.
* The Python reader on a Spark that cannot run it: one line naming the version.

Each test counts (topic, partition, offset): every expected one once, nothing else.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer
from support.drivers import coords, pipeline_config, produced, recorded_data_loss
from support.kafka_fixtures import (
    KafkaTestBroker,
    await_condition,
    log_start,
    produce_in_segments,
)

from lab.generator import GeneratorSpec, produce
from pipeline.app import Pipeline
from pipeline.config import parse_config
from pipeline.errors import find_pipeline_error
from pipeline.source.choice import PYTHON_READER_SINCE
from pipeline.source.spark_line import spark_version

pytestmark = pytest.mark.core  # the exactly-once core: CI runs it on every Spark line


def _config(tmp: Path, bootstrap: str, topic: str, **source: Any) -> dict[str, Any]:
    sink = {
        "catalog": {"warehouse": str(tmp / "warehouse")},
        "table": f"db_{topic.replace('-', '_')}.events",
    }
    return pipeline_config(tmp, bootstrap, topic, sink, source={"reader": "spark", **source})


def test_retention_loss_is_one_line_and_lenient_runs_record_it(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    cluster = kafka_broker.own()
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_broker.new_topic("sk-seg", 1, {"segment.ms": "100"})
    first = produce_in_segments(bootstrap, topic, 2, seed=1)
    data = _config(tmp_path, bootstrap, topic)
    Pipeline(parse_config(data), spark).run(timeout_s=180)
    later = produce_in_segments(bootstrap, topic, 4, seed=3)
    cluster.set_topic_config(topic, {"retention.ms": "1000"})
    await_condition("retention", lambda: log_start(bootstrap, topic, 0) > 200)
    low = log_start(bootstrap, topic, 0)
    cluster.set_topic_config(topic, {"retention.ms": "604800000"})

    with pytest.raises(Exception) as info:
        Pipeline(parse_config(data), spark).run(timeout_s=180)
    line = find_pipeline_error(info.value, tagged=True)
    assert line is not None and "\n" not in line, info.value
    assert line.startswith("[ingest:data-loss] Spark's Kafka source stopped: "), line
    assert "200" in line and topic in line, line  # the first offset gone, the partition
    assert "failOnDataLoss=false" in line, line

    lenient = parse_config({**data, "source": {**data["source"], "failOnDataLoss": False}})
    p = Pipeline(lenient, spark)
    p.run(timeout_s=180)
    want = produced(*first, *later)
    for o in range(200, low):
        del want[(topic, 0, o)]
    assert coords(p) == want  # everything Kafka still had, once
    assert recorded_data_loss(p) == [{topic: {"0": [200, low]}}]


def test_read_committed_by_default(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_broker.new_topic("sk-txn", 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"})
    producer.init_transactions(30)
    kept: list[tuple[str, int, int]] = []

    def send(n: int, outcome: str) -> None:
        got: list[tuple[str, int, int]] = []
        producer.begin_transaction()
        for i in range(n):
            producer.produce(
                topic,
                value=b'{"event_id": "e%d"}' % i,
                partition=0,
                on_delivery=lambda err, m: got.append((m.topic(), m.partition(), m.offset())),
            )
        producer.flush(30)
        if outcome == "commit":
            producer.commit_transaction(30)
            kept.extend(got)
        else:
            producer.abort_transaction(30)

    send(50, "commit")
    send(40, "abort")
    send(30, "commit")
    data = _config(tmp_path, bootstrap, topic)
    data["decode"] = {"schema": [{"name": "event_id", "type": "string"}]}
    p = Pipeline(parse_config(data), spark)
    p.run(timeout_s=180)
    assert coords(p) == {c: 1 for c in kept}


def test_sasl_scram_settings_reach_the_java_client(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    cluster = kafka_broker.own()
    cluster.add_scram_user("spark-reader", "pw-for-spark-reader")
    topic = kafka_broker.new_topic("sk-sasl", 2)
    r = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=300, seed=5))
    auth = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "spark-reader",
        "sasl.password": "pw-for-spark-reader",
    }
    p = Pipeline(
        parse_config(_config(tmp_path, cluster.sasl_bootstrap_servers, topic, kafka=auth)), spark
    )
    p.run(timeout_s=180)
    assert coords(p) == produced(r)


def test_lost_checkpoint_and_added_partitions(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    cluster = kafka_broker.own()
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_broker.new_topic("sk-grow", 2)
    results = [produce(bootstrap, topic, GeneratorSpec(count=400, seed=1), 2)]
    data = _config(tmp_path, bootstrap, topic, maxRecordsPerTrigger=150)
    p = Pipeline(parse_config(data), spark)
    p.run(timeout_s=180)
    assert coords(p) == produced(*results)

    shutil.rmtree(tmp_path / "checkpoint")  # lost: the table says where to resume
    cluster.add_partitions(topic, 4)
    results.append(produce(bootstrap, topic, GeneratorSpec(count=400, seed=2), 4))
    p = Pipeline(parse_config(data), spark)
    p.run(timeout_s=180)
    assert coords(p) == produced(*results)
    assert {part for _, part, _ in coords(p)} == {0, 1, 2, 3}


@pytest.mark.parametrize("engine", ["spark", "arrow"])
def test_both_decode_engines_on_its_rows(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path, engine: str
) -> None:
    """Spark's source decodes nothing: each engine decodes its rows, malformed ones to
    the dead-letter table, the same split on both engines."""
    topic = kafka_broker.new_topic(f"sk-dec-{engine}", 3)
    r = produce(
        kafka_broker.bootstrap_servers,
        topic,
        GeneratorSpec(count=1500, malformed_fraction=0.05, seed=21),
        3,
    )
    data = _config(tmp_path, kafka_broker.bootstrap_servers, topic, maxRecordsPerTrigger=600)
    data["decode"]["engine"] = engine
    p = Pipeline(parse_config(data), spark)
    stats = p.run(timeout_s=180)
    assert coords(p) == produced(r)
    assert stats.dead_letters == r.malformed > 0
    main = p.tables.main.table()
    assert main is not None and len(main.scan().to_arrow()) == 1500 - r.malformed


def test_python_reader_where_spark_cannot_run_it(tmp_path: Path) -> None:
    """On PySpark < 4.2 ``source.reader: python`` is refused in one line naming the
    version, before anything is created or the broker tried (``ingest run`` exits 2); from
    4.2 the same config passes the checks made without the network."""
    from pipeline.app import check_locally

    data = _config(tmp_path, "127.0.0.1:1", "t")
    data["source"]["reader"] = "python"
    version = spark_version()
    if version >= PYTHON_READER_SINCE:
        check_locally(parse_config(data))
        return
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    r = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines == [
        "error: [ingest:config] source.reader: python needs PySpark >= 4.2 (installed: "
        f"{version[0]}.{version[1]}); use source.reader: spark (Spark's Kafka source)"
    ], r.stderr
    assert not (tmp_path / "checkpoint").exists() and not (tmp_path / "warehouse").exists()
