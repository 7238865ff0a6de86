"""The services a drill may start beside Kafka (a Schema Registry, an S3 server, Iceberg's
REST catalog), each closed with the rig's ``services`` stack; one that cannot start here
makes the drill a skipped one (``SkipDrill``), not a failed one."""

from __future__ import annotations

import contextlib
from pathlib import Path

from lab.drill.model import SkipDrill
from lab.objectstore import S3Server
from lab.registry import SchemaRegistryServer
from lab.rest_catalog import RestCatalogServer


def start_registry(services: contextlib.ExitStack, where: Path) -> SchemaRegistryServer:
    from lab.registry import start_registry as start
    from pipeline.errors import EnvironmentProblem

    try:
        server = start(where)
    except EnvironmentProblem as e:
        raise SkipDrill(f"no Schema Registry: {e.message}") from None
    services.callback(server.close)
    return server


def start_rest(
    services: contextlib.ExitStack, where: Path, s3: S3Server | None, postgres: str | None
) -> RestCatalogServer:
    """Iceberg's REST catalog over ``postgres``, its warehouse in a new bucket of ``s3``."""
    from lab.rest_catalog import start_rest_catalog
    from pipeline.errors import EnvironmentProblem

    assert s3 is not None
    if postgres is None:
        raise SkipDrill("no PostgreSQL for the REST catalog")
    try:
        server = start_rest_catalog(
            where, postgres_uri=postgres, store=s3, bucket=s3.new_bucket("rest")
        )
    except EnvironmentProblem as e:
        raise SkipDrill(f"no REST catalog: {e.message}") from None
    services.callback(server.close)
    return server


def start_s3(services: contextlib.ExitStack, where: Path) -> S3Server:
    from lab.objectstore import S3Unavailable, start_seaweedfs

    server = start_seaweedfs(where)
    try:
        up = next(server)
    except S3Unavailable as e:
        raise SkipDrill(f"no S3-compatible server: {e}") from None
    services.callback(server.close)
    return up
