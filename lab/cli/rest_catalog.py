"""``ingest rest-catalog``: a real Iceberg REST catalog on loopback until Ctrl-C."""

from __future__ import annotations

import contextlib
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer
import yaml

from pipeline.cli.common import UsageError, out, setup_logging


def _postgres(uri: str | None) -> str:
    """``uri``, else the project's own PostgreSQL (``scripts/postgres.sh`` starts it)."""
    if uri is not None:
        return uri
    from lab.pgcluster import PgClusterUnavailable, project_server_uri

    try:
        return project_server_uri()
    except PgClusterUnavailable as e:
        raise UsageError(f"no PostgreSQL for the catalog: {e}; or give --postgres URI") from None


def rest_catalog(
    postgres: Annotated[
        str | None,
        typer.Option(
            help="postgresql://user[:password]@host:port/db the catalog creates its database "
            "on (default: the project's own, scripts/postgres.sh)"
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="the object store's data and the server's log (default: a temp dir)"),
    ] = None,
) -> None:
    """Start Iceberg's REST catalog (its own servlet over a JDBC catalog on PostgreSQL,
    OAuth2 client credentials required) with the warehouse on a SeaweedFS S3 server, on
    loopback until Ctrl-C; prints the ``sink.catalog`` block a pipeline uses."""
    if data_dir is not None and data_dir.exists() and not data_dir.is_dir():
        raise UsageError(f"--data-dir {data_dir}: is a file, not a directory")
    from lab.objectstore import S3Unavailable, start_seaweedfs
    from lab.rest_catalog import start_rest_catalog
    from pipeline.errors import EnvironmentProblem

    setup_logging("rest-catalog", screen=logging.WARNING)
    uri = _postgres(postgres)
    with contextlib.ExitStack() as stack:
        home = data_dir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        store_run = start_seaweedfs(home / "s3")
        try:
            store = next(store_run)
        except S3Unavailable as e:
            raise UsageError(f"no S3 server for the warehouse: {e}") from None
        stack.callback(store_run.close)
        try:
            server = start_rest_catalog(
                home / "rest-catalog", postgres_uri=uri, store=store, bucket=store.new_bucket()
            )
        except EnvironmentProblem as e:
            raise UsageError(e.message) from None
        stack.callback(server.close)
        out.print(f"Iceberg REST catalog: {server.uri} (log {server.log_path})")
        out.print(f"S3 (SeaweedFS): {store.endpoint}, warehouse {server.warehouse}")
        out.print("sink:\n  catalog:")
        block = yaml.safe_dump(server.sink_catalog(), sort_keys=False)
        out.print("\n".join(f"    {line}" for line in block.splitlines()))
        out.print("press Ctrl-C to stop")
        sys.stdout.flush()
        with contextlib.suppress(KeyboardInterrupt):
            while server.alive():
                time.sleep(1)
            raise UsageError(f"the REST catalog exited; see {server.log_path}")
