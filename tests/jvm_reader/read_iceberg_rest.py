"""Read Iceberg tables through an Iceberg REST catalog with Spark's own Iceberg runtime.

Run with a Spark line's own Python (``scripts/spark-line-env.sh VERSION``: PySpark 3.5.7 or
4.1.1), never the project's: this script imports nothing from ``pipeline``. The catalog is
Iceberg's ``RESTCatalog`` (``type=rest``) with OAuth2 client credentials; the files are read
with ``S3FileIO`` and static keys (``--jars`` holds the runtime and ``iceberg-aws-bundle``).

    python read_iceberg_rest.py --jars R,B --uri http://127.0.0.1:P --credential id:secret \\
        --oauth2-server-uri http://127.0.0.1:P/v1/oauth/tokens --warehouse s3://b/warehouse \\
        --s3-endpoint http://127.0.0.1:S --s3-access-key-id K --s3-secret-access-key S \\
        --s3-region us-east-1 db.events

One JSON line per table on stdout: ``{"table": .., "spark": "3.5.7", "rows": N,
"ids": [..], "snapshots": N}``, or ``{"table": .., "error": ".."}`` (exit code 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

CATALOG = "rest"


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jars", required=True, help="comma-separated jars for spark.jars")
    ap.add_argument("--uri", required=True)
    ap.add_argument("--credential", required=True, help="client_id:client_secret")
    ap.add_argument("--oauth2-server-uri", required=True)
    ap.add_argument("--warehouse", required=True)
    ap.add_argument("--s3-endpoint", required=True)
    ap.add_argument("--s3-access-key-id", required=True)
    ap.add_argument("--s3-secret-access-key", required=True)
    ap.add_argument("--s3-region", required=True)
    ap.add_argument("tables", nargs="+")
    return ap.parse_args(argv)


def _session(a: argparse.Namespace) -> Any:
    from pyspark.sql import SparkSession

    cat = f"spark.sql.catalog.{CATALOG}"
    settings = {
        "spark.jars": a.jars,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        "spark.sql.shuffle.partitions": "1",
        "spark.driver.memory": "512m",
        "spark.sql.iceberg.aggregate-push-down.enabled": "false",
        cat: "org.apache.iceberg.spark.SparkCatalog",
        f"{cat}.type": "rest",
        f"{cat}.uri": a.uri,
        f"{cat}.credential": a.credential,
        f"{cat}.oauth2-server-uri": a.oauth2_server_uri,
        f"{cat}.scope": "catalog",
        f"{cat}.warehouse": a.warehouse,
        f"{cat}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        f"{cat}.s3.endpoint": a.s3_endpoint,
        f"{cat}.s3.path-style-access": "true",
        f"{cat}.s3.access-key-id": a.s3_access_key_id,
        f"{cat}.s3.secret-access-key": a.s3_secret_access_key,
        f"{cat}.client.region": a.s3_region,
        f"{cat}.cache-enabled": "false",
    }
    builder = SparkSession.builder.master("local[1]").appName("iceberg-rest-reader")
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _read(spark: Any, table: str) -> dict[str, Any]:
    name = f"{CATALOG}.{table}"
    ids = [r[0] for r in spark.sql(f"SELECT id FROM {name} ORDER BY id").collect()]
    snapshots = spark.sql(f"SELECT count(*) FROM {name}.snapshots").collect()[0][0]
    return {"table": table, "spark": spark.version, "rows": len(ids), "ids": ids,
            "snapshots": int(snapshots)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    spark = _session(a)
    failed = False
    try:
        for table in a.tables:
            try:
                doc = _read(spark, table)
            except Exception as e:  # one line naming the table's error, then the next table
                doc, failed = {"table": table, "error": f"{type(e).__name__}: {e}"[:2000]}, True
            print(json.dumps(doc), flush=True)
    finally:
        spark.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
