"""The REST catalog's request deadline (rest_catalog.py) on a real socket that takes a
request and never answers, and the catalog configuration that selects it."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import requests

from pipeline.config.sink import CatalogConfig
from pipeline.formats.iceberg.rest_catalog import _DeadlineAdapter
from pipeline.formats.iceberg.retry import is_unavailable


@pytest.fixture
def silent_server() -> Iterator[str]:
    """An HTTP address that accepts connections and reads requests but never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    listener.close()


def test_a_request_the_catalog_never_answers_ends_at_the_deadline_as_unavailable(
    silent_server: str,
) -> None:
    session = requests.Session()
    session.mount("http://", _DeadlineAdapter(0.5))
    started = time.monotonic()
    with pytest.raises(requests.exceptions.ReadTimeout) as caught:
        session.post(f"{silent_server}/v1/namespaces/db/tables/t", json={})
    assert time.monotonic() - started < 5
    # retried as an unknown outcome: a fresh read decides before any second commit
    assert is_unavailable(caught.value)


def test_a_request_naming_its_own_deadline_keeps_it(silent_server: str) -> None:
    session = requests.Session()
    session.mount("http://", _DeadlineAdapter(30))
    started = time.monotonic()
    with pytest.raises(requests.exceptions.ReadTimeout):
        session.get(f"{silent_server}/v1/config", timeout=0.3)
    assert time.monotonic() - started < 5


def test_a_rest_catalog_carries_its_request_deadline() -> None:
    rest = CatalogConfig(type="rest", uri="http://catalog:8181", warehouse="s3://lake/wh")
    assert rest.pyiceberg_properties()["request-timeout"] == "30"
    quick = CatalogConfig.model_validate(
        {"type": "rest", "uri": "http://c", "warehouse": "s3://l/w", "requestTimeoutSeconds": 2.5}
    )
    assert quick.pyiceberg_properties()["request-timeout"] == "2.5"
    sql = CatalogConfig(uri="sqlite:////tmp/x.db", warehouse="/tmp/wh")
    assert "request-timeout" not in sql.pyiceberg_properties()


def test_a_zero_request_deadline_is_refused() -> None:
    with pytest.raises(ValueError, match="requestTimeoutSeconds"):
        CatalogConfig.model_validate({"type": "rest", "requestTimeoutSeconds": 0})
