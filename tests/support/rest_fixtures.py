"""A real Iceberg REST catalog for the tests (:mod:`lab.rest_catalog`): Iceberg's REST
servlet over a JDBC catalog in its own database on the test PostgreSQL
(``INGEST_TEST_POSTGRES``), the warehouse in a fresh bucket of the SeaweedFS test server,
OAuth2 client credentials on.

When it cannot start the test skips naming why, or fails under
``INGEST_REQUIRE_REST_CATALOG=1`` (or ``INGEST_REQUIRE_POSTGRES=1`` when PostgreSQL is the
missing part)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from lab.objectstore import S3Server
from lab.rest_catalog import OAuthClient, RestCatalogServer, TokenPolicy, start_rest_catalog
from pipeline.errors import EnvironmentProblem
from support.pg_fixtures import require_postgres_uri
from support.required import unavailable


def rest_catalog_server(
    home: Path,
    s3: S3Server,
    *,
    client: OAuthClient | None = None,
    tokens: TokenPolicy | None = None,
) -> Iterator[RestCatalogServer]:
    uri = require_postgres_uri()
    try:
        server = start_rest_catalog(
            home,
            postgres_uri=uri,
            store=s3,
            bucket=s3.new_bucket("rest"),
            client=client,
            tokens=tokens,
        )
    except EnvironmentProblem as e:
        unavailable("INGEST_REQUIRE_REST_CATALOG", f"no REST catalog: {e.message}")
    try:
        yield server
    finally:
        server.close()


def ensure_running(server: RestCatalogServer) -> None:
    """Start ``server`` again when a test's fault left it down."""
    if not server.alive():
        server.disarm()
        server.restart()
