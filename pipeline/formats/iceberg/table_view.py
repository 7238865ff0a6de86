"""One Iceberg table in its catalog as the driver reads it: :class:`TableView`, the base of
:class:`~pipeline.formats.iceberg.catalog_table.IcebergTable`.

It holds the table's identity and configuration, loads the table (an unreachable catalog
is retried for ``catalog_retry_s``, then fails with a one-line ``CatalogUnavailableError``
naming the catalog; :mod:`pipeline.formats.iceberg.retry`) and keeps the read view.

Reads: the read-only checks of one batch (epoch, committed offsets, is_committed, write
context) and the commit share one view of the table for up to ``read_cache_s``: the last
load, or the metadata the catalog returned for our own last append (so back-to-back
batches load the metadata once per commit, inside the catalog's commit, not three
times). The view only moves forward (:mod:`~pipeline.formats.iceberg.read_view`): it
always holds our own commits, and a view older than the table misses only other
writers' commits: an append
on it carries "main is still at this head" and the catalog refuses it; a refusal or a
skip decided on the view (fence, precondition, already committed) is decided again on a
fresh load before it counts (:meth:`TableView._confirmed`, used by
``IcebergTable._commit_once``). A failed attempt, a fence, an expiry or a table creation
drops the view.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from pipeline.columns import Column
from pipeline.errors import ConfigError
from pipeline.formats.iceberg.catalog import mask_uri
from pipeline.formats.iceberg.expiry import DEFAULT_TABLE_PROPERTIES, FORCED_TABLE_PROPERTIES
from pipeline.formats.iceberg.read_view import ReadView
from pipeline.formats.iceberg.retry import with_retries
from pipeline.formats.iceberg.schema import columns_of

log = logging.getLogger(__name__)
_T = TypeVar("_T")

__all__ = ["TableView"]


class TableView:
    """One Iceberg table of a catalog: its configuration, loads and the shared read view."""

    def __init__(
        self,
        catalog: Catalog,
        identifier: str | tuple[str, ...],
        schema: Schema,
        partition_spec: PartitionSpec,
        table_properties: Mapping[str, str] | None = None,
        *,
        location: str | None = None,
        max_commit_attempts: int = 8,
        catalog_retry_s: float = 120.0,
        max_snapshots: int = 30,
        expire_every: int = 10,
        read_cache_s: float = 1.0,
        columns: tuple[Column, ...] | None = None,
    ) -> None:
        """``columns``: the configured columns (with ``renamedFrom``), when ``schema`` was
        built from a configuration; schema evolution compares the table's with them."""
        self.catalog = catalog
        self.identifier: tuple[str, ...] = Catalog.identifier_to_tuple(identifier)
        if len(self.identifier) < 2:
            raise ConfigError(
                f"table identifier {identifier!r} needs a namespace, e.g. 'db.events'"
            )
        self.schema = schema
        self.columns = columns if columns is not None else columns_of(schema)
        self.partition_spec = partition_spec
        user = dict(table_properties or {})
        for key, value in FORCED_TABLE_PROPERTIES.items():
            if key in user and user[key] != value:
                log.warning(
                    "table property %s=%s ignored: %s (our own retry re-checks the fence)",
                    key,
                    user[key],
                    value,
                )
        self.table_properties: dict[str, str] = {
            **DEFAULT_TABLE_PROPERTIES,
            **user,
            **FORCED_TABLE_PROPERTIES,
        }
        self._location = location.rstrip("/") if location else None
        self.max_commit_attempts = max(1, max_commit_attempts)
        self.catalog_retry_s = max(0.0, catalog_retry_s)
        self.max_snapshots = max(2, max_snapshots)
        self.expire_every = max(1, expire_every)
        self.read_cache_s = max(0.0, read_cache_s)
        self._retry_scope = threading.local()  # set while a _with_retries loop runs
        self._read_view: ReadView[Table | None] = ReadView()  # forward only
        self._snapshots_at_commit = 0  # snapshots in the metadata our last commit saw

    @property
    def name(self) -> str:
        return ".".join(self.identifier)

    # -- state ---------------------------------------------------------------------------

    def load(self) -> Table | None:
        """The table as the catalog has it now, or None when it does not exist.

        An unreachable catalog is retried for ``catalog_retry_s`` (CatalogUnavailableError
        after that)."""

        def once() -> Table | None:
            try:
                return self.catalog.load_table(self.identifier)
            except NoSuchTableError:
                return None

        started = time.monotonic()  # the answer is at least as new as the table then
        table = self._with_retries("load", once)
        self._read_view.offer(started, table)
        return table

    def _cached_view(self) -> tuple[Table | None, bool]:
        """(table, cached): the view if younger than ``read_cache_s``, else a fresh load."""
        cached, table = self._read_view.get(self.read_cache_s)
        return (table, True) if cached else (self.load(), False)

    def _load_for_read(self) -> Table | None:
        """The table for read-only checks whose all-clear a fresh read confirms before
        anything halts on it (the coordinator's, :meth:`_commit_once`'s)."""
        return self._cached_view()[0]

    def refresh(self) -> None:
        """The next read of the table is a fresh load, and no load that started before
        now may become the view: a halting check decides on it, and a write that failed
        or moved the head leaves no stale view behind."""
        self._read_view.drop()

    def exists(self) -> bool:
        return self._load_for_read() is not None

    def _confirmed(
        self,
        check: Callable[[Table | None], _T],
        all_clear: Callable[[_T], bool] = lambda _: True,
    ) -> _T:
        """``check`` on the read view; a refusal it raises there, or an answer that is not
        ``all_clear``, is decided again on a fresh load before it counts (docs/design.md
        invariant 14)."""
        table, cached = self._cached_view()
        if cached:
            try:
                answer = check(table)
                if all_clear(answer):
                    return answer
            except Exception:
                pass
            self.refresh()
            table = self.load()
        return check(table)

    def _catalog_description(self) -> str:
        props = getattr(self.catalog, "properties", {}) or {}
        uri = mask_uri(str(props.get("uri", ""))) or "no uri"
        return f"catalog {self.catalog.name!r} ({props.get('type', '?')} at {uri})"

    def _with_retries(self, what: str, attempt_once: Callable[[], _T]) -> _T:
        """Run ``attempt_once`` until it succeeds: conflicts are retried
        ``max_commit_attempts`` times, an unreachable catalog for ``catalog_retry_s``."""
        if getattr(self._retry_scope, "active", False):
            return attempt_once()  # nested (a load inside a commit): the outer loop retries
        self._retry_scope.active = True
        try:
            return with_retries(
                what,
                attempt_once,
                table=self.name,
                catalog=self._catalog_description(),
                catalog_retry_s=self.catalog_retry_s,
                max_commit_attempts=self.max_commit_attempts,
            )
        finally:
            self._retry_scope.active = False
