"""Spark's own Iceberg runtime (a JVM engine we never write with) reads our Iceberg tables.

The Iceberg tables the pipeline writes through pyiceberg must read the same in Spark's
Iceberg (``iceberg-spark-runtime-3.5``, which needs PySpark 3.5: it runs in its own virtual
environment that ``scripts/jvm-reader-env.sh`` builds on first use). The pipeline runs as
driver processes on a SQLite SQL catalog, SIGKILLed after pre-committing a batch and
restarted (the restart fences, recommits that batch and drains), with malformed records for
the dead-letter table and manifests merged every other commit; ``ingest compact`` rewrites
the small files beside the pending instant and again at the end (``replace`` snapshots: no
rows added, skipped by incremental reads, no checkpoint keys). Then
``tests/jvm_reader/read_iceberg.py`` reads both tables through Iceberg's ``JdbcCatalog``
over the same SQLite file, and its answers are checked against pyiceberg's and the Parquet
files: the (topic, partition, offset) multiset; every snapshot with its summary (our
checkpoint), parent and time; the history; time travel to and incremental reads of every
snapshot; the data files with their partition values and column metrics; filtered counts
(file pruning); and, over both tables, that each batch's appended rows are exactly the
offset ranges its summary records.
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from support.drivers import (
    ROOT,
    Coord,
    iceberg_coords,
    pipeline_config,
    produced,
    run_cli,
    run_driver_killed,
    run_driver_ok,
    write_config,
)
from support.jvm_readers import reader_process_env
from support.kafka_fixtures import KafkaTestBroker

from lab.generator import GeneratorSpec, produce
from pipeline.app import Pipeline
from pipeline.commit.checkpoint import PIPELINE_ID_KEY
from pipeline.commit.maintenance import COMPACTION_KEY
from pipeline.config import load_config

READER = ROOT / "tests" / "jvm_reader" / "read_iceberg.py"
CATALOG = "lake"  # pyiceberg's catalog name = the Spark catalog's: JdbcCatalog keys rows by it
_MID = datetime(2024, 6, 1, 0, 0, 20, tzinfo=UTC)  # the generator's events span 2024-06-01 00:00
# Filters Iceberg answers by pruning files on partition values and column bounds: SQL for Spark,
# the same test in Python over pyiceberg's rows; each runs on the tables with its columns.
WHERE: dict[str, tuple[set[str], Callable[[dict[str, Any]], bool]]] = {
    "_kafka_partition = 1 AND _kafka_offset >= 150": (
        {"_kafka_partition", "_kafka_offset"},
        lambda r: r["_kafka_partition"] == 1 and r["_kafka_offset"] >= 150,
    ),
    "_kafka_offset < 100": ({"_kafka_offset"}, lambda r: r["_kafka_offset"] < 100),
    f"ts >= TIMESTAMP '{_MID:%Y-%m-%d %H:%M:%S}'": ({"ts"}, lambda r: r["ts"] >= _MID),
    "event_type = 'purchase'": ({"event_type"}, lambda r: r["event_type"] == "purchase"),
    "amount IS NULL": ({"amount"}, lambda r: r["amount"] is None),
    "session_id < '8'": ({"session_id"}, lambda r: r["session_id"] < "8"),  # truncated bounds
    "error IS NOT NULL": ({"error"}, lambda r: r["error"] is not None),
}


def _run_reader(env: dict[str, str], warehouse: Path, *args: str) -> Any:
    """``read_iceberg.py`` in the reader environment on the SQLite catalog of ``warehouse``."""
    return subprocess.run(
        [
            env["python"],
            str(READER),
            "--iceberg-jar",
            env["iceberg_jar"],
            "--jdbc-jar",
            env["sqlite_jdbc_jar"],
            "--catalog-db",
            str(warehouse / "catalog.db"),
            "--warehouse",
            warehouse.as_uri(),
            "--catalog-name",
            CATALOG,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=reader_process_env(),
    )


def _read_with_spark(env: dict[str, str], warehouse: Path, *tables: str) -> dict[str, Any]:
    """``read_iceberg.py --details --where …`` on ``tables``: its JSON line per table, by
    name."""
    details = ["--details", *(x for pred in WHERE for x in ("--where", pred))]
    r = _run_reader(env, warehouse, *details, *tables)
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            doc = json.loads(line)
            out[doc["table"]] = doc
    errors = {t: d["error"] for t, d in out.items() if "error" in d}
    assert r.returncode == 0 and not errors and set(out) == set(tables), errors or r.stderr[-3000:]
    return out


def _pyiceberg_view(table: Any) -> dict[str, Any]:
    """What pyiceberg reads of ``table``: snapshots, rows now and per snapshot, data files."""
    snapshots = {
        s.snapshot_id: {
            "parent_id": s.parent_snapshot_id,
            "committed_at_ms": s.timestamp_ms,
            "operation": s.summary.operation.value if s.summary else None,
            "summary": dict(s.summary.additional_properties) if s.summary else {},
        }
        for s in table.snapshots()
    }
    rows_at = {sid: len(table.scan(snapshot_id=sid).to_arrow()) for sid in snapshots}
    spec = table.spec()
    files = {
        t.file.file_path: {
            f.name: _partition_value(str(f.transform), t.file.partition[i])
            for i, f in enumerate(spec.fields)
        }
        for t in table.scan().plan_files()
    }
    current = table.current_snapshot()
    return {
        "manifests": len(current.manifests(table.io)) if current else 0,
        "rows": table.scan().to_arrow().to_pylist(),
        "snapshots": snapshots,
        "history": [e.snapshot_id for e in table.history()],
        "rows_at": rows_at,
        "files": files,  # path -> partition values as Spark prints them
        "current": current.snapshot_id if current else None,
    }


def _partition_value(transform: str, value: Any) -> Any:
    """A partition value as Spark's ``.files`` table shows it (``day``: the date)."""
    if transform == "day" and value is not None:
        return str(date(1970, 1, 1) + timedelta(days=value))
    return value


