"""Run Hudi's own table services on a table, by hand, as a Hudi user would: Spark SQL's
``run_clustering`` and ``run_clean`` procedures of Hudi's Spark bundle (Spark 3.5).

Run with the JVM readers' environment (``scripts/jvm-reader-env.sh``), never the project's;
this script imports nothing from ``pipeline``. The services run with the settings docs/hudi.md
gives for tables this project writes: the metadata table off (``hoodie.metadata.enable=false``:
our writer keeps none, and refuses a table that has one) and no table upgrade
(``hoodie.write.auto.upgrade=false``: the table stays at version 6).

    python hudi_services.py --hudi-jar J [--clustering] [--clean RETAIN] BASE_PATH

Prints one JSON line: ``{"clustering": [...rows], "clean": [...rows]}`` (each procedure's
result rows as strings); exit 1 with ``{"error": ...}`` when a procedure fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from hudi_session import hudi_session  # this directory (the script's own)

SETTINGS = {
    "hoodie.metadata.enable": "false",
    "hoodie.write.auto.upgrade": "false",
}


def _args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hudi-jar", required=True, help="hudi-spark3.5-bundle_2.12 jar")
    ap.add_argument("--clustering", action="store_true", help="schedule and run a clustering")
    ap.add_argument("--clean", type=int, metavar="RETAIN", help="clean, retaining RETAIN commits")
    ap.add_argument("table", help="base path of the Hudi table")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    spark = hudi_session("hudi-table-services", [a.hudi_jar], catalog=True)
    for key, value in SETTINGS.items():
        spark.sql(f"SET {key}={value}")
    location = a.table.replace("'", "\\'")
    spark.sql(f"CREATE TABLE ingest_table USING hudi LOCATION '{location}'")
    calls = []
    if a.clustering:
        calls.append(("clustering", "CALL run_clustering(table => 'ingest_table')"))
    if a.clean is not None:
        calls.append(
            ("clean", f"CALL run_clean(table => 'ingest_table', retain_commits => {int(a.clean)})")
        )
    out: dict[str, Any] = {}
    code = 0
    for name, sql in calls:
        try:
            out[name] = [str(r) for r in spark.sql(sql).collect()]
        except Exception as e:  # the procedure's failure is the answer
            out = {"error": f"{name}: {type(e).__name__}: {str(e)[:4000]}"}
            code = 1
            break
    print(json.dumps(out), flush=True)
    spark.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
