"""Recovery with real Spark, a live broker and real Iceberg catalogs.

* Driver SIGKILLed at every named fault point (separate OS processes, `ingest run`),
  restarted: every produced (topic, partition, offset) is in the tables exactly once.
* The recommit path finishes a precommitted batch without recomputing it.
* A checkpoint restored from an older copy: the overlap is dropped and counted, or
  stops the query under ``onOverlap: fail``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.drivers import (
    coords,
    iceberg_config,
    killed_at_every_fault_point,
    pipeline_config,
    produced,
    run_cli,
    run_driver_killed,
    run_driver_ok,
    write_config,
)
from support.kafka_fixtures import KafkaTestBroker
from support.pg_fixtures import require_postgres_uri

from lab.generator import GeneratorSpec, produce
from pipeline.app import Pipeline
from pipeline.commit.instant import InstantState


def _config_file(
    tmp: Path, bootstrap: str, topic: str, catalog: dict[str, Any], master: str = "local[2]"
) -> Path:
    sink = {
        "catalog": catalog,
        "table": f"db_{topic.replace('-', '_')}.events",
        "partitionBy": ["day(ts)"],
    }
    return write_config(tmp, pipeline_config(tmp, bootstrap, topic, sink, spark={"master": master}))


def _data_files(warehouse: Path) -> set[str]:
    return {str(p) for p in warehouse.rglob("*.parquet") if "/data/" in str(p)}


def _referenced(*tables: Any) -> set[str]:
    """Local paths of the data files the tables' current snapshots reference."""
    return {
        f.file.file_path.removeprefix("file://")
        for table in tables
        if table is not None
        for f in table.scan().plan_files()
    }


# ≈ 4 min (9 driver processes): in CI's rotation (tests/support/rotation.py); CI's drill stage arms
# every point on Iceberg with the SQLite catalog and counts every record, and the default
# suite commits through PostgreSQL (test_pipeline_iceberg.py::test_postgresql_catalog).
@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.core
@pytest.mark.parametrize("catalog_kind", ["postgresql"])
def test_driver_killed_at_every_fault_point(
    kafka_broker: KafkaTestBroker, tmp_path: Path, catalog_kind: str
) -> None:
    catalog: dict[str, Any] = {"warehouse": str(tmp_path / "warehouse")}
    if catalog_kind == "postgresql":
        uri = require_postgres_uri()
        catalog = {**catalog, "name": f"crash_{os.getpid()}", "uri": uri}
    topic = kafka_broker.new_topic("crash", 3)
    config = _config_file(tmp_path, kafka_broker.bootstrap_servers, topic, catalog)
    results = killed_at_every_fault_point(kafka_broker.bootstrap_servers, topic, config, 100)
    files_before = _data_files(tmp_path / "warehouse")
    run_driver_ok(config)  # recovers the last instant, then drains
    results.append(
        produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=300, seed=99))
    )
    run_driver_ok(config)

    p = Pipeline(_load(config))
    assert coords(p) == produced(*results)  # every record exactly once, across 9 runs
    assert p.timeline is not None
    states = Counter(i.state for i in p.timeline.instants())
    assert states[InstantState.ROLLED_BACK] >= 2  # after-requested, after-write
    assert not p.timeline.pending()
    # no staged file survives that the table does not reference
    table = p.tables.main.table()
    assert table is not None
    dead = p.tables.dead_letter.table() if p.tables.dead_letter else None
    referenced = _referenced(table, dead)
    assert _data_files(tmp_path / "warehouse") == referenced
    assert files_before <= referenced | files_before


def _load(config: Path) -> Any:
    from pipeline.config import load_config

    return load_config(config)


