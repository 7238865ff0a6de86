"""Read Iceberg tables with Spark's own Iceberg runtime (a JVM engine we do not write with).

Run with the *separate* reader environment's Python (``scripts/jvm-reader-env.sh`` builds it:
PySpark 3.5.7 + ``iceberg-spark-runtime-3.5_2.12``), never the project's: this script imports
nothing from ``pipeline``. The tables are found through Iceberg's ``JdbcCatalog`` over the same
SQLite database pyiceberg's ``SqlCatalog`` keeps (tables ``iceberg_tables`` and
``iceberg_namespace_properties``, rows keyed by ``catalog_name``: the Spark catalog gets the
pyiceberg catalog's name so JdbcCatalog finds them).

    python read_iceberg.py --iceberg-jar J --jdbc-jar S --catalog-db /w/catalog.db \\
        --warehouse file:///w --catalog-name lake [--details] [--where PREDICATE]... \\
        db.events db.events_dead_letter

One JSON line per table on stdout::

    {"table": "db.events", "rows": 3800, "distinct_coords": 3800, "duplicate_coords": 0,
     "partitions": {"topic:0": [first, last, count], ...},
     "coords_sha256": "...", "coords": [[topic, partition, offset], ...],    # --details
     "snapshots": [{"snapshot_id": .., "parent_id": .., "committed_at_ms": .., "operation": ..,
                    "summary": {...}}, ...],                                # oldest first
     "history": [{"snapshot_id": .., "parent_id": .., "made_current_at_ms": ..,
                  "is_current_ancestor": ..}, ...],
     "current_snapshot_id": ..,
     "rows_as_of": {"<snapshot id>": rows, ...},     # time travel: VERSION AS OF each snapshot
     "appended": {"<snapshot id>": {"topic:0": [first, last, count], ...}, ...},  # incremental
     "manifests": 1,                                 # of the current snapshot
     "files": 7, "data_files": 7, "delete_files": 0, "file_records": 3800,
     "file_paths": [...], "file_details": [{"file_path": .., "record_count": ..,  # --details
        "partition": {"ts_day": "2024-06-01"}, "metrics": {column: {"lower_bound": ..,
        "upper_bound": .., "null_value_count": .., "value_count": .., ...}}}, ...],
     "where": {"<predicate>": rows, ...},                                    # --where
     "rows_json": ["<row as Spark's JSON>", ...]}        # --rows: every row, by coordinates

Timestamps are printed in UTC (``YYYY-MM-DD HH:MM:SS[.ffffff]``). Counts are of rows actually
read from the data files (Iceberg's aggregate push-down, which answers ``count(*)`` from
manifest statistics, is turned off). A table that cannot be read gives ``{"table": ...,
"error": "..."}``; the exit code is then 1.
"""

from __future__ import annotations

import argparse
import calendar
import hashlib
import json
import os
import sys
import time
from typing import Any

COORD_COLUMNS = ("_kafka_topic", "_kafka_partition", "_kafka_offset")


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iceberg-jar", required=True, help="iceberg-spark-runtime-3.5_2.12 jar")
    ap.add_argument("--jdbc-jar", required=True, help="SQLite JDBC driver jar")
    ap.add_argument("--catalog-db", required=True, help="the SQLite file of the SQL catalog")
    ap.add_argument("--warehouse", required=True, help="the catalog's warehouse (URI or path)")
    ap.add_argument("--catalog-name", default="lake", help="pyiceberg's catalog name")
    ap.add_argument(
        "--as-of",
        default="all",
        help="snapshots to time-travel to: 'all' (default), 'none' or comma-separated ids",
    )
    ap.add_argument(
        "--details",
        action="store_true",
        help="also print every coordinate, and every file with its partition and metrics",
    )
    ap.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="PREDICATE",
        help="also count the rows matching this SQL predicate (Iceberg prunes files by their "
        "partition values and column bounds); repeatable, tried on every table",
    )
    ap.add_argument(
        "--rows",
        action="store_true",
        help="also print every row (Spark's to_json, nested values included), ordered by "
        "(topic, partition, offset)",
    )
    ap.add_argument("tables", nargs="+", help="table identifiers, e.g. db.events")
    return ap.parse_args(argv)


