"""Writer-epoch fencing with real pyiceberg catalogs (SQLite, PostgreSQL) and real drivers.

* Deterministic race: the zombie loaded the table for its commit *before* the new owner's
  fence and commits *after* it. Its append must be refused (not rebased, which is what
  pyiceberg's own retry would do) and the new owner then finishes the batch.
* Two real drivers (`ingest run` processes) on one pipeline: the older is fenced and
  exits non-zero with a clear line; no record is committed twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.drivers import coords, pipeline_config, produced, write_config
from support.kafka_fixtures import KafkaTestBroker
from support.pg_fixtures import require_postgres_uri

from lab.generator import GeneratorSpec, produce
from pipeline.commit.coordinator import Coordinator
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.commit.table_set import CommitTables
from pipeline.commit.types import PartitionStats, StagedBatch
from pipeline.config import parse_config
from pipeline.errors import FencedError
from pipeline.formats.iceberg.pipeline_tables import IcebergCommitter, IcebergTables
from pipeline.formats.iceberg.writer import write_data_files

ROOT = Path(__file__).resolve().parents[3]
TP = TopicPartition("events", 0)


def _cfg(tmp: Path, catalog: dict[str, Any], name: str) -> Any:
    return parse_config(
        {
            "id": f"fence-{name}",
            "source": {"bootstrapServers": "unused:9092", "topics": ["events"]},
            "decode": {"schema": [{"name": "a", "type": "string"}]},
            "sink": {"catalog": catalog, "table": f"db_{name}.events"},
            "checkpointLocation": str(tmp / "ckpt"),
        }
    )


def _writer(sinks: IcebergTables, first: int, last: int, on_write: Any = None) -> Any:
    """A worker stand-in that stages a real Parquet data file of offsets [first, last)."""

    def write(write_id: str, drop_below: PartitionOffsets) -> StagedBatch:
        if on_write is not None:
            on_write()
        n = last - first
        batch = pa.record_batch(
            {
                "a": pa.array([f"v{i}" for i in range(first, last)]),
                "_kafka_topic": pa.array([TP.topic] * n),
                "_kafka_partition": pa.array([TP.partition] * n, pa.int32()),
                "_kafka_offset": pa.array(range(first, last), pa.int64()),
                "_kafka_timestamp": pa.array([None] * n, pa.timestamp("us", tz="UTC")),
            }
        )
        ctx = sinks.main.iceberg.write_context(write_id)
        files = write_data_files(ctx, [batch], 0)
        return StagedBatch(
            data_files=files, stats=[PartitionStats(TP.topic, 0, first, last - 1, n)]
        )

    return write


def _offsets_in_table(sinks: IcebergTables) -> Counter[int]:
    table = sinks.main.table()
    assert table is not None
    return Counter(
        table.scan(selected_fields=("_kafka_offset",)).to_arrow()["_kafka_offset"].to_pylist()
    )


class _RacingCommitter(IcebergCommitter):
    """Lets the test act between the zombie's table load and its catalog commit, once
    ``between`` is set (until then: a plain committer)."""

    def __init__(self, sink: Any, between: Any = None) -> None:
        super().__init__(sink)
        self.between = between

    def commit(self, files: list[bytes], checkpoint: Any) -> None:
        from pipeline.commit.checkpoint import CommitCheckpoint

        if self.between is None:
            return super().commit(files, checkpoint)

        fired = []

        def precondition(latest: CommitCheckpoint | None) -> None:
            if not fired:  # first attempt: the zombie has loaded table metadata
                fired.append(True)
                self.between()

        self.iceberg.commit(files, checkpoint, precondition=precondition)


@pytest.mark.parametrize("catalog_kind", ["sqlite", "postgresql"])
def test_zombie_loaded_before_fence_commits_after_it_is_refused(
    tmp_path: Path, catalog_kind: str
) -> None:
    catalog: dict[str, Any] = {"warehouse": str(tmp_path / "wh")}
    name = f"z{os.getpid()}_{catalog_kind}_{int(time.time() * 1000) % 10**8}"
    if catalog_kind == "postgresql":
        uri = require_postgres_uri()
        catalog = {**catalog, "name": name, "uri": uri}
    cfg = _cfg(tmp_path, catalog, name)
    inc = "incarnation-1"

    zombie_sinks = IcebergTables.from_config(cfg)
    racing = _RacingCommitter(zombie_sinks.main.iceberg)
    zombie = Coordinator(cfg.id, CommitTables(racing), timeline=zombie_sinks.timeline(cfg.id))
    zombie.acquire_epoch("zombie")
    out = zombie.run_batch(inc, 0, None, PartitionOffsets({TP: 100}), _writer(zombie_sinks, 0, 100))
    assert out.outcome == "committed"

    owner_sinks = IcebergTables.from_config(cfg)
    owner = Coordinator(
        cfg.id, CommitTables(owner_sinks.main), timeline=owner_sinks.timeline(cfg.id)
    )
    racing.between = lambda: owner.acquire_epoch("owner")
    start, end = PartitionOffsets({TP: 100}), PartitionOffsets({TP: 250})
    with pytest.raises(FencedError, match="epoch"):
        zombie.run_batch(inc, 1, start, end, _writer(zombie_sinks, 100, 250))
    assert owner.epoch > zombie.epoch
    assert _offsets_in_table(owner_sinks) == Counter(range(100))  # refused, not rebased

    # The new owner replays batch 1 (same checkpoint): the zombie's precommitted instant
    # is recommitted under the owner's epoch, without running the workers again.
    calls: list[int] = []
    out = owner.run_batch(
        inc, 1, start, end, _writer(owner_sinks, 100, 250, lambda: calls.append(1))
    )
    assert out.outcome == "recommitted" and not calls
    assert _offsets_in_table(owner_sinks) == Counter(range(250))
    # and the zombie stays fenced for good
    with pytest.raises(FencedError):
        zombie.run_batch(inc, 2, end, PartitionOffsets({TP: 300}), _writer(zombie_sinks, 250, 300))
    assert _offsets_in_table(owner_sinks) == Counter(range(250))


def _config_file(tmp: Path, bootstrap: str, topic: str, catalog: dict[str, Any]) -> Path:
    sink = {"catalog": catalog, "table": f"db_{topic.replace('-', '_')}.events"}
    cfg = pipeline_config(
        tmp,
        bootstrap,
        topic,
        sink,
        id=f"two-{topic}",
        trigger={"mode": "processing-time", "interval": "1 second"},
        spark={"master": "local[2]"},
    )
    return write_config(tmp, cfg)


@pytest.mark.slow  # two driver processes (~70 s): in the rotation; CI's zombie drill fences one
@pytest.mark.extended
def test_second_driver_fences_the_first(kafka_broker: KafkaTestBroker, tmp_path: Path) -> None:
    uri = require_postgres_uri()  # real concurrent commits through PostgreSQL
    catalog: dict[str, Any] = {"warehouse": str(tmp_path / "wh")}
    catalog = {**catalog, "name": f"two_{os.getpid()}", "uri": uri}
    topic = kafka_broker.new_topic("two", 2)
    config = _config_file(tmp_path, kafka_broker.bootstrap_servers, topic, catalog)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "INGEST_SPARK_LOG_LEVEL": "ERROR"}
    cmd = [sys.executable, "-m", "pipeline", "run", "--config", str(config)]
    results = [produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=500, seed=41))]
    first = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    second: subprocess.Popen[str] | None = None
    try:
        cfg = _load(config)
        _wait(lambda: _committed_rows(cfg) >= 500, 120, "first driver's first commit")
        second = subprocess.Popen(
            cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for seed in range(42, 48):  # keep data flowing while the takeover happens
            results.append(
                produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=200, seed=seed))
            )
            time.sleep(1.0)
        _, err = first.communicate(timeout=120)
        assert first.returncode == 2, err[-3000:]
        last = [ln for ln in err.splitlines() if ln.startswith("error: ")]
        assert last and "epoch" in last[-1], err[-3000:]
        assert "superseded" in last[-1] or "must stop" in last[-1], last[-1]
        total = sum(r.produced for r in results)
        _wait(lambda: _committed_rows(cfg) >= total, 120, "second driver catching up")
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    from pipeline.app import Pipeline

    assert coords(Pipeline(cfg)) == produced(*results)


def _load(config: Path) -> Any:
    from pipeline.config import load_config

    return load_config(config)


def _committed_rows(cfg: Any) -> int:
    sinks = IcebergTables.from_config(cfg)
    total = 0
    for c in (sinks.main, sinks.dead_letter):
        t = c.table() if c is not None else None
        if t is not None:
            total += len(t.scan(selected_fields=("_kafka_offset",)).to_arrow())
    return total


def _wait(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_paused_writer_whose_batch_a_newer_writer_recommitted_is_fenced(tmp_path: Path) -> None:
    """The zombie pauses between its precommit and its table commit (a warm standby took
    over meanwhile and recovery recommitted the zombie's instant). Its retry finds its
    batch in the table -- committed by the newer epoch, not by it: it must stop fenced,
    not report the batch committed."""
    name = f"p{os.getpid()}_{int(time.time() * 1000) % 10**8}"
    cfg = _cfg(tmp_path, {"warehouse": str(tmp_path / "wh")}, name)
    inc = "incarnation-1"
    zombie_sinks = IcebergTables.from_config(cfg)
    racing = _RacingCommitter(zombie_sinks.main.iceberg)
    zombie = Coordinator(cfg.id, CommitTables(racing), timeline=zombie_sinks.timeline(cfg.id))
    zombie.acquire_epoch("zombie")
    zombie.run_batch(inc, 0, None, PartitionOffsets({TP: 100}), _writer(zombie_sinks, 0, 100))
    owner_sinks = IcebergTables.from_config(cfg)
    owner = Coordinator(
        cfg.id, CommitTables(owner_sinks.main), timeline=owner_sinks.timeline(cfg.id)
    )
    start, end = PartitionOffsets({TP: 100}), PartitionOffsets({TP: 250})
    recomputed: list[int] = []

    def take_over() -> None:
        owner.acquire_epoch("owner")
        write = _writer(owner_sinks, 100, 250, lambda: recomputed.append(1))
        assert owner.run_batch(inc, 1, start, end, write).outcome == "recommitted"

    racing.between = take_over
    with pytest.raises(FencedError, match="epoch"):
        zombie.run_batch(inc, 1, start, end, _writer(zombie_sinks, 100, 250))
    assert not recomputed
    assert _offsets_in_table(owner_sinks) == Counter(range(250))