@pytest.mark.extended  # CI's budget: the drill stage's kill drills recommit (counted)
@pytest.mark.core
def test_recommit_does_not_recompute(kafka_broker: KafkaTestBroker, tmp_path: Path) -> None:
    topic = kafka_broker.new_topic("recommit", 2)
    config = _config_file(
        tmp_path, kafka_broker.bootstrap_servers, topic, {"warehouse": str(tmp_path / "warehouse")}
    )
    r1 = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=800, seed=21))
    run_driver_killed(config, "after-precommit:kill")
    staged = _data_files(tmp_path / "warehouse")
    assert staged  # the killed run staged files
    p = Pipeline(_load(config))
    assert p.timeline is not None
    (pending,) = p.timeline.pending()
    assert pending.state is InstantState.INFLIGHT
    st = run_cli("status", "--config", str(config))
    assert st.returncode == 0, st.stderr
    assert "writer epoch: 1" in st.stdout and pending.time in st.stdout, st.stdout
    assert "inflight" in st.stdout and "committed offsets" not in st.stdout  # no commit yet
    run_driver_ok(config)
    # the same files were committed; the workers did not run again
    assert _data_files(tmp_path / "warehouse") == staged
    p = Pipeline(_load(config))
    assert coords(p) == produced(r1)
    snap = p.tables.main.table().current_snapshot()  # type: ignore[union-attr]
    assert snap is not None and snap.summary is not None
    assert snap.summary.additional_properties["ingest.instant"] == pending.time


@pytest.mark.slow  # default suite under 12 minutes: CI's slow stage runs it
def test_restored_old_checkpoint_drops_overlap_or_fails(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    topic = kafka_broker.new_topic("restore", 2)
    cfg = iceberg_config(tmp_path, kafka_broker.bootstrap_servers, topic)
    r1 = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=500, seed=31))
    Pipeline(cfg, spark).run()
    backup = tmp_path / "checkpoint-backup"
    shutil.copytree(tmp_path / "checkpoint", backup)
    r2 = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=700, seed=32))
    Pipeline(cfg, spark).run()

    # Restoring the old checkpoint with no new data: Spark replans batch 1 exactly as
    # committed (same batch id, same end offsets) and it is skipped as a replay.
    shutil.rmtree(tmp_path / "checkpoint")
    shutil.copytree(backup, tmp_path / "checkpoint")
    assert Pipeline(cfg, spark).run().skipped == 1

    # With new data, the restored checkpoint's batch 1 covers r2 (in the table) and r3.
    shutil.rmtree(tmp_path / "checkpoint")
    shutil.copytree(backup, tmp_path / "checkpoint")
    r3 = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=200, seed=33))
    strict = cfg.model_copy(update={"commit": cfg.commit.model_copy(update={"on_overlap": "fail"})})
    with pytest.raises(Exception, match=r"\[ingest:overlap\] partition .*already committed"):
        Pipeline(strict, spark).run()

    p = Pipeline(cfg, spark)
    stats = p.run()
    assert stats.overlap_dropped == 700  # r2 again: dropped and counted, not duplicated
    assert coords(p) == produced(r1, r2, r3)
    summary = p.tables.main.table().current_snapshot().summary  # type: ignore[union-attr]
    committed = json.loads(summary.additional_properties["ingest.committed-offsets"])[topic]
    assert {int(k): v for k, v in committed.items()} == {
        p_: b + 1 for (_, p_), (_, b) in r3.offsets.items()
    }


@pytest.mark.extended  # CI's budget: the drill stage's executor-loss drill covers it
def test_worker_killed_mid_write_is_retried_without_duplicates(
    kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    topic = kafka_broker.new_topic("midwrite", 2)
    # local[2,3]: up to 3 attempts per task, as on a cluster
    config = _config_file(
        tmp_path,
        kafka_broker.bootstrap_servers,
        topic,
        {"warehouse": str(tmp_path / "warehouse")},
        master="local[2,3]",
    )
    r1 = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=1000, seed=51))
    run_driver_ok(config, "mid-write:kill")
    p = Pipeline(_load(config))
    assert coords(p) == produced(r1)
    # the killed attempts staged files too; only the retries' files are in the table
    table = p.tables.main.table()
    assert table is not None
    referenced = _referenced(table)
    assert len(_data_files(tmp_path / "warehouse") - referenced) >= 1
