"""Commits through a real Iceberg REST catalog (``lab.rest_catalog``: Iceberg's REST servlet
over a JDBC catalog on PostgreSQL, OAuth2 client credentials on, the warehouse on
SeaweedFS), for each answer the REST protocol gives that the SQL catalog does not: a
``409`` refusal, a ``5xx`` for a commit it applied, no answer at all (a hang, a server
killed before or after applying), a token it no longer honours, a missing namespace.
Every batch is counted: in the table once, nothing lost.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.rest_fixtures import rest_catalog_server

from integration.formats.iceberg.test_iceberg_adapter import (
    checkpoint,
    events_batch,
    make_sink,
    rows,
    write_and_commit,
)
from lab.objectstore import S3Server
from lab.rest_catalog import Fault, RestCatalogServer, TokenPolicy
from pipeline.errors import FencedError
from pipeline.formats.iceberg.catalog import load_catalog
from pipeline.formats.iceberg.catalog_table import IcebergTable
from pipeline.formats.iceberg.rest_catalog import PipelineRestCatalog
from pipeline.formats.iceberg.writer import write_data_files

TOKEN_LIFETIME_S = 3


@pytest.fixture
def rest(tmp_path: Path, s3_server: S3Server) -> Iterator[RestCatalogServer]:
    """A server of this test's own: the tests kill and restart it, and expire its tokens
    (honoured for :data:`TOKEN_LIFETIME_S`, announced to the client as an hour)."""
    yield from rest_catalog_server(
        tmp_path / "rest",
        s3_server,
        tokens=TokenPolicy(lifetime_s=TOKEN_LIFETIME_S, advertised_expires_in_s=3600),
    )


def sink_on(rest: RestCatalogServer, **kw: float) -> IcebergTable:
    props = {**rest.pyiceberg_properties(), "request-timeout": "3"}
    catalog = load_catalog("lake", props)
    assert isinstance(catalog, PipelineRestCatalog)
    return make_sink(catalog, catalog_retry_s=kw.get("catalog_retry_s", 90.0))


def offsets_of(sink: IcebergTable) -> list[int]:
    table = sink.load()
    assert table is not None
    return rows(table).column("_kafka_offset").to_pylist()


def snapshots_of(sink: IcebergTable) -> int:
    table = sink.load()
    assert table is not None
    return len(table.snapshots())


def served(rest: RestCatalogServer, status: int) -> int:
    """Requests the server answered with ``status`` (its request log)."""
    return sum(
        1 for line in rest.log_path.read_text().splitlines() if line.rstrip().endswith(f" {status}")
    )


def test_the_first_commit_creates_the_missing_namespace_and_table(
    rest: RestCatalogServer,
) -> None:
    sink = sink_on(rest)
    write_and_commit(sink, 0, 0, 10)
    assert ("db",) in sink.catalog.list_namespaces()
    assert offsets_of(sink) == list(range(10))


def test_a_commit_refused_with_409_is_decided_again_on_a_fresh_read(
    rest: RestCatalogServer,
) -> None:
    ours, theirs = sink_on(rest), sink_on(rest)
    write_and_commit(ours, 0, 0, 10)
    blobs = write_data_files(ours.write_context("ours-1"), [events_batch(10, 10)], 0)
    their_blobs = write_data_files(theirs.write_context("theirs"), [events_batch(500, 7)], 0)
    raced: list[bool] = []

    def interleave(_latest: object) -> None:
        if not raced:  # another writer commits between our read and our commit
            raced.append(True)
            theirs.commit(their_blobs, checkpoint(0, 500, 507, pipeline_id="other"))

    conflicts_before = served(rest, 409)
    ours.commit(blobs, checkpoint(1, 10, 20), precondition=interleave)
    assert served(rest, 409) == conflicts_before + 1  # the catalog refused the stale base
    assert offsets_of(ours) == [*range(20), *range(500, 507)]
    assert ours.committed_offsets("p1") == {("orders", 0): 20}


def test_a_commit_applied_but_answered_502_is_not_appended_again(
    rest: RestCatalogServer,
) -> None:
    sink = sink_on(rest)
    write_and_commit(sink, 0, 0, 10)
    rest.arm(Fault.ANSWER_502_AFTER_APPLY)
    write_and_commit(sink, 1, 10, 10)
    assert not rest.armed()  # it fired
    assert served(rest, 502) == 1
    assert offsets_of(sink) == list(range(20))
    assert snapshots_of(sink) == 2  # the retry found the batch in the table


def test_a_commit_never_answered_ends_at_the_deadline_and_is_decided_on_a_fresh_read(
    rest: RestCatalogServer,
) -> None:
    sink = sink_on(rest)  # request deadline 3 s; the server holds its answer 120 s
    write_and_commit(sink, 0, 0, 10)
    rest.arm(Fault.HANG_AFTER_APPLY)
    started = time.monotonic()
    write_and_commit(sink, 1, 10, 10)
    assert time.monotonic() - started < 60, "the commit waited for the hung answer"
    assert offsets_of(sink) == list(range(20))
    assert snapshots_of(sink) == 2


@pytest.mark.slow  # a server killed and restarted three times: in the slow stage
@pytest.mark.parametrize(
    "fault", [Fault.HALT_BEFORE_APPLY, Fault.HALT_AFTER_APPLY, Fault.HALT_AFTER_ANSWER]
)
def test_a_catalog_killed_mid_commit_and_restarted_has_the_batch_once(
    rest: RestCatalogServer, fault: Fault
) -> None:
    sink = sink_on(rest)
    write_and_commit(sink, 0, 0, 10)
    rest.arm(fault)
    batches = 3 if fault is Fault.HALT_AFTER_ANSWER else 2

    def commits() -> None:
        write_and_commit(sink, 1, 10, 10)
        if fault is Fault.HALT_AFTER_ANSWER:  # answered: the next request meets no server
            write_and_commit(sink, 2, 20, 10)

    with ThreadPoolExecutor(1) as pool:
        writer = pool.submit(commits)
        assert rest.wait_exit(timeout_s=60) is not None, "the fault did not halt the server"
        time.sleep(2)  # down a while: the writer's requests are refused meanwhile
        rest.restart()  # on this (the main) thread: the server outlives no helper thread
        writer.result(timeout=120)  # the writer's error, if any, raised here
    assert not rest.armed()
    assert offsets_of(sink) == list(range(10 * batches))
    assert snapshots_of(sink) == batches


def test_a_token_the_catalog_forgot_is_renewed(rest: RestCatalogServer) -> None:
    sink = sink_on(rest)
    write_and_commit(sink, 0, 0, 10)
    rest.arm(Fault.EXPIRE_TOKENS)  # the next commit's token is refused with 401
    write_and_commit(sink, 1, 10, 10)
    assert served(rest, 401) >= 1
    time.sleep(TOKEN_LIFETIME_S + 1)  # expired at the server, believed valid by the client
    write_and_commit(sink, 2, 20, 10)
    assert offsets_of(sink) == list(range(30))
    assert snapshots_of(sink) == 3


def test_a_writer_of_an_older_epoch_is_fenced(rest: RestCatalogServer) -> None:
    sink = sink_on(rest)
    write_and_commit(sink, 0, 0, 10, epoch=1)
    sink.fence("p1", 2)  # a newer writer took over
    with pytest.raises(FencedError):
        write_and_commit(sink, 1, 10, 10, epoch=1)
    write_and_commit(sink, 1, 10, 10, epoch=2)
    assert offsets_of(sink) == list(range(20))


@pytest.mark.slow
def test_the_commit_creating_the_table_killed_after_applying_is_found(
    rest: RestCatalogServer,
) -> None:
    sink = sink_on(rest)
    rest.arm(Fault.HALT_AFTER_APPLY)  # the staged create and the first snapshot, unanswered
    with ThreadPoolExecutor(1) as pool:
        writer = pool.submit(write_and_commit, sink, 0, 0, 10)
        assert rest.wait_exit(timeout_s=60) is not None, "the fault did not halt the server"
        rest.restart()
        writer.result(timeout=120)  # the writer's error, if any, raised here
    assert offsets_of(sink) == list(range(10))
    assert snapshots_of(sink) == 1
