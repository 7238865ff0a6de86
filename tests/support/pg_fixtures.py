"""A private PostgreSQL cluster fixture for catalog-outage tests (stop/start at will).

Thin wrapper over :mod:`lab.pgcluster`; never touches the shared server on
5432. Import the fixture into a test module::

    from support.pg_fixtures import pg_cluster_fixture  # noqa: F401  (provides ``pg_cluster``)

:func:`postgres_uri` is the test server (``INGEST_TEST_POSTGRES``; ``scripts/postgres.sh``
installs and starts one), when it answers. Under ``INGEST_REQUIRE_POSTGRES=1`` (set by
``scripts/run-tests.sh``, so in CI) a test that needs PostgreSQL and cannot have it fails
instead of skipping.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NoReturn

import pytest

from lab.pgcluster import (
    PgCluster,
    PgClusterUnavailable,
    available,
    shared_server_uri,
)
from support.required import unavailable


def postgres_uri() -> str | None:
    """A reachable PostgreSQL catalog URI (trust auth), else None."""
    return shared_server_uri()


def no_postgres(why: str) -> NoReturn:
    """Skip for ``why``, or fail when PostgreSQL is required (CI)."""
    unavailable("INGEST_REQUIRE_POSTGRES", why)


def require_postgres_uri() -> str:
    """The test server's SQLAlchemy URI, or skip / fail (see :func:`no_postgres`)."""
    uri = postgres_uri()
    if uri is None:
        where = os.environ.get("INGEST_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
        no_postgres(f"no PostgreSQL server answering at {where} (scripts/postgres.sh starts one)")
    assert uri is not None
    return uri


@pytest.fixture(name="pg_cluster")
def pg_cluster_fixture() -> Iterator[PgCluster]:
    """A fresh cluster on a free port, dropped (with its data) after the test."""
    why = available()
    if why is not None:
        no_postgres(f"no private PostgreSQL cluster possible: {why}")
    try:
        cluster = PgCluster.create()
    except PgClusterUnavailable as e:
        no_postgres(f"no private PostgreSQL cluster possible: {e}")
    try:
        yield cluster
    finally:
        cluster.drop()
