"""Pins every pyiceberg internal :mod:`pipeline.formats.iceberg.pyiceberg_internals` relies
on: an upgrade of pyiceberg that renames, re-signs or changes one of them fails here, by
name, rather than silently changing what a commit does. Against a real SQLite catalog."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.schema import Schema
from pyiceberg.table import Table, TableProperties, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation
from pyiceberg.types import LongType, NestedField

from pipeline.formats.iceberg import pyiceberg_internals as internals
from pipeline.formats.iceberg.catalog import load_catalog

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    return load_catalog(
        "pin",
        {
            "type": "sql",
            "uri": f"sqlite:///{tmp_path}/catalog.db",
            "warehouse": (tmp_path / "warehouse").as_uri(),
        },
    )


def _table(catalog: Catalog, **props: str) -> Table:
    catalog.create_namespace_if_not_exists("db")
    return catalog.create_table("db.t", SCHEMA, properties=props)


def _append(table: Table, ids: list[int]) -> Table:
    table.append(pa.table({"id": pa.array(ids, pa.int64())}))
    return table.refresh()


# -- ReplaceFiles: _OverwriteFiles, _SnapshotProducer.__init__, _summary --------------------


def test_overwrite_producer_is_importable_with_the_constructor_and_hook_we_use() -> None:
    from pyiceberg.table.update.snapshot import _OverwriteFiles, _SnapshotProducer

    assert issubclass(internals.ReplaceFiles, _OverwriteFiles)
    params = inspect.signature(_SnapshotProducer.__init__).parameters
    for name in ("operation", "transaction", "io", "snapshot_properties", "branch"):
        assert name in params, f"_SnapshotProducer.__init__ lost {name!r}"
    hook = inspect.signature(_OverwriteFiles._summary).parameters
    assert list(hook) == ["self", "snapshot_properties"]
    assert isinstance(inspect.getattr_static(_OverwriteFiles, "snapshot_id"), property)


def test_replace_files_commits_a_replace_snapshot_with_overwrite_totals(catalog: Catalog) -> None:
    table = _append(_append(_table(catalog), [1, 2]), [3])
    inputs = [task.file for task in table.scan().plan_files()]
    assert len(inputs) == 2
    merged = _append(_table_copy(catalog), [1, 2, 3])  # a real data file holding the same rows
    output = next(task.file for task in merged.scan().plan_files())

    txn = table.transaction()
    with internals.replace_files(txn, table.io, {"ingest.compaction": "true"}) as rewrite:
        for f in inputs:
            rewrite.delete_data_file(f)
        rewrite.append_data_file(output)
        snapshot_id = rewrite.snapshot_id
    committed = txn.commit_transaction()

    head = committed.current_snapshot()
    assert head is not None and head.snapshot_id == snapshot_id
    assert head.summary is not None
    assert head.summary.operation == Operation.REPLACE
    summary = head.summary.additional_properties
    assert summary["ingest.compaction"] == "true"
    assert summary["deleted-data-files"] == "2" and summary["added-data-files"] == "1"
    assert summary["total-data-files"] == "1" and summary["total-records"] == "3"
    assert sorted(committed.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]


def _table_copy(catalog: Catalog) -> Table:
    return catalog.create_table("db.other", SCHEMA)


# -- staged_table_io: Transaction._table ------------------------------------------------


def test_staged_table_io_is_the_create_transactions_file_io(catalog: Catalog) -> None:
    catalog.create_namespace_if_not_exists("db")
    txn = catalog.create_table_transaction("db.staged", SCHEMA)
    assert isinstance(txn, Transaction)
    io = internals.staged_table_io(txn)
    assert io is txn._table.io
    assert io.properties.get("warehouse") == catalog.properties["warehouse"]
    assert not catalog.table_exists("db.staged")  # staging commits nothing


# -- local_view / without_history: TableMetadata fields, Table(...), commit semantics ------


def test_metadata_has_the_fields_a_view_replaces() -> None:
    versions = typing.get_args(typing.get_args(TableMetadata)[0])  # V1 | V2 | V3
    assert versions, "TableMetadata is no longer a union of format versions"
    fields = set.intersection(*(set(v.model_fields) for v in versions))
    needed = {*internals.HISTORY_FIELDS, "snapshots", "refs", "current_snapshot_id", "properties"}
    assert needed <= fields, f"TableMetadata lost {sorted(needed - fields)}"
    params = inspect.signature(Table.__init__).parameters
    for name in ("identifier", "metadata", "metadata_location", "io", "catalog", "config"):
        assert name in params, f"Table.__init__ lost {name!r}"


def test_a_view_commits_onto_the_catalogs_metadata_and_keeps_its_history(
    catalog: Catalog,
) -> None:
    table = _append(_append(_append(_table(catalog), [1]), [2]), [3])
    head = table.current_snapshot()
    assert head is not None and len(table.metadata.snapshot_log) == 3
    view = internals.local_view(
        table,
        snapshots=[head],
        current_snapshot_id=head.snapshot_id,
        refs=dict(table.metadata.refs),
    )
    assert view.metadata.snapshot_log == [] and len(view.metadata.snapshots) == 1
    assert len(table.metadata.snapshots) == 3  # the original is untouched

    txn = view.transaction()
    with txn.update_snapshot().fast_append() as append:
        pass
    committed = txn.commit_transaction()
    reloaded = catalog.load_table("db.t")
    assert len(reloaded.metadata.snapshots) == 4  # the catalog's history, plus ours
    assert len(reloaded.metadata.snapshot_log) == 4
    assert committed.metadata.snapshots == reloaded.metadata.snapshots
    assert append.snapshot_id == reloaded.metadata.current_snapshot_id


def test_commit_retries_are_read_from_the_views_properties(catalog: Catalog) -> None:
    """A view saying ``commit.retry.num-retries=0`` is refused on a conflict instead of
    rebased and re-committed by pyiceberg (the table itself says 4)."""
    table = _append(_table(catalog, **{TableProperties.COMMIT_NUM_RETRIES: "4"}), [1])
    view = internals.local_view(
        table, properties={**table.metadata.properties, TableProperties.COMMIT_NUM_RETRIES: "0"}
    )
    _append(catalog.load_table("db.t"), [2])  # someone else moves main
    txn = view.transaction()
    with txn.update_snapshot().merge_append():
        pass
    with pytest.raises(CommitFailedException):
        txn.commit_transaction()
    # and the same stale base WITHOUT the view is rebased by pyiceberg: the pin is real
    txn = table.transaction()
    with txn.update_snapshot().merge_append():
        pass
    txn.commit_transaction()
    assert len(catalog.load_table("db.t").metadata.snapshots) == 3


def test_without_history_keeps_schema_spec_and_location(catalog: Catalog) -> None:
    table = _append(_table(catalog), [1])
    slim: Any = internals.without_history(
        table.metadata, snapshots=[], refs={}, current_snapshot_id=None
    )
    assert slim.snapshots == [] and slim.refs == {} and slim.current_snapshot_id is None
    assert slim.schema() == table.schema() and slim.location == table.location()
    assert slim.spec() == table.spec()


def test_the_session_hook_sees_the_session_every_request_uses(rest_catalog: Any) -> None:
    sessions: list[Any] = []

    class Recording(internals.SessionHookRestCatalog):
        def session_ready(self, session: Any) -> None:
            sessions.append(session)

    catalog = Recording("lake", **rest_catalog.pyiceberg_properties())
    # one for the server's config, one with it merged: the catalog keeps the last
    assert sessions and catalog._session is sessions[-1]
    built = len(sessions)
    catalog.create_namespace_if_not_exists("hooked")  # requests on that session
    assert ("hooked",) in catalog.list_namespaces()
    assert len(sessions) == built
