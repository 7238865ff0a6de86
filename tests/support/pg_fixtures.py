"""A private PostgreSQL cluster fixture for catalog-outage tests (stop/start at will).

Thin wrapper over :mod:`pipeline.tools.pgcluster`; never touches the shared server on
5432. Import the fixture into a test module::

    from support.pg_fixtures import pg_cluster_fixture  # noqa: F401  (provides ``pg_cluster``)

:func:`postgres_uri` is the shared server on 5432 (trust auth), when one answers.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipeline.tools.pgcluster import (
    PgCluster,
    PgClusterUnavailable,
    available,
    shared_server_uri,
)


def postgres_uri() -> str | None:
    """A reachable PostgreSQL catalog URI (trust auth on 127.0.0.1:5432), else None."""
    return shared_server_uri()


@pytest.fixture(name="pg_cluster")
def pg_cluster_fixture() -> Iterator[PgCluster]:
    """A fresh cluster on a free port, dropped (with its data) after the test."""
    why = available()
    if why is not None:
        pytest.skip(f"no private PostgreSQL cluster possible: {why}")
    try:
        cluster = PgCluster.create()
    except PgClusterUnavailable as e:
        pytest.skip(f"no private PostgreSQL cluster possible: {e}")
    try:
        yield cluster
    finally:
        cluster.drop()
