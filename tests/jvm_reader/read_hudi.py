"""Read Hudi tables with Hudi's own Spark datasource (a JVM engine we do not write with).

Run with the *separate* reader environment's Python (``scripts/jvm-reader-env.sh`` builds it:
PySpark 3.5.7 + ``hudi-spark3.5-bundle_2.12``), never the project's: this script imports
nothing from ``pipeline``. Tables are given by their base path; the metadata table is off (our
writer keeps none).

    python read_hudi.py --hudi-jar J [--jars J1,J2] [--hadoop KEY=VALUE]... [--rows]
        [--commits] BASE_PATH...

Tables on S3 take Hadoop's S3A jars in ``--jars`` and its settings in ``--hadoop`` (an
``s3://`` base path is read through S3A: ``fs.s3.impl``).

One JSON line per table on stdout::

    {"table": BASE_PATH, "rows": 3800, "coords": [[topic, partition, offset], ...],
     "schema": "<Spark's simpleString of the snapshot schema>",
     "rows_json": ["<row as Spark's JSON>", ...],          # --rows: every row, by coordinates
     "commits": [{"instant": "2026...", "action": "commit",        # --commits: the completed
                  "extra": {...},                                   # commits, oldest first, with
                  "incremental": [[topic, partition, offset], ...], # their extra metadata, the
                  "as_of_rows": 1200}, ...]}                        # rows an incremental read of
                                                                    # that commit alone returns and
                                                                    # a time-travel count as of it

Hudi's columns (``_hoodie_*``) are left out of ``rows_json``. A table that cannot be read gives
``{"table": ..., "error": "..."}``; the exit code is then 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from hudi_session import hudi_session  # this directory (the script's own)

COORDS = ("_kafka_topic", "_kafka_partition", "_kafka_offset")


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hudi-jar", required=True, help="hudi-spark3.5-bundle_2.12 jar")
    ap.add_argument("--jars", default="", help="more jars, comma-separated (S3A's)")
    ap.add_argument(
        "--hadoop",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Hadoop setting (e.g. fs.s3a.endpoint=http://...); repeatable",
    )
    ap.add_argument("--rows", action="store_true", help="also print every row as JSON")
    ap.add_argument(
        "--commits",
        action="store_true",
        help="also list the completed commits with their extra metadata, an incremental read "
        "of each and a time-travel count as of each",
    )
    ap.add_argument("tables", nargs="+", help="base paths of Hudi tables")
    return ap.parse_args(argv)


def _session(a: argparse.Namespace) -> Any:
    hadoop = {}
    for setting in a.hadoop:
        key, sep, value = setting.partition("=")
        if not sep:
            raise SystemExit(f"--hadoop {setting!r}: expected KEY=VALUE")
        hadoop[key] = value
    return hudi_session("hudi-jvm-reader", [a.hudi_jar, a.jars], hadoop)


def _reader(spark: Any) -> Any:
    return spark.read.format("hudi").option("hoodie.metadata.enable", "false")


def _coords(df: Any) -> list[list[Any]]:
    return sorted([r[0], r[1], r[2]] for r in df.select(*COORDS).collect())


def _commits(spark: Any, base: str) -> list[dict[str, Any]]:
    """The completed commits through Hudi's own timeline API, each read incrementally alone
    and as of itself."""
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    storage_conf = jvm.org.apache.hudi.storage.hadoop.HadoopStorageConfiguration(conf)
    meta = (
        jvm.org.apache.hudi.common.table.HoodieTableMetaClient.builder()
        .setConf(storage_conf)
        .setBasePath(base)
        .build()
    )
    timeline = meta.getActiveTimeline().getCommitsTimeline().filterCompletedInstants()
    # an incremental query's bounds are completion times on table version 8 and later
    # (Hudi's own writer), requested times before (the native writer's version 6)
    by_completion = meta.getTableConfig().getTableVersion().versionCode() >= 8
    out: list[dict[str, Any]] = []
    previous = "000"
    for instant in timeline.getInstants().toArray():
        time = instant.requestedTime()
        mark = instant.getCompletionTime() if by_completion else time
        # Hudi's own parser: JSON on table version 6 (the native writer), Avro on 9
        extra = timeline.readCommitMetadata(instant).getExtraMetadata()
        incremental = (
            _reader(spark)
            .option("hoodie.datasource.query.type", "incremental")
            .option("hoodie.datasource.read.begin.instanttime", previous)
            .option("hoodie.datasource.read.end.instanttime", mark)
            .load(base)
        )
        as_of = _reader(spark).option("as.of.instant", time).load(base)
        out.append(
            {
                "instant": time,
                "action": instant.getAction(),
                "extra": {str(k): str(v) for k, v in extra.items()},
                "incremental": _coords(incremental),
                "as_of_rows": as_of.count(),
            }
        )
        previous = mark
    return out


def _read(spark: Any, base: str, a: argparse.Namespace) -> dict[str, Any]:
    df = _reader(spark).load(base)
    doc: dict[str, Any] = {"table": base, "schema": df.schema.simpleString()}
    doc["coords"] = _coords(df)
    doc["rows"] = len(doc["coords"])
    if a.rows:
        ours = [c for c in df.columns if not c.startswith("_hoodie_")]
        ordered = df.select(*ours).orderBy(*COORDS)
        doc["rows_json"] = [r[0] for r in ordered.selectExpr("to_json(struct(*))").collect()]
    if a.commits:
        doc["commits"] = _commits(spark, base)
    return doc


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    spark = _session(a)
    failed = False
    for base in a.tables:
        try:
            doc = _read(spark, base, a)
        except Exception as e:  # one table's failure is reported, the others still read
            failed = True
            doc = {"table": base, "error": f"{type(e).__name__}: {str(e)[:8000]}"}
        print(json.dumps(doc), flush=True)
    spark.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
