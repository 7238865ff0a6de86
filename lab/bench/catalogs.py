"""The commit phase on each Iceberg catalog users run: the SQL catalog (PostgreSQL) beside
Iceberg's REST catalog (``lab/rest_catalog``: Iceberg's REST server over the same
PostgreSQL, OAuth2 on), both with the warehouse on S3 (SeaweedFS), so the catalog is the
one difference.

Each catalog gets one fresh table driven batch by batch through the real coordinator
(``commits.run_commit_series``: REQUESTED, the worker's staging, INFLIGHT, the table
commit, COMPLETED). The first :data:`WARMUP` commits (the table's creation, the first
token, cold connections) are left out; the report gives p50 and p99 of the ``commit``
phase (the catalog round trips and the metadata written) and of the whole protocol, and
the REST ÷ SQL ratio of each.
"""

from __future__ import annotations

import contextlib
import shutil
from typing import Any

from lab.bench import stats
from lab.bench.commits import CatalogUnderTest, run_commit_series
from lab.bench.context import Context
from lab.bench.context import rounded as _round

__all__ = ["MAX_COMMITS", "WARMUP", "catalog_commits"]

WARMUP = 10
MAX_COMMITS = 300  # measured per catalog (the preset's growth count when smaller)


def _ms(values: list[float], q: float) -> float | None:
    return _round(stats.percentile(values, q) * 1000, 1)


def catalog_commits(ctx: Context) -> dict[str, Any]:
    """The ``catalogs`` section of the report (``skipped`` names what is missing)."""
    from lab.objectstore import S3Unavailable, start_seaweedfs
    from lab.pgcluster import PgClusterUnavailable, project_server_uri
    from lab.rest_catalog import start_rest_catalog

    try:
        postgres = project_server_uri()
    except PgClusterUnavailable as e:
        return {"skipped": f"no PostgreSQL: {e}"}
    commits = min(ctx.preset.commits, MAX_COMMITS)
    rows: list[dict[str, Any]] = []
    with contextlib.ExitStack() as services:
        s3_run = start_seaweedfs(ctx.work / "catalogs-s3")
        try:
            s3 = next(s3_run)
        except S3Unavailable as e:
            return {"skipped": f"no S3-compatible server: {e}"}
        services.callback(s3_run.close)
        rest = start_rest_catalog(
            ctx.work / "catalogs-rest", postgres_uri=postgres, store=s3, bucket=s3.new_bucket()
        )
        services.callback(rest.close)
        targets = (
            CatalogUnderTest(
                "sql (PostgreSQL)",
                {
                    "uri": postgres,
                    "warehouse": f"s3://{s3.new_bucket()}/warehouse",
                    "properties": s3.properties(),
                },
            ),
            CatalogUnderTest("rest (over PostgreSQL)", rest.sink_catalog()),
        )
        for target in targets:
            ctx.say(f"catalogs: {commits:,} commits through the {target.label} catalog")
            workdir = ctx.work / ctx.next_name("catalogs")
            series, _ = run_commit_series("iceberg", commits + WARMUP, workdir, target)
            shutil.rmtree(workdir, ignore_errors=True)
            commit, protocol = series.commit[WARMUP:], series.protocol[WARMUP:]
            rows.append(
                {
                    "catalog": target.label,
                    "commits": len(commit),
                    "commit_p50_ms": _ms(commit, 50),
                    "commit_p99_ms": _ms(commit, 99),
                    "protocol_p50_ms": _ms(protocol, 50),
                    "protocol_p99_ms": _ms(protocol, 99),
                }
            )
    sql, rest_row = rows
    return {
        "warehouse": "s3 (SeaweedFS)",
        "warmup_commits_left_out": WARMUP,
        "rows": rows,
        "rest_over_sql": {
            key: _round(rest_row[key] / sql[key], 2) if sql[key] else None
            for key in ("commit_p50_ms", "commit_p99_ms", "protocol_p50_ms", "protocol_p99_ms")
        },
    }
