"""Iceberg compaction and orphan cleanup against a real pyiceberg SQLite catalog.

Files are written with the workers' writer and committed through the adapter, as the
pipeline does; a concurrent ingest commit is a real second writer on its own catalog
connection. Every test compares the rows (all columns, by Kafka coordinates) and the
pipeline's checkpoint before and after.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from integration.formats.iceberg.test_iceberg_adapter import head, make_sink, rows, write_and_commit
from pipeline.commit.checkpoint import PIPELINE_ID_KEY
from pipeline.commit.instant import BatchIdentity
from pipeline.commit.maintenance import COMPACTION_KEY, CompactionPolicy, WriterFence
from pipeline.errors import FencedError
from pipeline.formats.iceberg.catalog import load_catalog
from pipeline.formats.iceberg.catalog_table import IcebergTable
from pipeline.formats.iceberg.compaction import IcebergMaintenance, live_data_files
from pipeline.formats.iceberg.expiry import expirable, expiry_view
from pipeline.formats.iceberg.pipeline_tables import IcebergCommitter

POLICY = CompactionPolicy(target_file_size_bytes=64 * 1024 * 1024, min_input_files=2)
HOUR = 3600.0
ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture
def catalogs(tmp_path: Path) -> Any:
    props = {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": (tmp_path / "warehouse").as_uri(),
    }
    return lambda: load_catalog("maint", props)


def maintenance(sink: IcebergTable) -> IcebergMaintenance:
    return IcebergMaintenance(sink, dict(sink.catalog.properties))


def loaded(sink: IcebergTable) -> Table:
    table = sink.load()
    assert table is not None
    return table


def stored_files(sink: IcebergTable) -> set[Path]:
    root = Path(sink.table_location().removeprefix("file://")) / "data"
    return {p for p in root.rglob("*.parquet")}


def age(paths: set[Path], seconds: float) -> None:
    past = time.time() - seconds
    for p in paths:
        os.utime(p, (past, past))


def ingest(sink: IcebergTable, batches: range, per_batch: int = 30, **kw: Any) -> None:
    for b in batches:
        write_and_commit(sink, b, b * per_batch, per_batch, **kw)


def state(sink: IcebergTable) -> tuple[pa.Table, Any]:
    return rows(loaded(sink)), sink.latest_checkpoint("p1")


def test_compaction_rewrites_small_files_and_changes_nothing_else(catalogs: Any) -> None:
    sink = make_sink(catalogs())
    ingest(sink, range(8))
    before_rows, before_cp = state(sink)
    before_files = len(live_data_files(loaded(sink)))
    partitions = {tuple(f.partition[i] for i in range(2)) for f in live_data_files(loaded(sink))}

    result = maintenance(sink).compact(POLICY)

    table = loaded(sink)
    after = live_data_files(table)
    assert result.rewritten_files == before_files > len(after) == len(partitions)
    assert result.written_files == len(partitions) and result.attempts == 1
    snap = head(table)
    assert snap.summary is not None and snap.summary.operation.value == "replace"
    summary = snap.summary.additional_properties
    assert summary.get(COMPACTION_KEY) == "true" and PIPELINE_ID_KEY not in summary
    assert maintenance(sink).compaction_commits() == [str(snap.snapshot_id)]
    after_rows, after_cp = state(sink)
    assert after_rows.equals(before_rows)
    assert after_cp == before_cp
    assert sink.is_committed("p1", "inc-a", 7)
    # the pipeline goes on: next batch, dedupe, carried-forward history all intact
    ingest(sink, range(8, 9))
    assert sink.is_committed("p1", "inc-a", 7) and sink.is_committed("p1", "inc-a", 8)
    assert rows(loaded(sink)).num_rows == 9 * 30
    again = maintenance(sink).compact(POLICY)
    assert again.commit is not None  # the new batch's small files join the compacted ones
    assert len(live_data_files(loaded(sink))) == len(partitions)
    # nothing left to do: no commit
    assert maintenance(sink).compact(POLICY).commit is None


def test_min_input_files_leaves_a_partition_alone(catalogs: Any) -> None:
    sink = make_sink(catalogs())
    ingest(sink, range(2))
    policy = CompactionPolicy(target_file_size_bytes=64 * 1024 * 1024, min_input_files=3)
    assert maintenance(sink).compact(policy).commit is None


def test_ingest_commit_during_compaction_replans_and_stays_exact(catalogs: Any) -> None:
    sink = make_sink(catalogs())
    ingest(sink, range(6))
    rival = make_sink(catalogs())  # the running pipeline, on its own catalog connection

    class Racing(IcebergMaintenance):
        raced = False

        def _write(self, table: Table, groups: Any) -> Any:
            written = super()._write(table, groups)
            if not self.raced:  # an ingest batch lands between plan and commit
                self.raced = True
                ingest(rival, range(6, 7))
            return written

    result = Racing(sink, dict(sink.catalog.properties)).compact(POLICY)
    assert result.attempts == 2 and result.commit is not None
    table = loaded(sink)
    got = rows(table)
    assert got.num_rows == 7 * 30
    assert sorted(got["_kafka_offset"].to_pylist()) == list(range(7 * 30))
    assert sink.latest_checkpoint("p1").batch_id == 6  # type: ignore[union-attr]


def test_fenced_compaction_commits_nothing_and_leaves_no_files(catalogs: Any) -> None:
    sink = make_sink(catalogs())
    ingest(sink, range(4), epoch=1)
    ingest(sink, range(4, 5), epoch=2)  # a newer writer took over
    before_files = stored_files(sink)
    before_head = head(loaded(sink)).snapshot_id
    with pytest.raises(FencedError, match="epoch 2"):
        maintenance(sink).compact(POLICY, WriterFence("p1", 1))
    assert head(loaded(sink)).snapshot_id == before_head
    assert stored_files(sink) == before_files
    assert maintenance(sink).compact(POLICY, WriterFence("p1", 2)).commit is not None


def test_orphans_removed_after_the_safety_interval_and_nothing_referenced(
    catalogs: Any,
) -> None:
    catalog: Catalog = catalogs()
    sink = make_sink(catalog)
    ingest(sink, range(4))
    referenced_before = stored_files(sink)
    # a killed compaction: outputs written, never committed
    killed = maintenance(sink)
    table = loaded(sink)
    from pipeline.formats.iceberg.compaction import plan_compaction

    groups = plan_compaction(live_data_files(table), table.metadata.default_spec_id, POLICY)
    planted_compaction = {
        Path(f.file_path.removeprefix("file://")) for f in killed._write(table, groups)
    }
    # a killed task attempt / rolled-back batch: staged, never committed
    committer = IcebergCommitter(sink)
    ctx = sink.write_context("zombie-batch")
    from integration.formats.iceberg.test_iceberg_adapter import events_batch
    from pipeline.formats.iceberg.writer import write_data_files

    staged = write_data_files(ctx, [events_batch(10_000, 20)], task_id=0)
    planted_zombie = {Path(committer.describe(b)[0].removeprefix("file://")) for b in staged}
    pending = write_data_files(ctx, [events_batch(20_000, 5)], task_id=1)
    protected = {committer.describe(b)[0] for b in pending}  # a pending instant's file
    before_rows = rows(loaded(sink))
    everything = stored_files(sink)
    assert everything == referenced_before | planted_compaction | planted_zombie | {
        Path(p.removeprefix("file://")) for p in protected
    }

    m = maintenance(sink)
    young = m.remove_orphans(HOUR, protected)
    assert young.removed == () and young.too_young == len(planted_compaction | planted_zombie)
    assert stored_files(sink) == everything

    age(everything, 2 * HOUR)
    dry = m.remove_orphans(HOUR, protected, dry_run=True)
    assert {
        Path(p.removeprefix("file://")) for p in dry.removed
    } == planted_compaction | planted_zombie
    assert stored_files(sink) == everything

    done = m.remove_orphans(HOUR, protected)
    assert {
        Path(p.removeprefix("file://")) for p in done.removed
    } == planted_compaction | planted_zombie
    assert stored_files(sink) == everything - planted_compaction - planted_zombie
    assert rows(loaded(sink)).equals(before_rows)


def test_replaced_files_stay_until_their_snapshots_expire(catalogs: Any) -> None:
    sink = make_sink(catalogs())
    ingest(sink, range(5))
    small = stored_files(sink)
    m = maintenance(sink)
    assert m.compact(POLICY).commit is not None
    age(stored_files(sink), 2 * HOUR)
    # older snapshots still read the small files: time travel keeps working
    assert m.remove_orphans(HOUR).removed == ()
    ingest(sink, range(5, 6))  # the pipeline goes on: its new commit carries the history
    table = loaded(sink)
    old = expirable(table, 2)  # the new batch and the compaction stay
    assert len(old) == 5
    expiry_view(table, set(old)).maintenance.expire_snapshots().by_ids(old).commit()
    before = rows(loaded(sink))
    removed = {Path(p.removeprefix("file://")) for p in m.remove_orphans(HOUR).removed}
    assert removed == small
    assert rows(loaded(sink)).equals(before)
    assert sink.committed_offsets("p1") and IcebergCommitter(sink).is_committed(
        BatchIdentity("p1", "inc-a", 5)
    )


def test_ingest_compact_command(catalogs: Any, tmp_path: Path) -> None:
    sink = make_sink(catalogs())
    ingest(sink, range(3))
    before_rows, before_cp = state(sink)
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "id: p1\n"
        "source: {bootstrapServers: 'localhost:1', topics: [orders]}\n"
        "decode: {format: raw}\n"
        "sink:\n"
        "  table: db.events\n"
        f"  catalog: {{name: maint, uri: 'sqlite:///{tmp_path}/catalog.db',"
        f" warehouse: '{(tmp_path / 'warehouse').as_uri()}'}}\n"
        f"checkpointLocation: {tmp_path / 'checkpoint'}\n"
    )

    def ingest_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pipeline", *args, "--config", str(config)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=120,
        )

    files = len(live_data_files(loaded(sink)))
    r = ingest_cli("compact", "--min-input-files", "2")
    assert r.returncode == 0, r.stderr
    after = len(live_data_files(loaded(sink)))
    assert f"table db.events: compacted {files} files into {after}" in r.stdout
    assert f"live data files {files} -> {after}" in r.stdout
    assert "table db.events_dead_letter: nothing to compact" in r.stdout
    assert state(sink)[0].equals(before_rows) and state(sink)[1] == before_cp

    r = ingest_cli("compact", "--orphans", "--older-than", "1 min")
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "below commit.catalogRetrySeconds" in r.stderr

    stored = stored_files(sink)
    age(stored, 2 * HOUR)
    r = ingest_cli("compact", "--orphans", "--dry-run")
    assert r.returncode == 0, r.stderr
    # the replaced files are still referenced by the snapshots before the compaction
    assert "table db.events: would remove 0 orphan files (0.0 MiB); kept 0 younger" in r.stdout
    assert stored_files(sink) == stored


def test_background_compaction_while_ingesting_stays_exact(
    spark: Any, kafka_broker: Any, tmp_path: Path
) -> None:
    from support.drivers import coords, iceberg_config, produced

    from lab.generator import GeneratorSpec, produce
    from pipeline.app import Pipeline
    from pipeline.config import parse_config
    from pipeline.ops.verify import verify_pipeline

    topic = kafka_broker.new_topic("compact", 2)
    r = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=3000, seed=21))
    base = iceberg_config(tmp_path, kafka_broker.bootstrap_servers, topic, maxRecordsPerTrigger=150)
    cfg = parse_config(
        {
            **base.model_dump(by_alias=True, exclude_none=True),
            "trigger": {"mode": "processing-time", "interval": "200 ms"},
            "maintenance": {
                "compaction": {"enabled": True, "interval": "1 s", "minInputFiles": 3},
                "fileStatsInterval": "1 s",
            },
        }
    )
    p = Pipeline(cfg, spark)
    metrics = p.attach_metrics(serve=False)
    try:
        p.run(until=lambda s: s.batches >= 20, timeout_s=120)
    finally:
        metrics.stop()
    assert coords(p) == produced(r)
    table = p.tables.main.table()
    assert table is not None
    replaces = [
        s
        for s in table.snapshots()
        if s.summary is not None and s.summary.operation.value == "replace"
    ]
    assert replaces, "no compaction committed while ingesting"
    assert all(PIPELINE_ID_KEY not in s.summary.additional_properties for s in replaces)  # type: ignore[union-attr]
    text = metrics.exposition().decode()
    assert f'ingest_compactions_total{{table="table {cfg.sink.table}"}} {len(replaces)}.0' in text
    assert f'ingest_table_data_files{{table="table {cfg.sink.table}"}}' in text
    live = len(live_data_files(table))
    assert live < 20  # one or more files per batch without compaction
    # the independent verifier: every record once, payloads equal Kafka's
    (report,) = verify_pipeline(cfg)
    assert report.ok, report
    assert f"{len(replaces)} compaction commit(s)" in " ".join(report.notes)


def test_orphan_cleanup_keeps_a_pending_instants_files(
    spark: Any, kafka_broker: Any, tmp_path: Path
) -> None:
    """A batch pre-committed and then cut off (INFLIGHT in the journal): cleanup with no
    safety interval at all removes every other unreferenced file but not the batch's, and
    the next run recommits it: exactly once."""
    from support.drivers import coords, iceberg_config, produced

    from lab.generator import GeneratorSpec, produce
    from pipeline.app import Pipeline
    from pipeline.commit.instant import InstantState
    from pipeline.maintenance_scheduler import Maintenance

    topic = kafka_broker.new_topic("orphans", 2)
    r = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=900, seed=22))
    cfg = iceberg_config(tmp_path, kafka_broker.bootstrap_servers, topic, maxRecordsPerTrigger=300)
    faulty = cfg.model_copy(
        update={"commit": cfg.commit.model_copy(update={"faults": "after-precommit:raise@1"})}
    )
    with pytest.raises(Exception) as failed:
        Pipeline(faulty, spark).run(timeout_s=120)
    assert "fault injected at after-precommit" in str(failed.value)
    p = Pipeline(cfg, spark)
    assert p.timeline is not None
    (pending,) = p.timeline.pending()
    assert pending.state is InstantState.INFLIGHT and pending.inflight is not None
    staged = {f.path for f in pending.inflight.files}
    sink = p.tables.main.iceberg  # type: ignore[attr-defined]
    planted = Path(sink.table_location().removeprefix("file://")) / "data" / "planted.parquet"
    planted.write_bytes(b"PAR1")  # a killed task attempt's file
    age(stored_files(sink), 2 * HOUR)

    results = Maintenance(cfg, p.tables).remove_orphans(older_than_s=0)
    removed = {path for res in results for path in res.removed}
    assert {Path(x.removeprefix("file://")) for x in removed} == {planted}
    assert all(Path(x.removeprefix("file://")).exists() for x in staged)
    p.run(timeout_s=120)  # recovery recommits the pre-committed batch, then drains
    assert coords(p) == produced(r)