def _check_snapshots(name: str, doc: dict[str, Any], py: dict[str, Any]) -> None:
    """Every pyiceberg snapshot, with its summary (our checkpoint), history, time travel."""
    spark_snaps = {s["snapshot_id"]: s for s in doc["snapshots"]}
    assert len(py["snapshots"]) >= 3, f"{name}: too few snapshots to test history"
    assert set(spark_snaps) == set(py["snapshots"]), name
    for sid, mine in py["snapshots"].items():
        theirs = spark_snaps[sid]
        summary = {k: v for k, v in theirs["summary"].items() if k != "operation"}
        assert summary == mine["summary"], (name, sid)
        assert theirs["operation"] == mine["operation"], (name, sid)
        assert theirs["parent_id"] == mine["parent_id"], (name, sid)
        assert theirs["committed_at_ms"] == mine["committed_at_ms"], (name, sid)
        if COMPACTION_KEY in summary:  # a rewrite: no checkpoint of its own
            assert mine["operation"] == "replace" and PIPELINE_ID_KEY not in summary
            continue
        json.loads(summary["ingest.committed-offsets"])  # the checkpoint reads back
    assert [h["snapshot_id"] for h in doc["history"]] == py["history"], name
    assert doc["current_snapshot_id"] == py["current"], name
    # time travel: every snapshot, the older ones included, holds pyiceberg's rows there
    rows_as_of = {int(k): v for k, v in doc["rows_as_of"].items()}
    assert rows_as_of == py["rows_at"], name
    assert len(set(rows_as_of.values())) >= 2, f"{name}: no older snapshot with fewer rows"
    # incremental reads: what each snapshot added (manifest entries ADDED by it); a
    # compaction (operation replace) adds no rows, and incremental readers skip it
    for sid, mine in py["snapshots"].items():
        added = sum(n for _, _, n in doc["appended"][str(sid)].values())
        before = py["rows_at"][mine["parent_id"]] if mine["parent_id"] else 0
        assert added == py["rows_at"][sid] - before, (name, sid)
        if mine["operation"] == "replace":
            assert added == 0, (name, sid)
            summary = mine["summary"]
            assert summary["added-records"] == summary["deleted-records"], (name, sid)
            continue
        assert added == int(mine["summary"].get("added-records", 0)), (name, sid)


def _utc(v: Any) -> Any:
    """A timestamp as the reader prints it: naive UTC ``str``; other values unchanged."""
    if isinstance(v, datetime):
        return str(v.astimezone(UTC).replace(tzinfo=None) if v.tzinfo else v)
    return v


