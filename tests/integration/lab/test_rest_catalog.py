"""The lab's Iceberg REST catalog (lab/rest_catalog): a real server over PostgreSQL with the
warehouse on SeaweedFS, reached by pyiceberg's ``RestCatalog`` through OAuth2 client
credentials; its auth refuses what it must, and each fault hook does what it says."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.rest_fixtures import ensure_running, rest_catalog_server

from lab.objectstore import S3Server
from lab.rest_catalog import Fault, OAuthClient, RestCatalogServer, TokenPolicy

NAMESPACE = "db"
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
HALTED = 137  # the launcher's Runtime.halt status


def _catalog(server: RestCatalogServer, **overrides: Any) -> Any:
    from pyiceberg.catalog import load_catalog

    return load_catalog("rest", **{**server.pyiceberg_properties(), **overrides})


def _rows(n: int, start: int = 0) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "name": [f"n{i}" for i in ids]}, schema=SCHEMA)


def _new_table(server: RestCatalogServer) -> tuple[Any, str]:
    """A fresh table holding 3 rows, and its name."""
    catalog = _catalog(server)
    catalog.create_namespace_if_not_exists(NAMESPACE)
    name = f"{NAMESPACE}.t_{uuid.uuid4().hex[:8]}"
    table = catalog.create_table(name, schema=SCHEMA)
    table.append(_rows(3))
    return catalog, name


def _count(server: RestCatalogServer, name: str) -> int:
    """The table's rows on a fresh client (new token, fresh load)."""
    return int(_catalog(server).load_table(name).scan().to_arrow().num_rows)


def _http(
    server: RestCatalogServer,
    method: str,
    path: str,
    token: str | None = None,
    body: dict[str, Any] | None = None,
    timeout: float = 10,
) -> tuple[int, dict[str, Any]]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{server.uri}{path}", data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return int(r.status), json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return int(e.code), json.loads(e.read() or b"{}")


@pytest.fixture
def server(rest_catalog: RestCatalogServer) -> Iterator[RestCatalogServer]:
    ensure_running(rest_catalog)
    yield rest_catalog
    ensure_running(rest_catalog)  # the next test finds it up, whatever this one did


def test_append_and_read_back_with_the_warehouse_on_s3(
    server: RestCatalogServer, s3_server: S3Server
) -> None:
    catalog, name = _new_table(server)
    table = catalog.load_table(name)
    table.append(_rows(4, start=3))

    got = _catalog(server).load_table(name).scan().to_arrow().sort_by("id")
    assert got.column("id").to_pylist() == list(range(7))
    assert table.metadata_location.startswith(server.warehouse + "/")
    bucket = server.warehouse.removeprefix("s3://").split("/", 1)[0]
    keys = [
        o["Key"] for o in s3_server.client().list_objects_v2(Bucket=bucket)["Contents"]
    ]  # the data files are on SeaweedFS, not on a local disk
    assert sum(k.endswith(".parquet") for k in keys) == 2


def test_the_auth_property_form_reaches_the_catalog(server: RestCatalogServer) -> None:
    from pyiceberg.catalog import load_catalog

    _, name = _new_table(server)
    props = server.pyiceberg_properties()
    for key in ("credential", "oauth2-server-uri", "scope"):
        props.pop(key)
    auth = {
        "type": "oauth2",
        "oauth2": {
            "client_id": server.client.client_id,
            "client_secret": server.client.client_secret,
            "token_url": server.token_uri,
            "scope": server.client.scope,
        },
    }
    catalog = load_catalog("rest-auth", **props, auth=auth)
    assert catalog.load_table(name).scan().to_arrow().num_rows == 3


def test_a_request_without_a_valid_token_is_refused_with_401(server: RestCatalogServer) -> None:
    for token in (None, "not-a-token-it-issued"):
        status, body = _http(server, "GET", "/v1/namespaces", token)
        assert status == 401
        assert body["error"]["type"] == "NotAuthorizedException"
        assert body["error"]["code"] == 401
    assert _http(server, "GET", "/v1/namespaces", server.fetch_token())[0] == 200


