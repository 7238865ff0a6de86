"""The REST catalog rig's pure parts: the fault names the Python side arms are the ones the
Java launcher parses, the PostgreSQL URI it is given is read right, and the ``sink.catalog``
block it hands a pipeline is one the pipeline's config accepts as a REST catalog."""

from __future__ import annotations

import re
from pathlib import Path

from lab.rest_catalog import Fault, OAuthClient, RestCatalogServer, TokenPolicy
from lab.rest_catalog.server import LAUNCHER, PostgresServer
from pipeline.config.sink import CatalogConfig


class _Store:
    endpoint = "http://127.0.0.1:8333"
    access_key = "ak"
    secret_key = "sk"
    region = "us-east-1"


def _server(tmp_path: Path) -> RestCatalogServer:
    return RestCatalogServer(
        port=18181,
        home=tmp_path,
        postgres=PostgresServer("127.0.0.1", 54329, "postgres", None),
        database="rest_catalog_x",
        store=_Store(),
        warehouse="s3://bucket/warehouse",
        client=OAuthClient(client_id="id", client_secret="secret"),
        tokens=TokenPolicy(),
    )


def test_every_fault_is_one_the_launcher_knows_and_back() -> None:
    source = LAUNCHER.read_text()
    enum_body = source[source.index("enum Fault {") : source.index("final String label;")]
    java = set(re.findall(r'[A-Z0-9_]+\("([a-z0-9-]+)"\)', enum_body))
    assert java == {f.value for f in Fault}


def test_a_postgres_uri_gives_the_server_and_role() -> None:
    pg = PostgresServer.parse("postgresql+psycopg2://ingest:p%40ss@db.local:6543/test")
    assert pg == PostgresServer("db.local", 6543, "ingest", "p@ss")
    assert pg.jdbc_url("rest_catalog_1") == "jdbc:postgresql://db.local:6543/rest_catalog_1"
    assert PostgresServer.parse("postgresql://postgres@127.0.0.1/test").port == 5432


def test_arming_writes_the_fault_name_and_disarming_removes_it(tmp_path: Path) -> None:
    server = _server(tmp_path)
    server.arm(Fault.HALT_AFTER_APPLY)
    assert server.fault_file.read_text() == "halt-after-apply"
    server.disarm()
    assert not server.armed()


def test_the_sink_catalog_block_is_a_rest_catalog_the_pipeline_accepts(tmp_path: Path) -> None:
    server = _server(tmp_path)
    config = CatalogConfig.model_validate(server.sink_catalog())
    props = config.pyiceberg_properties()
    assert props["type"] == "rest"
    assert props["uri"] == "http://127.0.0.1:18181"
    assert props["warehouse"] == "s3://bucket/warehouse"
    assert props["credential"] == "id:secret"
    assert props["oauth2-server-uri"] == "http://127.0.0.1:18181/v1/oauth/tokens"
    assert props["s3.endpoint"] == "http://127.0.0.1:8333"
    assert props["s3.path-style-access"] == "true"
    assert {"s3.access-key-id", "s3.secret-access-key", "s3.region"} <= props.keys()