def _check_files(name: str, doc: dict[str, Any], py: dict[str, Any]) -> None:
    """The same data files with the same partition values; the column metrics Spark decodes
    from our manifests (value and null counts, lower/upper bounds of numbers and timestamps)
    are those of the Parquet file itself."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    assert doc["files"] == doc["data_files"] == len(py["files"]), name
    assert doc["manifests"] == py["manifests"], name
    assert doc["file_paths"] == sorted(py["files"]), name
    assert doc["file_records"] == doc["rows"], name
    for f in doc["file_details"]:
        path = f["file_path"]
        assert f["partition"] == py["files"][path], (name, path)
        data = pq.read_table(path.removeprefix("file://"))
        assert f["record_count"] == data.num_rows, (name, path)
        for col, m in f["metrics"].items():
            if col not in data.column_names:  # a nested leaf (dead letters' headers)
                continue
            where = (name, path, col)
            arr = data[col]
            assert m["value_count"] == data.num_rows, (where, m)
            assert m["null_value_count"] == arr.null_count, (where, m)
            t = arr.type
            if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_timestamp(t):
                lo, hi = (_utc(x.as_py()) for x in pc.min_max(arr).values())
                assert (m["lower_bound"], m["upper_bound"]) == (lo, hi), (where, m)


def _check_filters(name: str, doc: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """Filtered counts (file pruning by partition values and column bounds) are exact."""
    columns = set(rows[0]) if rows else set()
    for pred, (needs, test) in WHERE.items():
        got = doc["where"][pred]
        if needs <= columns:
            assert got == sum(1 for r in rows if test(r)), (name, pred, got)
        else:
            assert isinstance(got, str) and got.startswith("error:"), (name, pred, got)


def _check_same(name: str, doc: dict[str, Any], table: Any, want: Counter[Coord]) -> None:
    """Spark's answers about table ``name`` equal pyiceberg's (``want``: its coordinates)."""
    py = _pyiceberg_view(table)
    got = Counter(tuple(c) for c in doc["coords"])
    assert got == want, f"{name}: Spark read {sum(got.values())} rows, pyiceberg {len(want)}"
    assert doc["duplicate_coords"] == 0 and doc["rows"] == sum(want.values())
    _check_snapshots(name, doc, py)
    _check_files(name, doc, py)
    _check_filters(name, doc, py["rows"])


def _check_batches(*docs: dict[str, Any]) -> None:
    """A reader of the tables alone can tell what was ingested (docs/design.md invariant 2):
    the rows Spark's incremental reads find appended by one batch's snapshots, over the main
    and the dead-letter table together, are exactly the offset ranges its summary records."""
    batches: dict[tuple[str, str], dict[str, list[int]]] = {}  # (incarnation, batch) -> rows
    ranges: dict[tuple[str, str], str] = {}
    for doc in docs:
        for snap in doc["snapshots"]:
            summary = snap["summary"]
            if "ingest.fence" in summary or COMPACTION_KEY in summary:
                assert not doc["appended"][str(snap["snapshot_id"])], snap
                continue
            key = (summary["ingest.incarnation"], summary["ingest.batch-id"])
            assert ranges.setdefault(key, summary["ingest.ranges"]) == summary["ingest.ranges"]
            for tp, (lo, hi, n) in doc["appended"][str(snap["snapshot_id"])].items():
                seen = batches.setdefault(key, {}).setdefault(tp, [lo, hi, 0])
                seen[:] = [min(seen[0], lo), max(seen[1], hi), seen[2] + n]
    assert ranges, "no batch snapshots"
    for key, text in ranges.items():
        want = {
            f"{t}:{p}": (a, b)
            for t, parts in json.loads(text).items()
            for p, (a, b) in parts.items()
        }
        got = batches.get(key, {})
        assert set(got) <= set(want), (key, got, want)
        for tp, (a, b) in want.items():
            lo, hi, n = got.get(tp, [a, b - 1, 0])
            assert (n, lo >= a, hi < b) == (b - a, True, True), (key, tp, got.get(tp), (a, b))


@pytest.mark.slow
@pytest.mark.timeout(600)  # ≈ 45-80 s with the reader environment built; building it: ≈ 30 s
def test_spark_iceberg_reads_what_pyiceberg_reads(
    jvm_reader: dict[str, str], kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_broker.new_topic("jvm-ice", 3)
    warehouse = tmp_path / "warehouse"
    sink = {
        "catalog": {"name": CATALOG, "warehouse": str(warehouse)},
        "table": "db.events",
        "partitionBy": ["day(ts)"],
        # merge manifests as soon as there are two: Spark reads merged manifests too
        "tableProperties": {"commit.manifest.min-count-to-merge": "2"},
    }
    source = {"maxRecordsPerTrigger": 400}
    config = write_config(
        tmp_path,
        pipeline_config(
            tmp_path, bootstrap, topic, sink, source=source, spark={"master": "local[2]"}
        ),
    )
    bad = 0.05  # malformed: dead-letter rows
    results = [
        produce(bootstrap, topic, GeneratorSpec(count=900, malformed_fraction=bad, seed=161))
    ]
    # batch 0 committed; batch 1 pre-committed (its files staged), then SIGKILL
    run_driver_killed(config, "after-precommit:kill@1")
    # compaction beside the pending instant: batch 0's files only (batch 1's are staged)
    compacted = run_cli("compact", "--config", str(config), "--min-input-files", "2")
    assert compacted.returncode == 0, compacted.stderr
    assert "table db.events: compacted" in compacted.stdout, compacted.stdout
    results.append(
        produce(bootstrap, topic, GeneratorSpec(count=500, malformed_fraction=bad, seed=162))
    )
    run_driver_ok(config)  # fences, recommits batch 1 without recomputing it, then drains
    # and once more over everything: Spark reads a history with two rewrites
    compacted = run_cli("compact", "--config", str(config), "--min-input-files", "2")
    assert "table db.events: compacted" in compacted.stdout, compacted.stdout

    cfg = load_config(config)
    p = Pipeline(cfg)
    main: Any = p.tables.main  # IcebergCommitter (``.table()``: the pyiceberg table)
    dead: Any = p.tables.dead_letter
    assert dead is not None
    assert iceberg_coords(main, dead) == produced(*results)  # exactly once (pyiceberg)
    main_table, dead_table = main.table(), dead.table()
    assert main_table is not None and dead_table is not None

    names = (cfg.sink.table, cfg.sink.dead_letter_identifier)
    catalog_db = (warehouse / "catalog.db").read_bytes()
    docs = _read_with_spark(jvm_reader, warehouse, *names)
    assert (warehouse / "catalog.db").read_bytes() == catalog_db  # a reader: nothing migrated
    _check_same(names[0], docs[names[0]], main_table, iceberg_coords(main))
    _check_same(names[1], docs[names[1]], dead_table, iceberg_coords(dead))
    _check_batches(docs[names[0]], docs[names[1]])


def _rows_with_spark(env: dict[str, str], warehouse: Path, table: str) -> list[dict[str, Any]]:
    """Every row of ``table`` as Spark's Iceberg reads it (``read_iceberg.py --rows``)."""
    r = _run_reader(env, warehouse, "--as-of", "none", "--rows", table)
    docs = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert r.returncode == 0 and len(docs) == 1 and "error" not in docs[0], r.stderr[-3000:]
    return [json.loads(row) for row in docs[0]["rows_json"]]


