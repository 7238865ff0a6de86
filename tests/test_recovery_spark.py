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
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import postgres_uri
from drivers import run_driver as _run
from kafka_fixtures import KafkaTestBroker, unique_topic
from test_pipeline_iceberg import coords, make_config, produced

from pipeline.app import Pipeline
from pipeline.commit.instant import InstantState
from pipeline.tools.generator import GeneratorSpec, event_schema_fields, produce

ROOT = Path(__file__).resolve().parent.parent


def _config_file(
    tmp: Path, bootstrap: str, topic: str, catalog: dict[str, Any], master: str = "local[2]"
) -> Path:
    cfg = {
        "id": f"p-{topic}",
        "source": {"bootstrapServers": bootstrap, "topics": [topic]},
        "decode": {"schema": event_schema_fields()},
        "sink": {
            "catalog": catalog,
            "table": f"db_{topic.replace('-', '_')}.events",
            "partitionBy": ["day(ts)"],
        },
        "checkpointLocation": str(tmp / "checkpoint"),
        "trigger": {"mode": "available-now"},
        "spark": {"master": master},
        "metrics": {"enabled": False},
    }
    path = tmp / "pipeline.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _data_files(warehouse: Path) -> set[str]:
    return {str(p) for p in warehouse.rglob("*.parquet") if "/data/" in str(p)}


# (fault armed in this run, what the NEXT run's recovery must do with its instant)
CHAIN = [
    ("after-requested:kill", "rolled_back"),
    ("after-write:kill", "rolled_back"),
    ("during-rollback:kill", None),  # dies while rolling back the previous run's instant
    ("after-precommit:kill", "recommitted"),
    ("after-dead-letter-commit:kill", "recommitted"),
    ("after-commit:kill", "completed"),
    ("after-commit-before-checkpoint:kill", "replay_skipped"),
]


# ≈ 4 min per catalog (9 driver processes): under -m slow; the default run keeps the fast
# SIGKILL drill and the unit tests of every crash point
@pytest.mark.slow
@pytest.mark.parametrize("catalog_kind", ["sqlite", "postgresql"])
def test_driver_killed_at_every_fault_point(
    kafka_broker: KafkaTestBroker, tmp_path: Path, catalog_kind: str
) -> None:
    catalog: dict[str, Any] = {"warehouse": str(tmp_path / "warehouse")}
    if catalog_kind == "postgresql":
        uri = postgres_uri()
        if uri is None:
            pytest.skip("no PostgreSQL server answering on 127.0.0.1:5432")
        catalog = {**catalog, "name": f"crash_{os.getpid()}", "uri": uri}
    topic = unique_topic("crash")
    kafka_broker.create_topic(topic, 3)
    config = _config_file(tmp_path, kafka_broker.bootstrap_servers, topic, catalog)
    results = []
    for i, (fault, _) in enumerate(CHAIN):
        results.append(
            produce(
                kafka_broker.bootstrap_servers,
                topic,
                GeneratorSpec(count=600, malformed_fraction=0.05, seed=100 + i),
            )
        )
        r = _run(config, fault)
        assert r.returncode == -signal.SIGKILL, (fault, r.returncode, r.stderr[-2000:])
    files_before = _data_files(tmp_path / "warehouse")
    r = _run(config, None)  # recovers the last instant, then drains
    assert r.returncode == 0, r.stderr[-3000:]
    results.append(
        produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=300, seed=99))
    )
    r = _run(config, None)
    assert r.returncode == 0, r.stderr[-3000:]

    p = Pipeline(_load(config))
    assert coords(p) == produced(*results)  # every record exactly once, across 9 runs
    assert p.timeline is not None
    states = Counter(i.state for i in p.timeline.instants())
    assert states[InstantState.ROLLED_BACK] >= 2  # after-requested, after-write
    assert not p.timeline.pending()
    # no staged file survives that the table does not reference
    table = p.sinks.main.table()
    assert table is not None
    referenced = {f.file.file_path.removeprefix("file://") for f in table.scan().plan_files()}
    dead = p.sinks.dead_letter.table() if p.sinks.dead_letter else None
    if dead is not None:
        referenced |= {f.file.file_path.removeprefix("file://") for f in dead.scan().plan_files()}
    assert _data_files(tmp_path / "warehouse") == referenced
    assert files_before <= referenced | files_before


def _load(config: Path) -> Any:
    from pipeline.config import load_config

    return load_config(config)


def test_recommit_does_not_recompute(kafka_broker: KafkaTestBroker, tmp_path: Path) -> None:
    topic = unique_topic("recommit")
    kafka_broker.create_topic(topic, 2)
    config = _config_file(
        tmp_path, kafka_broker.bootstrap_servers, topic, {"warehouse": str(tmp_path / "warehouse")}
    )
    r1 = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=800, seed=21))
    r = _run(config, "after-precommit:kill")
    assert r.returncode == -signal.SIGKILL
    staged = _data_files(tmp_path / "warehouse")
    assert staged  # the killed run staged files
    p = Pipeline(_load(config))
    assert p.timeline is not None
    (pending,) = p.timeline.pending()
    assert pending.state is InstantState.INFLIGHT
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    st = subprocess.run(
        [sys.executable, "-m", "pipeline", "status", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert st.returncode == 0, st.stderr
    assert "writer epoch: 1" in st.stdout and pending.time in st.stdout, st.stdout
    assert "inflight" in st.stdout and "committed offsets" not in st.stdout  # no commit yet
    r = _run(config, None)
    assert r.returncode == 0, r.stderr[-3000:]
    # the same files were committed; the workers did not run again
    assert _data_files(tmp_path / "warehouse") == staged
    p = Pipeline(_load(config))
    assert coords(p) == produced(r1)
    snap = p.sinks.main.table().current_snapshot()  # type: ignore[union-attr]
    assert snap is not None and snap.summary is not None
    assert snap.summary.additional_properties["ingest.instant"] == pending.time


def test_restored_old_checkpoint_drops_overlap_or_fails(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    topic = unique_topic("restore")
    kafka_broker.create_topic(topic, 2)
    cfg = make_config(tmp_path, kafka_broker.bootstrap_servers, topic)
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
    summary = p.sinks.main.table().current_snapshot().summary  # type: ignore[union-attr]
    committed = json.loads(summary.additional_properties["ingest.committed-offsets"])[topic]
    assert {int(k): v for k, v in committed.items()} == {
        p_: b + 1 for (_, p_), (_, b) in r3.offsets.items()
    }


def test_worker_killed_mid_write_is_retried_without_duplicates(
    kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    topic = unique_topic("midwrite")
    kafka_broker.create_topic(topic, 2)
    # local[2,3]: up to 3 attempts per task, as on a cluster
    config = _config_file(
        tmp_path,
        kafka_broker.bootstrap_servers,
        topic,
        {"warehouse": str(tmp_path / "warehouse")},
        master="local[2,3]",
    )
    r1 = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=1000, seed=51))
    r = _run(config, "mid-write:kill")
    assert r.returncode == 0, r.stderr[-3000:]
    p = Pipeline(_load(config))
    assert coords(p) == produced(r1)
    # the killed attempts staged files too; only the retries' files are in the table
    table = p.sinks.main.table()
    assert table is not None
    referenced = {f.file.file_path.removeprefix("file://") for f in table.scan().plan_files()}
    assert len(_data_files(tmp_path / "warehouse") - referenced) >= 1