def _session(a: argparse.Namespace) -> Any:
    from pyspark.sql import SparkSession

    warehouse = a.warehouse if "://" in a.warehouse else "file://" + os.path.abspath(a.warehouse)
    cat = f"spark.sql.catalog.{a.catalog_name}"
    builder = (
        SparkSession.builder.master("local[1]")
        .appName("iceberg-jvm-reader")
        .config("spark.jars", f"{a.iceberg_jar},{a.jdbc_jar}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # a short-lived JVM: the quick JIT tier only (≈ 1.8x faster here), serial GC
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.memory", "512m")
        .config("spark.sql.session.timeZone", "UTC")
        # count rows from the data files, not from manifest statistics
        .config("spark.sql.iceberg.aggregate-push-down.enabled", "false")
        .config(cat, "org.apache.iceberg.spark.SparkCatalog")
        .config(f"{cat}.catalog-impl", "org.apache.iceberg.jdbc.JdbcCatalog")
        .config(f"{cat}.uri", f"jdbc:sqlite:{os.path.abspath(a.catalog_db)}")
        .config(f"{cat}.warehouse", warehouse)
        # pyiceberg creates the catalog tables with the V1 schema (iceberg_type column);
        # a reader must not create or migrate anything
        .config(f"{cat}.jdbc.schema-version", "V1")
        .config(f"{cat}.jdbc.init-catalog-tables", "false")
        # no cached table: every query sees the catalog's current metadata
        .config(f"{cat}.cache-enabled", "false")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _ident(catalog: str, table: str) -> str:
    return ".".join(f"`{p}`" for p in [catalog, *table.split(".")])


def _ms(ts: Any) -> int | None:
    """Epoch milliseconds of a naive UTC datetime, exactly (no float rounding)."""
    if ts is None:
        return None
    return calendar.timegm(ts.timetuple()) * 1000 + ts.microsecond // 1000


def _coords(spark: Any, ident: str, details: bool) -> dict[str, Any]:
    t, p, o = COORD_COLUMNS
    per_partition = spark.sql(
        f"SELECT {t} AS t, {p} AS p, min({o}) AS lo, max({o}) AS hi, count(*) AS n, "
        f"count(DISTINCT {o}) AS d FROM {ident} GROUP BY {t}, {p}"
    ).collect()
    rows = sum(r["n"] for r in per_partition)
    distinct = sum(r["d"] for r in per_partition)
    out: dict[str, Any] = {
        "rows": rows,
        "distinct_coords": distinct,
        "duplicate_coords": rows - distinct,
        "partitions": {
            f"{r['t']}:{r['p']}": [r["lo"], r["hi"], r["n"]]
            for r in sorted(per_partition, key=lambda r: (str(r["t"]), r["p"]))
        },
    }
    if details:
        coords = sorted(
            (r[0], r[1], r[2]) for r in spark.sql(f"SELECT {t}, {p}, {o} FROM {ident}").collect()
        )
        text = "\n".join(f"{a}\t{b}\t{c}" for a, b, c in coords)
        out["coords_sha256"] = hashlib.sha256(text.encode()).hexdigest()
        out["coords"] = [list(c) for c in coords]
    return out


def _snapshots(spark: Any, ident: str) -> dict[str, Any]:
    snaps = spark.sql(
        f"SELECT snapshot_id, parent_id, committed_at, operation, summary FROM {ident}.snapshots "
        "ORDER BY committed_at, snapshot_id"
    ).collect()
    history = spark.sql(
        f"SELECT made_current_at, snapshot_id, parent_id, is_current_ancestor "
        f"FROM {ident}.history ORDER BY made_current_at"
    ).collect()
    current = [h["snapshot_id"] for h in history if h["is_current_ancestor"]]
    return {
        "snapshots": [
            {
                "snapshot_id": s["snapshot_id"],
                "parent_id": s["parent_id"],
                "committed_at_ms": _ms(s["committed_at"]),
                "operation": s["operation"],
                "summary": dict(s["summary"] or {}),
            }
            for s in snaps
        ],
        "history": [
            {
                "snapshot_id": h["snapshot_id"],
                "parent_id": h["parent_id"],
                "made_current_at_ms": _ms(h["made_current_at"]),
                "is_current_ancestor": h["is_current_ancestor"],
            }
            for h in history
        ],
        "current_snapshot_id": current[-1] if current else None,
    }


def _as_of(spark: Any, ident: str, ids: list[int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for sid in ids:
        row = spark.sql(f"SELECT count(*) AS n FROM {ident} VERSION AS OF {sid}").first()
        out[str(sid)] = row["n"]
    return out


def _per_partition(df: Any) -> dict[str, list[Any]]:
    """``{"topic:partition": [first offset, last offset, rows]}`` of a DataFrame's rows."""
    from pyspark.sql import functions as F

    t, p, o = COORD_COLUMNS
    rows = (
        df.groupBy(t, p)
        .agg(F.min(o).alias("lo"), F.max(o).alias("hi"), F.count("*").alias("n"))
        .collect()
    )
    return {f"{r[t]}:{r[p]}": [r["lo"], r["hi"], r["n"]] for r in rows}


def _appends(
    spark: Any, catalog: str, table: str, snapshots: list[dict[str, Any]], ids: list[int]
) -> dict[str, Any]:
    """Rows each snapshot added, by Iceberg's incremental append scan (``start-snapshot-id``
    = its parent, exclusive, to ``end-snapshot-id``): it picks the manifest entries ADDED by
    snapshots in that range. A snapshot without a parent: everything it holds."""
    parents = {s["snapshot_id"]: s["parent_id"] for s in snapshots}
    out: dict[str, Any] = {}
    name = f"{catalog}.{table}"
    for sid in ids:
        parent = parents.get(sid)
        reader = spark.read.format("iceberg")
        if parent is None:
            df = reader.option("snapshot-id", str(sid)).load(name)
        else:
            df = (
                reader.option("start-snapshot-id", str(parent))
                .option("end-snapshot-id", str(sid))
                .load(name)
            )
        out[str(sid)] = _per_partition(df)
    return out


def _files(spark: Any, ident: str, details: bool) -> dict[str, Any]:
    have = set(spark.table(f"{ident}.files").columns)  # no partition column: unpartitioned
    cols = ["file_path", "content", "record_count"]
    if details:
        cols += [c for c in ("partition", "readable_metrics") if c in have]
    files = spark.sql(f"SELECT {', '.join(cols)} FROM {ident}.files ORDER BY file_path").collect()
    data = [f for f in files if f["content"] == 0]
    out: dict[str, Any] = {
        "files": len(files),
        "data_files": len(data),
        "delete_files": len(files) - len(data),
        "file_records": sum(f["record_count"] for f in data),
    }
    if details:
        out["file_paths"] = [f["file_path"] for f in files]
        out["file_details"] = [
            {
                "file_path": f["file_path"],
                "record_count": f["record_count"],
                "partition": _struct(f, "partition"),
                "metrics": _struct(f, "readable_metrics"),
            }
            for f in files
        ]
    return out


def _struct(row: Any, field: str) -> dict[str, Any]:
    value = row.asDict().get(field)  # a Row has no .get
    return value.asDict(recursive=True) if value is not None else {}


def _where(spark: Any, ident: str, predicates: list[str]) -> dict[str, Any]:
    """Rows matching each predicate; a predicate this table cannot take (a column it does
    not have) gives ``"error: ..."``."""
    out: dict[str, Any] = {}
    for pred in predicates:
        try:
            out[pred] = spark.sql(f"SELECT count(*) AS n FROM {ident} WHERE {pred}").first()["n"]
        except Exception as exc:
            out[pred] = f"error: {_error_line(exc)}"
    return out


def read_table(spark: Any, a: argparse.Namespace, table: str) -> dict[str, Any]:
    ident = _ident(a.catalog_name, table)
    out: dict[str, Any] = {"table": table}
    out["columns"] = [f.name for f in spark.table(ident).schema.fields]
    out.update(_coords(spark, ident, a.details))
    out.update(_snapshots(spark, ident))
    if a.as_of == "all":
        ids = [s["snapshot_id"] for s in out["snapshots"]]
    elif a.as_of == "none":
        ids = []
    else:
        ids = [int(x) for x in a.as_of.split(",") if x.strip()]
    out["rows_as_of"] = _as_of(spark, ident, ids)
    out["appended"] = _appends(spark, a.catalog_name, table, out["snapshots"], ids)
    out["manifests"] = spark.sql(f"SELECT count(*) AS n FROM {ident}.manifests").first()["n"]
    out.update(_files(spark, ident, a.details))
    out["where"] = _where(spark, ident, a.where)
    if a.rows:
        ordered = spark.table(ident).orderBy(*COORD_COLUMNS)
        out["rows_json"] = ordered.toJSON().collect()
    return out


def _error_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:1000]


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    # timestamps come back from the JVM as naive datetimes in the process's zone: make it UTC
    os.environ["TZ"] = "UTC"
    time.tzset()
    spark = _session(a)
    ok = True
    try:
        for table in a.tables:
            try:
                result = read_table(spark, a, table)
            except Exception as exc:  # one line per table; the others are still read
                ok = False
                result = {"table": table, "error": _error_line(exc)}
            print(json.dumps(result, sort_keys=True, default=str), flush=True)
    finally:
        spark.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