@pytest.mark.slow
def test_spark_iceberg_reads_an_evolved_nested_table_as_pyiceberg_does(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path, jvm_reader: dict[str, str]
) -> None:
    """Three schemas on one table (a nested column and a map added, int → long and float →
    double widened, a column renamed): Spark's Iceberg reads every row, old ones with nulls
    for the columns added later and the renamed column under its new name, as pyiceberg."""
    from integration.decode.test_schema_evolution import canonical_row, evolve_in_three_restarts

    topic = kafka_broker.new_topic("jvm-evolved", 2)
    bootstrap = kafka_broker.bootstrap_servers
    pipeline = evolve_in_three_restarts(spark, bootstrap, topic, tmp_path, "iceberg")
    table = pipeline.tables.main.table()
    assert table is not None and len(table.schemas()) == 3
    ours = sorted(canonical_row(r, "title") for r in table.scan().to_arrow().to_pylist())
    rows = _rows_with_spark(jvm_reader, tmp_path / "warehouse", "db.events")
    theirs = sorted(canonical_row(r, "title") for r in rows)
    assert len(ours) == 180 and theirs == ours
    assert sum(r[7] is None for r in ours) == 60  # device.model: null before phase 2
    assert sum(r[4] is None for r in ours) == 0  # the renamed column kept its old values
