"""Every pyiceberg internal this package relies on, in one place (pyiceberg 0.12).

Nothing else in :mod:`pipeline.formats.iceberg` imports an underscore-prefixed pyiceberg
name or reads an underscore-prefixed attribute of a pyiceberg object; everything here
is pinned by ``tests/integration/formats/iceberg/test_pyiceberg_internals.py``, so an
upgrade that changes one of
them fails there, loudly, instead of silently changing what a commit does.

* :class:`ReplaceFiles` -- a ``replace`` snapshot (a rewrite that changes no data). pyiceberg
  offers no public producer for it: ``UpdateSnapshot.overwrite()`` records ``overwrite``,
  and ``update_snapshot_summaries`` computes totals only for append/overwrite/delete. We
  subclass the private ``_OverwriteFiles`` (whose totals are the right ones for a rewrite),
  construct it with ``_SnapshotProducer``'s constructor arguments, and relabel the summary
  its private ``_summary`` hook returns.
* :func:`staged_table_io` -- the FileIO of a ``create_table_transaction``'s staged table
  (``Transaction._table``; for a REST catalog it carries the server's vended
  configuration, which no public accessor returns before the table exists).
* :func:`local_view` / :func:`without_history` -- a copy of a table's metadata (pydantic
  ``model_copy`` over ``TableMetadata``'s field names) wrapped in a ``Table`` that is
  never written back. Relied on: ``Transaction.commit_transaction`` takes its retry
  count (``commit.retry.num-retries``) from the metadata of the ``Table`` it was opened
  on, and the catalog applies the transaction's updates (add snapshot, move ``main``,
  remove snapshots) to ITS current metadata, checking only the requirements (``main`` at
  the view's head, same table uuid). Public API, but behaviour pyiceberg does not
  promise; the tests check both.
* :class:`SessionHookRestCatalog` -- a ``RestCatalog`` whose HTTP session a subclass may
  amend in the public :meth:`~SessionHookRestCatalog.session_ready` (``rest_catalog.py``
  gives every request a deadline there). pyiceberg builds the session in the private
  ``_create_session`` (in ``__init__``: once to fetch the server's configuration, once
  more with it merged) and offers no other way to reach it.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.io import FileIO
from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update.snapshot import _OverwriteFiles
from requests import Session

__all__ = [
    "HISTORY_FIELDS",
    "ReplaceFiles",
    "SessionHookRestCatalog",
    "local_view",
    "replace_files",
    "staged_table_io",
    "without_history",
]

#: ``TableMetadata`` fields that hold history or statistics, emptied in every local view.
HISTORY_FIELDS: dict[str, Any] = {
    "snapshot_log": [],
    "metadata_log": [],
    "statistics": [],
    "partition_statistics": [],
}


class ReplaceFiles(_OverwriteFiles):
    """pyiceberg's overwrite producer, recorded as operation ``replace``: the files it
    removes and adds hold the same rows (the totals of an overwrite are the right ones)."""

    def _summary(self, snapshot_properties: dict[str, str] = {}) -> Summary:  # noqa: B006
        summary = super()._summary(snapshot_properties)
        return Summary(operation=Operation.REPLACE, **summary.additional_properties)


def replace_files(
    txn: Transaction, io: FileIO, snapshot_properties: dict[str, str]
) -> ReplaceFiles:
    """A ``replace`` snapshot producer on ``main`` in ``txn`` (use as a context manager;
    ``delete_data_file`` / ``append_data_file``; its public ``snapshot_id``)."""
    return ReplaceFiles(
        operation=Operation.OVERWRITE,
        transaction=txn,
        io=io,
        snapshot_properties=snapshot_properties,
        branch=MAIN_BRANCH,
    )


def staged_table_io(txn: Transaction) -> FileIO:
    """The FileIO of the table ``txn`` was opened on (a staged create included)."""
    io: FileIO = txn._table.io
    return io


def without_history(metadata: TableMetadata, **update: Any) -> TableMetadata:
    """A copy of ``metadata`` with no history logs or statistics, and ``update`` applied."""
    return metadata.model_copy(update={**HISTORY_FIELDS, **update})


def local_view(table: Table, **update: Any) -> Table:
    """``table`` with its metadata replaced by :func:`without_history` of it: a local
    view for one transaction, never written back."""
    return Table(
        identifier=table.name(),
        metadata=without_history(table.metadata, **update),
        metadata_location=table.metadata_location,
        io=table.io,
        catalog=table.catalog,
        config=table.config,
    )


class SessionHookRestCatalog(RestCatalog):
    """``RestCatalog`` that hands each HTTP session it builds to :meth:`session_ready`."""

    def _create_session(self) -> Session:
        session = super()._create_session()
        self.session_ready(session)
        return session

    def session_ready(self, session: Session) -> None:
        """Amend ``session`` before any request is sent on it (``self.properties`` is set)."""
