"""A check that stops the pipeline decides on a fresh read of the table.

The race behind a false ``[ingest:gap]``: the idle fence check (main thread) loads the
table while the stream thread commits a batch. Its catalog answer predates the commit but
was stored as the adapter's read view after the commit stored the newer one, so the next
batch's gap check, within ``read_cache_s``, compared the batch with the table one commit
back. The delay is injected at that spot: the real catalog's ``load_table`` of the racing
thread is held, after it fetched, until the commit has landed. Real pyiceberg SQL catalogs
(SQLite, and PostgreSQL when up), real Parquet files, the real coordinator and journal.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.catalog import Catalog
from support.pg_fixtures import require_postgres_uri

from integration.formats.iceberg.test_iceberg_adapter import (
    checkpoint,
    events_batch,
    make_sink,
    write_and_commit,
)
from pipeline.commit.coordinator import Coordinator
from pipeline.commit.journal import InstantTimeline
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.commit.table_set import CommitTables
from pipeline.commit.types import Outcome, PartitionStats, StagedBatch
from pipeline.formats.iceberg.catalog import load_catalog
from pipeline.formats.iceberg.catalog_table import IcebergTable
from pipeline.formats.iceberg.pipeline_tables import IcebergCommitter
from pipeline.formats.iceberg.writer import write_data_files
from pipeline.storage.local import LocalJournalStore

TP = TopicPartition("orders", 0)


@pytest.fixture(params=["sqlite", "postgres"])
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Catalog]:
    uri = f"sqlite:///{tmp_path}/catalog.db" if request.param == "sqlite" else None
    props = {
        "type": "sql",
        "uri": uri or require_postgres_uri(),
        "warehouse": (tmp_path / "warehouse").as_uri(),
    }
    cat = load_catalog(f"t{uuid.uuid4().hex[:12]}", props)
    yield cat
    for namespace in cat.list_namespaces():
        for table in cat.list_tables(namespace):
            cat.drop_table(table)
        cat.drop_namespace(namespace)
    engine = getattr(cat, "engine", None)
    if engine is not None:
        engine.dispose()


class HeldLoad:
    """Holds the catalog answer of one thread's ``load_table`` after the fetch, until
    released: the injected delay between "fetched" and "stored as the read view"."""

    def __init__(self, catalog: Catalog) -> None:
        self.fetched = threading.Event()
        self.release = threading.Event()
        self.thread: threading.Thread | None = None
        real = catalog.load_table

        def load_table(identifier: Any) -> Any:
            table = real(identifier)
            if threading.current_thread() is self.thread:
                self.fetched.set()
                assert self.release.wait(60), "the racing load was never released"
            return table

        catalog.load_table = load_table  # type: ignore[method-assign]

    def start(self, read: Callable[[], object]) -> None:
        self.thread = threading.Thread(target=read, name="racing-read")
        self.thread.start()
        assert self.fetched.wait(60), "the racing read never reached the catalog"

    def finish(self) -> None:
        self.release.set()
        assert self.thread is not None
        self.thread.join(60)


def test_a_load_older_than_our_commit_never_replaces_its_view(catalog: Catalog) -> None:
    sink = make_sink(catalog, read_cache_s=60.0)
    write_and_commit(sink, 0, 0, 10)
    held = HeldLoad(catalog)
    held.start(sink.load)  # fetches the table at batch 0 and is held there
    write_and_commit(sink, 1, 10, 10)  # the stream thread commits batch 1
    held.finish()  # the racing load now returns its (older) answer
    assert sink.committed_offsets("p1") == {("orders", 0): 20}
    assert sink.is_committed("p1", "inc-a", 1)


def test_a_forgotten_view_is_not_brought_back_by_an_older_load(catalog: Catalog) -> None:
    sink = make_sink(catalog, read_cache_s=60.0)
    other = make_sink(load_catalog(catalog.name, catalog.properties), read_cache_s=60.0)
    write_and_commit(sink, 0, 0, 10)
    held = HeldLoad(catalog)
    held.start(sink.load)
    # another writer of the pipeline fences the table; our fence check then drops the view
    other.fence("p1", 5)
    sink.fence("p1", 5)  # this epoch already fenced it: only a fresh load, then forget
    held.finish()
    assert sink.latest_checkpoint("p1") is not None
    assert sink.latest_checkpoint("p1").epoch == 5  # type: ignore[union-attr]


def _writer(
    sink: IcebergTable, start: int, n: int
) -> Callable[[str, PartitionOffsets], StagedBatch]:
    def write(write_id: str, drop_below: PartitionOffsets) -> StagedBatch:
        files = write_data_files(sink.write_context(write_id), [events_batch(start, n)], 0)
        stats = [PartitionStats(TP.topic, TP.partition, start, start + n - 1, n)]
        return StagedBatch(data_files=files, stats=stats)

    return write


def _coordinator(sink: IcebergTable, tmp_path: Path) -> Coordinator:
    journal = InstantTimeline(LocalJournalStore(str(tmp_path / "journal")))
    coordinator = Coordinator("p1", CommitTables(IcebergCommitter(sink)), timeline=journal)
    coordinator.acquire_epoch()
    return coordinator


def test_idle_fence_check_racing_a_commit_does_not_halt_the_next_batch(
    catalog: Catalog, tmp_path: Path
) -> None:
    """The reported false halt, end to end through the coordinator."""
    sink = make_sink(catalog, read_cache_s=2.0)
    coordinator = _coordinator(sink, tmp_path)
    ends = [PartitionOffsets({TP: 10 * (b + 1)}) for b in range(3)]
    assert coordinator.run_batch("inc", 0, None, ends[0], _writer(sink, 0, 10)).outcome == (
        Outcome.COMMITTED
    )
    held = HeldLoad(catalog)

    def write_racing_the_idle_check(write_id: str, drop_below: PartitionOffsets) -> StagedBatch:
        time.sleep(sink.read_cache_s + 0.1)  # the view expired: the idle check loads
        held.start(coordinator.check_epoch)  # FenceGuard.check_idle on the main thread
        return _writer(sink, 10, 10)(write_id, drop_below)

    out = coordinator.run_batch("inc", 1, ends[0], ends[1], write_racing_the_idle_check)
    assert out.outcome == Outcome.COMMITTED
    held.finish()  # the idle check's older answer arrives after the commit
    out = coordinator.run_batch("inc", 2, ends[1], ends[2], _writer(sink, 20, 10))
    assert out.outcome == Outcome.COMMITTED
    assert sink.committed_offsets("p1") == {("orders", 0): 30}
    table = sink.load()
    assert table is not None
    offsets = sorted(table.scan().to_arrow().column("_kafka_offset").to_pylist())
    assert offsets == list(range(30))


def test_a_halt_is_confirmed_on_a_fresh_read(catalog: Catalog, tmp_path: Path) -> None:
    """Even a cached view that does say "gap" only halts when a fresh read agrees."""
    sink = make_sink(catalog, read_cache_s=60.0)
    coordinator = _coordinator(sink, tmp_path)
    ends = [PartitionOffsets({TP: 10 * (b + 1)}) for b in range(4)]
    coordinator.run_batch("inc", 0, None, ends[0], _writer(sink, 0, 10))
    coordinator.run_batch("inc", 1, ends[0], ends[1], _writer(sink, 10, 10))
    # another process of the same writer epoch commits batch 2 (as a recovery recommits
    # an instant): our view, from our own commit of batch 1, misses it
    other = make_sink(load_catalog(catalog.name, catalog.properties))
    blobs = write_data_files(other.write_context("x"), [events_batch(20, 10)], 0)
    other.commit(blobs, checkpoint(2, 20, 30, incarnation="inc", epoch=coordinator.epoch))
    assert sink.committed_offsets("p1") == {("orders", 0): 20}  # the cached view
    out = coordinator.run_batch("inc", 3, ends[2], ends[3], _writer(sink, 30, 10))
    assert out.outcome == Outcome.COMMITTED
    assert sink.committed_offsets("p1") == {("orders", 0): 40}