def test_a_wrong_secret_gets_no_token(server: RestCatalogServer) -> None:
    from pyiceberg.exceptions import OAuthError

    with pytest.raises(OAuthError, match="invalid_client"):
        _catalog(server, credential=f"{server.client.client_id}:wrong-secret")
    with pytest.raises(OAuthError):
        _catalog(server, credential=f"someone-else:{server.client.client_secret}")


def test_a_restart_forgets_every_token(server: RestCatalogServer) -> None:
    token = server.fetch_token()
    assert server.config_status(token) == 200
    server.restart()
    assert server.config_status(token) == 401
    assert server.config_status(server.fetch_token()) == 200


def test_a_restart_from_another_thread_outlives_that_thread(server: RestCatalogServer) -> None:
    import threading
    import time

    restarter = threading.Thread(target=server.restart)
    restarter.start()
    restarter.join()
    time.sleep(1)  # a child tied to the thread's death would be gone by now
    assert server.alive()
    assert server.config_status(server.fetch_token()) == 200


def test_a_token_dies_on_the_server_while_its_client_still_trusts_it(
    tmp_path: Path, s3_server: S3Server
) -> None:
    gen = rest_catalog_server(
        tmp_path / "short",
        s3_server,
        tokens=TokenPolicy(lifetime_s=1, advertised_expires_in_s=3600),
    )
    short = next(gen)
    try:
        data = (
            f"grant_type=client_credentials&client_id={short.client.client_id}"
            f"&client_secret={short.client.client_secret}&scope=catalog"
        ).encode()
        with urllib.request.urlopen(short.token_uri, data=data, timeout=10) as r:
            answer = json.load(r)
        assert answer["expires_in"] == 3600
        assert answer["token_type"] == "bearer"
        assert answer["issued_token_type"] == "urn:ietf:params:oauth:token-type:access_token"
        assert short.config_status(answer["access_token"]) == 200
        import time

        time.sleep(1.5)
        assert short.config_status(answer["access_token"]) == 401
    finally:
        gen.close()


def test_a_static_token_is_accepted(tmp_path: Path, s3_server: S3Server) -> None:
    gen = rest_catalog_server(
        tmp_path / "static",
        s3_server,
        client=OAuthClient(),
        tokens=TokenPolicy(static_token="s3cr3t"),
    )
    static = next(gen)
    try:
        assert static.config_status("s3cr3t") == 200
        assert static.config_status("s3cr3") == 401
    finally:
        gen.close()


def _stale_commit(name: str) -> tuple[str, dict[str, Any]]:
    """A commit of ``name`` whose requirement (main at snapshot 1) never holds: its path and
    body."""
    namespace, table = name.split(".")
    body = {
        "identifier": {"namespace": [namespace], "name": table},
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 1}],
        "updates": [{"action": "set-properties", "updates": {"stale": "yes"}}],
    }
    return f"/v1/namespaces/{namespace}/tables/{table}", body


def test_errors_answer_with_their_own_status(server: RestCatalogServer) -> None:
    _, name = _new_table(server)
    token = server.fetch_token()
    status, body = _http(server, "GET", f"/v1/namespaces/{NAMESPACE}/tables/no_such_table", token)
    assert (status, body["error"]["type"]) == (404, "NoSuchTableException")
    status, body = _http(server, "POST", "/v1/namespaces", token, {"namespace": [NAMESPACE]})
    assert (status, body["error"]["type"]) == (409, "AlreadyExistsException")
    path, commit = _stale_commit(name)
    status, body = _http(server, "POST", path, token, commit)
    assert (status, body["error"]["type"]) == (409, "CommitFailedException")
    assert "stale" not in _catalog(server).load_table(name).properties


# -- fault hooks ---------------------------------------------------------------------------


def test_halt_before_apply_kills_the_server_and_commits_nothing(server: RestCatalogServer) -> None:
    catalog, name = _new_table(server)
    table = catalog.load_table(name)
    server.arm(Fault.HALT_BEFORE_APPLY)
    with pytest.raises(Exception):  # noqa: B017 - the connection drops: requests' error
        table.append(_rows(2, start=100))
    assert server.wait_exit() == HALTED
    assert not server.armed()  # fired once: a restart does not fire it again
    server.restart()
    assert _count(server, name) == 3


