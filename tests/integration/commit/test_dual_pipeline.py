"""``sink.format: both``: one query feeding an Iceberg and a Hudi table, each exactly once.

Counted by (topic, partition, offset): Iceberg main + dead letters through pyiceberg, the
Hudi table through hudi-rs (an independent reader). The crash between the two table
commits is the new window: the same batch replayed is recommitted; a new query
(checkpoint lost) must roll the half-committed instant forward, not back.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.drivers import (
    coords,
    hudi_coords,
    iceberg_coords,
    pipeline_config,
    produced,
    run_driver_killed,
    run_driver_ok,
    write_config,
)
from support.kafka_fixtures import KafkaTestBroker

from lab.generator import GeneratorSpec, produce
from pipeline.app import Pipeline
from pipeline.commit.types import DEAD_LETTER
from pipeline.config import load_config, parse_config

hudi = pytest.importorskip("hudi")


def dual_config(tmp: Path, bootstrap: str, topic: str) -> dict[str, Any]:
    sink = {
        "format": "both",
        "catalog": {"warehouse": str(tmp / "warehouse")},
        "table": "db.events",
        "partitionBy": ["day(ts)"],
        "hudi": {"basePath": str(tmp / "hudi" / "events"), "partitionFields": ["country"]},
    }
    return pipeline_config(
        tmp, bootstrap, topic, sink, id=f"dual-{topic}", spark={"master": "local[2]"}
    )


def hudi_main_coords(tmp: Path) -> Counter[tuple[str, int, int]]:
    return hudi_coords(tmp / "hudi" / "events")


def good(results: list[Any], counted: Counter[tuple[str, int, int]]) -> Counter[Any]:
    """Produced records minus the dead letters (which only the Iceberg side keeps)."""
    return produced(*results) - counted


def _dead_letters(p: Pipeline) -> Counter[tuple[str, int, int]]:
    return iceberg_coords(p.tables.commit_tables().get(DEAD_LETTER))


def test_one_query_two_tables_exactly_once(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    topic = kafka_broker.new_topic("dual", 3)
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
    assert hudi_main_coords(tmp_path) == good([r1], dead)  # Hudi: every decoded record once

    r2 = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=500, seed=72))
    shutil.rmtree(tmp_path / "checkpoint")  # lost checkpoint: both resume from the tables
    p = Pipeline(cfg, spark)
    p.run()
    assert coords(p) == produced(r1, r2)
    assert hudi_main_coords(tmp_path) == good([r1, r2], dead)


@pytest.mark.slow  # 77 s in the default suite; CI runs it in its slow stage
@pytest.mark.parametrize(
    "replay", [pytest.param("same-checkpoint", marks=pytest.mark.extended), "checkpoint-lost"]
)
def test_crash_between_the_two_table_commits(
    kafka_broker: KafkaTestBroker, tmp_path: Path, replay: str
) -> None:
    topic = kafka_broker.new_topic("dualcrash", 2)
    config = write_config(tmp_path, dual_config(tmp_path, kafka_broker.bootstrap_servers, topic))
    r1 = produce(
        kafka_broker.bootstrap_servers,
        topic,
        GeneratorSpec(count=800, malformed_fraction=0.05, seed=81),
    )
    run_driver_killed(config, "between-table-commits:kill")
    p = Pipeline(load_config(config))
    assert coords(p) == produced(r1)  # Iceberg committed before the kill
    assert hudi_main_coords(tmp_path) == Counter()  # Hudi not yet
    if replay == "checkpoint-lost":
        shutil.rmtree(tmp_path / "checkpoint")
    r2 = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=300, seed=82))
    run_driver_ok(config)
    p = Pipeline(load_config(config))
    assert coords(p) == produced(r1, r2)
    assert hudi_main_coords(tmp_path) == good([r1, r2], _dead_letters(p))
