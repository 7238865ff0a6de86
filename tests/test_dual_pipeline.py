"""``sink.format: both``: one query feeding an Iceberg and a Hudi table, each exactly once.

Counted by (topic, partition, offset): Iceberg main + dead letters through pyiceberg, the
Hudi table through hudi-rs (an independent reader). The crash between the two table
commits is the new window: the same batch replayed is recommitted; a new query
(checkpoint lost) must roll the half-committed instant forward, not back.
"""

from __future__ import annotations

import shutil
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from drivers import run_driver as _run
from kafka_fixtures import KafkaTestBroker, unique_topic
from test_pipeline_iceberg import coords, produced

from pipeline.app import Pipeline
from pipeline.config import load_config, parse_config
from pipeline.tools.generator import GeneratorSpec, event_schema_fields, produce

hudi = pytest.importorskip("hudi")
ROOT = Path(__file__).resolve().parent.parent


def dual_config(tmp: Path, bootstrap: str, topic: str) -> dict[str, Any]:
    return {
        "id": f"dual-{topic}",
        "source": {"bootstrapServers": bootstrap, "topics": [topic]},
        "decode": {"schema": event_schema_fields()},
        "sink": {
            "format": "both",
            "catalog": {"warehouse": str(tmp / "warehouse")},
            "table": "db.events",
            "partitionBy": ["day(ts)"],
            "hudi": {"basePath": str(tmp / "hudi" / "events"), "partitionFields": ["country"]},
        },
        "checkpointLocation": str(tmp / "checkpoint"),
        "trigger": {"mode": "available-now"},
        "spark": {"master": "local[2]"},
        "metrics": {"enabled": False},
    }


def hudi_coords(tmp: Path) -> Counter[tuple[str, int, int]]:
    base = tmp / "hudi" / "events"
    if not (base / ".hoodie").is_dir():
        return Counter()
    batches = hudi.HudiTableBuilder.from_base_uri(str(base)).build().read()
    if not batches:
        return Counter()
    t = pa.Table.from_batches(batches)
    return Counter(
        zip(
            t["_kafka_topic"].to_pylist(),
            t["_kafka_partition"].to_pylist(),
            t["_kafka_offset"].to_pylist(),
            strict=True,
        )
    )


def good(results: list[Any], counted: Counter[tuple[str, int, int]]) -> Counter[Any]:
    """Produced records minus the dead letters (which only the Iceberg side keeps)."""
    return produced(*results) - counted


def _dead_letters(p: Pipeline) -> Counter[tuple[str, int, int]]:
    t = p.sinks.dead_letter.table() if p.sinks.dead_letter else None
    if t is None:
        return Counter()
    a = t.scan(selected_fields=("_kafka_topic", "_kafka_partition", "_kafka_offset")).to_arrow()
    return Counter(
        zip(
            a["_kafka_topic"].to_pylist(),
            a["_kafka_partition"].to_pylist(),
            a["_kafka_offset"].to_pylist(),
            strict=True,
        )
    )


def test_one_query_two_tables_exactly_once(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    topic = unique_topic("dual")
    kafka_broker.create_topic(topic, 3)
    r1 = produce(
        kafka_broker.bootstrap_servers,
        topic,
        GeneratorSpec(count=1500, malformed_fraction=0.04, seed=71),
    )
    cfg = parse_config(dual_config(tmp_path, kafka_broker.bootstrap_servers, topic))
    p = Pipeline(cfg, spark)
    p.run()
    assert coords(p) == produced(r1)  # Iceberg main + dead letters
    dead = _dead_letters(p)
    assert sum(dead.values()) == r1.malformed
    assert hudi_coords(tmp_path) == good([r1], dead)  # Hudi: every decoded record once

    r2 = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=500, seed=72))
    shutil.rmtree(tmp_path / "checkpoint")  # lost checkpoint: both resume from the tables
    p = Pipeline(cfg, spark)
    p.run()
    assert coords(p) == produced(r1, r2)
    assert hudi_coords(tmp_path) == good([r1, r2], dead)


@pytest.mark.parametrize(
    "replay", ["same-checkpoint", pytest.param("checkpoint-lost", marks=pytest.mark.slow)]
)
def test_crash_between_the_two_table_commits(
    kafka_broker: KafkaTestBroker, tmp_path: Path, replay: str
) -> None:
    topic = unique_topic("dualcrash")
    kafka_broker.create_topic(topic, 2)
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump(dual_config(tmp_path, kafka_broker.bootstrap_servers, topic)))
    r1 = produce(
        kafka_broker.bootstrap_servers,
        topic,
        GeneratorSpec(count=800, malformed_fraction=0.05, seed=81),
    )
    r = _run(config, "between-table-commits:kill")
    assert r.returncode == -signal.SIGKILL, r.stderr[-3000:]
    p = Pipeline(load_config(config))
    assert coords(p) == produced(r1)  # Iceberg committed before the kill
    assert hudi_coords(tmp_path) == Counter()  # Hudi not yet
    if replay == "checkpoint-lost":
        shutil.rmtree(tmp_path / "checkpoint")
    r2 = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=300, seed=82))
    r = _run(config, None)
    assert r.returncode == 0, r.stderr[-3000:]
    p = Pipeline(load_config(config))
    assert coords(p) == produced(r1, r2)
    assert hudi_coords(tmp_path) == good([r1, r2], _dead_letters(p))