def test_halt_after_apply_kills_the_server_unanswered_with_the_commit_applied(
    server: RestCatalogServer,
) -> None:
    catalog, name = _new_table(server)
    table = catalog.load_table(name)
    server.arm(Fault.HALT_AFTER_APPLY)
    with pytest.raises(Exception):  # noqa: B017 - the connection drops: requests' error
        table.append(_rows(2, start=100))
    assert server.wait_exit() == HALTED
    assert not server.armed()
    server.restart()
    assert _count(server, name) == 5


def test_halt_after_answer_gives_a_refused_commit_its_409_then_dies(
    server: RestCatalogServer,
) -> None:
    _, name = _new_table(server)
    path, body = _stale_commit(name)
    server.arm(Fault.HALT_AFTER_ANSWER)
    status, answer = _http(server, "POST", path, server.fetch_token(), body)
    assert (status, answer["error"]["type"]) == (409, "CommitFailedException")
    assert server.wait_exit() == HALTED


def test_halt_after_answer_answers_then_dies(server: RestCatalogServer) -> None:
    catalog, name = _new_table(server)
    table = catalog.load_table(name)
    server.arm(Fault.HALT_AFTER_ANSWER)
    table.append(_rows(2, start=100))  # the client got its answer
    assert server.wait_exit() == HALTED
    server.restart()
    assert _count(server, name) == 5


def test_answer_502_after_apply_is_an_unknown_outcome_that_committed(
    server: RestCatalogServer,
) -> None:
    from pyiceberg.exceptions import CommitStateUnknownException

    catalog, name = _new_table(server)
    table = catalog.load_table(name)
    server.arm(Fault.ANSWER_502_AFTER_APPLY)
    with pytest.raises(CommitStateUnknownException):
        table.append(_rows(2, start=100))
    assert server.alive()
    assert _count(server, name) == 5


def test_hang_after_apply_holds_the_answer_past_the_client_timeout(
    server: RestCatalogServer,
) -> None:
    _, name = _new_table(server)
    namespace, table = name.split(".")
    commit = {
        "identifier": {"namespace": [namespace], "name": table},
        "requirements": [],
        "updates": [{"action": "set-properties", "updates": {"hung": "yes"}}],
    }
    server.arm(Fault.HANG_AFTER_APPLY)
    path = f"/v1/namespaces/{namespace}/tables/{table}"
    with pytest.raises((TimeoutError, socket.timeout, urllib.error.URLError)):
        _http(server, "POST", path, server.fetch_token(), commit, timeout=3)
    assert server.alive()
    assert _catalog(server).load_table(name).properties.get("hung") == "yes"


def test_expire_tokens_refuses_the_commit_with_401_and_forgets_every_token(
    server: RestCatalogServer,
) -> None:
    catalog, name = _new_table(server)
    namespace, table = name.split(".")
    token = server.fetch_token()
    other = server.fetch_token()
    server.arm(Fault.EXPIRE_TOKENS)
    status, body = _http(server, "POST", f"/v1/namespaces/{namespace}/tables/{table}", token, {})
    assert (status, body["error"]["type"]) == (401, "NotAuthorizedException")
    assert not server.armed()
    assert server.config_status(other) == 401
    # pyiceberg's client refreshes its token on a 401 and commits once
    server.arm(Fault.EXPIRE_TOKENS)
    catalog.load_table(name).append(_rows(2, start=100))
    assert _count(server, name) == 5
    log = server.log_path.read_text().splitlines()
    commits = [
        ln for ln in log if ln.startswith(f"POST /v1/namespaces/{namespace}/tables/{table} ")
    ]
    assert commits[-2:] == [
        commits[-2].rsplit(" ", 1)[0] + " 401",
        commits[-1].rsplit(" ", 1)[0] + " 200",
    ]


def test_the_sink_catalog_block_opens_the_catalog_through_the_pipelines_config(
    server: RestCatalogServer,
) -> None:
    from pyiceberg.catalog import load_catalog

    from pipeline.config.sink import CatalogConfig

    _, name = _new_table(server)
    config = CatalogConfig.model_validate(server.sink_catalog())
    catalog = load_catalog(config.name, **config.pyiceberg_properties())
    assert catalog.load_table(name).scan().to_arrow().num_rows == 3
