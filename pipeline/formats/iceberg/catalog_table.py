"""Driver side: catalog access, the consumption checkpoint, and the one-snapshot commit.

Every commit is ONE Iceberg snapshot (a merge-append) whose summary carries the
consumption checkpoint (docs/design.md invariant 2): pipeline id, checkpoint incarnation, batch
id, writer epoch, this commit's offset ranges and the cumulative committed offsets. The
table alone therefore tells what was ingested; :meth:`IcebergTable.latest_checkpoint`
reads it back by walking the snapshot ancestry.

pyiceberg details this module relies on (pyiceberg 0.12):

* ``Transaction.commit_transaction`` retries a ``CommitFailedException`` by itself
  (``commit.retry.num-retries``, default 4) and rebases appends onto the new head without
  any check -- a fenced zombie's append would land. Tables created here get
  ``commit.retry.num-retries=0``; for tables created elsewhere the transaction runs on a
  local view of the metadata whose properties say 0 (only local: the catalog applies the
  snapshot updates to its own current metadata, the property is never persisted; see
  :func:`_append_view`, which also trims the history pyiceberg would deep-copy). Our own
  retry loop (tenacity) reloads the table, re-checks the writer epoch (a superseded
  writer stops even when the newer one committed its batch for it), looks for the batch
  in the ancestry (unknown outcome of an earlier attempt), and only then appends again.
  Conflicts are retried ``max_commit_attempts`` times; an unreachable catalog
  (connection refused or dropped, 5xx) is retried for ``catalog_retry_s`` seconds, table
  loads included, then fails with a one-line ``CatalogUnavailableError`` naming the
  catalog. A commit whose connection dropped mid-way may have landed: the next attempt
  finds it in the ancestry and does not append it again.
* ``merge_append()`` merges nothing unless the table property
  ``commit.manifest-merge.enabled`` is true; ``commit.manifest.min-count-to-merge``
  (default 100) bounds the manifests per snapshot. Tables created here get ``true`` and
  16; existing tables without these properties get the same values in the local view.
* A merge-append with zero files is allowed and still produces a snapshot (operation
  ``append``, no manifest change): an empty batch advances the committed offsets.
* A missing table is created in the same catalog operation as its first snapshot
  (``create_table_transaction``; docs/design.md invariant 9), at the location the workers'
  :class:`~pipeline.formats.iceberg.writer.WriteContext` used.
Bounded history: :mod:`pipeline.formats.iceberg.expiry`.

Reads: the read-only checks of one batch (epoch, committed offsets, is_committed, write
context) and the commit share one view of the table for up to ``read_cache_s``: the last
load, or the metadata the catalog returned for our own last append (so back-to-back
batches load the metadata once per commit, inside the catalog's commit, not three
times). The view only moves forward (:mod:`~pipeline.formats.iceberg.read_view`): it
always holds our own commits, and a view older than the table misses only other
writers' commits: an append
on it carries "main is still at this head" and the catalog refuses it; a refusal or a
skip decided on the view (fence, precondition, already committed) is decided again on a
fresh load before it counts (:meth:`IcebergTable._commit_once`). A failed attempt, a
fence, an expiry or a table creation drops the view.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    NoSuchTableError,
)
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from pipeline.columns import Column
from pipeline.columns.evolution import Change, describe
from pipeline.commit.checkpoint import (
    BATCH_END_KEY,
    BATCH_ID_KEY,
    FENCE_KEY,
    INCARNATION_KEY,
    PIPELINE_ID_KEY,
    CommitCheckpoint,
)
from pipeline.commit.checkpoint import parse_offsets as _parse_offsets
from pipeline.commit.fence import check_fence
from pipeline.commit.offsets import TopicPartition
from pipeline.errors import (
    CommitError,
    ConfigError,
)
from pipeline.formats.iceberg.catalog import load_catalog, mask_uri, one_line
from pipeline.formats.iceberg.expiry import (
    DEFAULT_TABLE_PROPERTIES,
    FORCED_TABLE_PROPERTIES,
    NOTHING_BEFORE,
    ancestry,
    append_view,
    carried_forward,
    expirable,
    expiry_view,
    summary_of,
)
from pipeline.formats.iceberg.read_view import ReadView
from pipeline.formats.iceberg.retry import with_retries
from pipeline.formats.iceberg.schema import apply_changes, columns_of, planned_changes
from pipeline.formats.iceberg.writer import WriteContext, deserialize_data_file

log = logging.getLogger(__name__)
_T = TypeVar("_T")

__all__ = ["IcebergTable", "load_catalog"]

# The ``ingest.*`` snapshot summary keys and the checkpoint codec (docs/design.md invariant 2):
# pipeline.commit.checkpoint (format-neutral, shared with the Hudi sink).


# ---------------------------------------------------------------------------------------
# Sink
# ---------------------------------------------------------------------------------------


class IcebergTable:
    """One Iceberg table as a commit target for one pipeline's batches."""

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

    def _ancestry(self, table: Table) -> Iterator[Snapshot]:
        """Main's whole retained history, head first: no count bound, however many
        foreign commits and compactions follow ours (docs/design.md invariant 12)."""
        return ancestry(table)

    def _latest(self, table: Table, pipeline_id: str) -> CommitCheckpoint | None:
        for snapshot in self._ancestry(table):
            summary = summary_of(snapshot)
            if summary.get(PIPELINE_ID_KEY) == pipeline_id:
                return CommitCheckpoint.from_summary(summary)
        return None

    def _find_batch(
        self,
        table: Table,
        pipeline_id: str,
        incarnation: str,
        batch_id: int,
        batch_end: Mapping[TopicPartition, int] | None = None,
    ) -> Snapshot | None:
        for snapshot in self._ancestry(table):
            summary = summary_of(snapshot)
            if (
                summary.get(PIPELINE_ID_KEY) != pipeline_id
                or summary.get(INCARNATION_KEY) != incarnation
                or FENCE_KEY in summary
            ):
                continue
            try:
                found = int(summary.get(BATCH_ID_KEY, ""))
            except ValueError:
                continue
            if found == batch_id:
                if batch_end is not None and BATCH_END_KEY in summary:
                    logged = _parse_offsets(summary[BATCH_END_KEY], BATCH_END_KEY)
                    if logged != {(t, p): o for (t, p), o in batch_end.items()}:
                        continue  # same id, other range: a restored older checkpoint
                return snapshot
            if found < batch_id:
                return None  # batches of one incarnation commit in order: no need to look further
        return None

    def latest_checkpoint(self, pipeline_id: str) -> CommitCheckpoint | None:
        """The newest checkpoint of ``pipeline_id`` in the current snapshot's ancestry."""
        table = self._load_for_read()
        return self._latest(table, pipeline_id) if table is not None else None

    def committed_offsets(self, pipeline_id: str) -> dict[TopicPartition, int]:
        """Cumulative next offsets ``{(topic, partition): offset}`` (empty: none)."""
        checkpoint = self.latest_checkpoint(pipeline_id)
        return dict(checkpoint.committed_offsets) if checkpoint is not None else {}

    def committed_snapshot_id(
        self,
        pipeline_id: str,
        incarnation: str,
        batch_id: int,
        batch_end: Mapping[TopicPartition, int] | None = None,
    ) -> int | None:
        """The snapshot that committed this batch, if any."""
        table = self._load_for_read()
        if table is None:
            return None
        snapshot = self._find_batch(table, pipeline_id, incarnation, batch_id, batch_end)
        return snapshot.snapshot_id if snapshot is not None else None

    def is_committed(
        self,
        pipeline_id: str,
        incarnation: str,
        batch_id: int,
        batch_end: Mapping[TopicPartition, int] | None = None,
    ) -> bool:
        """True when a snapshot in the ancestry committed (pipeline, incarnation, batch)
        -- with the same planned end offsets, when both sides know them."""
        return self.committed_snapshot_id(pipeline_id, incarnation, batch_id, batch_end) is not None

    # -- write ---------------------------------------------------------------------------

    def schema_changes(self) -> list[Change]:
        """What the configured columns change in the table's (none for a new table);
        SchemaChangeRefused, before any side effect, for what no restart may change."""
        return self._confirmed(
            lambda table: planned_changes(table, self.columns, self.name) if table else []
        )

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

    def evolve_schema(self) -> list[Change]:
        """Apply :meth:`schema_changes` in one catalog commit (atomic: a crash leaves the
        old schema or the new one); planned again on every attempt, so a restart, or a
        commit that lost a race, applies only what is still missing. The changes applied."""

        def once() -> list[Change]:
            table = self.load()
            changes = planned_changes(table, self.columns, self.name) if table else []
            if changes:
                assert table is not None
                with table.update_schema() as update:
                    apply_changes(update, changes)
                self.refresh()
            return changes

        return self._with_retries("schema update", once)

    def _check_schema(self, table: Table) -> None:
        """The table must have exactly the configured columns (evolved at start)."""
        if changes := planned_changes(table, self.columns, self.name):
            raise CommitError(
                f"table {self.name}'s columns changed under the running pipeline "
                f"({'; '.join(describe(c) for c in changes)}); restart it to evolve them"
            )

    def table_location(self) -> str:
        """Where the table lives (or will live: fixed once resolved for a new table)."""
        if self._location is None:
            table = self._load_for_read()
            if table is not None:
                self._location = table.location().rstrip("/")
            else:
                self._location = self._new_table_context("location-probe").table_location
        return self._location

    def _new_table_context(self, write_uuid: str) -> WriteContext:
        # creates the namespace and stages the create: catalog round trips, so they get
        # the same patience as a load (a pooled connection can die with a restarted catalog)
        return self._with_retries(
            "create staging",
            lambda: WriteContext.for_new_table(
                self.catalog,
                self.identifier,
                self.schema,
                self.partition_spec,
                self.table_properties,
                location=self._location,
                write_uuid=write_uuid,
            ),
        )

    def write_context(self, write_uuid: str) -> WriteContext:
        """What the workers need to stage files for the next commit."""

        def context_of(table: Table | None) -> WriteContext | None:
            if table is None:
                return None
            self._check_schema(table)
            return WriteContext.for_table(table, write_uuid)

        if (ctx := self._confirmed(context_of)) is not None:
            return ctx
        ctx = self._new_table_context(write_uuid)
        self._location = ctx.table_location
        return ctx

    # -- commit --------------------------------------------------------------------------

    def commit(
        self,
        data_files: list[bytes],
        checkpoint: CommitCheckpoint,
        *,
        precondition: Callable[[CommitCheckpoint | None], None] | None = None,
    ) -> int:
        """Append ``data_files`` in ONE snapshot carrying ``checkpoint``; its snapshot id.

        Idempotent: when the ancestry already holds this (pipeline, incarnation, batch),
        that snapshot's id is returned and nothing is appended. Fenced: when the table's
        latest checkpoint of this pipeline has a higher epoch, FencedError.
        ``precondition`` is called before every attempt with that latest checkpoint (None
        if none) and may raise to refuse the commit. A conflict with a concurrent commit
        is retried (reload, dedupe, fence check, append) up to ``max_commit_attempts``.
        A missing table is created by the same catalog commit. Zero files still commit a
        snapshot so the checkpoint advances.
        """
        files = [deserialize_data_file(blob) for blob in data_files]
        summary = checkpoint.to_summary()
        what = f"commit of batch {checkpoint.batch_id} ({checkpoint.incarnation})"
        started = time.monotonic()
        # every failed attempt drops the shared view (_commit_once); a success leaves
        # the catalog's answer as the next view
        snapshot_id = self._with_retries(
            what, lambda: self._commit_once(files, checkpoint, summary, precondition)
        )
        self._maybe_expire()
        log.info(
            "%s: %d files, %d records in %s as snapshot %d (%.3fs)",
            what,
            len(files),
            sum(f.record_count for f in files),  # this table's; the checkpoint counts the batch
            self.name,
            snapshot_id,
            time.monotonic() - started,
        )
        return snapshot_id

    def fence(self, pipeline_id: str, epoch: int, *, create: bool = False) -> int | None:
        """Claim the table for writer ``epoch`` of ``pipeline_id`` (docs/design.md invariant 7).

        Commits an empty snapshot that repeats the latest checkpoint (same committed
        offsets, no ranges, marked ``ingest.fence=true``) at the new epoch. It moves the
        table's head, so the in-flight commit of an older writer fails its catalog
        assertion, and that writer's retry then sees the newer epoch and raises
        FencedError. Returns the fence snapshot id; None when the table does not
        exist yet (the first commit creates it atomically; a losing creator retries and
        is fenced then) or already carries this epoch. FencedError when a newer
        epoch already committed.
        """

        def once() -> int | None:
            table = self.load()
            if table is None:
                if not create:
                    return None
                # An earlier run may still be alive and about to create the table with its
                # first commit: create it now, empty, carrying the fence. The zombie's
                # create then fails and its retry sees this epoch.
                marker = CommitCheckpoint(
                    pipeline_id=pipeline_id,
                    incarnation="",
                    batch_id=-1,
                    epoch=epoch,
                    ranges={},
                    committed_offsets={},
                    records=0,
                )
                return self._create_with_first_commit(
                    [], {**marker.to_summary(), **NOTHING_BEFORE, FENCE_KEY: "true"}
                )
            latest = self._latest(table, pipeline_id)
            if latest is not None and latest.epoch >= epoch:
                check_fence(pipeline_id, epoch, latest.epoch, f"fence of table {self.name}")
                return None  # this epoch already fenced it
            marker = CommitCheckpoint(
                pipeline_id=pipeline_id,
                incarnation=latest.incarnation if latest is not None else "",
                batch_id=latest.batch_id if latest is not None else -1,
                epoch=epoch,
                ranges={},
                committed_offsets=latest.committed_offsets if latest is not None else {},
                records=0,
            )
            fence_summary = {
                **marker.to_summary(),
                **carried_forward(table, pipeline_id),
                FENCE_KEY: "true",
            }
            return self._append(table, [], fence_summary)

        try:
            snapshot_id = self._with_retries(f"fence of {pipeline_id!r} at epoch {epoch}", once)
        finally:
            self.refresh()
        if snapshot_id is not None:
            log.info("fenced %s for %s at epoch %d", self.name, pipeline_id, epoch)
        return snapshot_id

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

    def _check_fence(
        self,
        latest: CommitCheckpoint | None,
        checkpoint: CommitCheckpoint,
        precondition: Callable[[CommitCheckpoint | None], None] | None,
    ) -> None:
        if latest is not None:
            where = f"commit to table {self.name} (its batch {latest.batch_id})"
            check_fence(checkpoint.pipeline_id, checkpoint.epoch, latest.epoch, where)
        if precondition is not None:
            precondition(latest)

    def _check_files(self, table: Table, files: list[DataFile]) -> None:
        spec_id = table.metadata.default_spec_id
        for f in files:
            try:
                file_spec = f.spec_id
            except AttributeError:
                continue
            if file_spec != spec_id:
                raise CommitError(
                    f"data file {f.file_path} was written for partition spec {file_spec} but "
                    f"table {self.name} now uses spec {spec_id}; the batch must be rewritten"
                )

    def _commit_once(
        self,
        files: list[DataFile],
        checkpoint: CommitCheckpoint,
        summary: dict[str, str],
        precondition: Callable[[CommitCheckpoint | None], None] | None,
    ) -> int:
        # A view under read_cache_s old (the batch's checks, or our previous commit's
        # result) is as good a base for an append as a fresh load: the catalog refuses
        # the append unless main is still at the view's head, and the retry then reloads.
        # A refusal or a skip is not checked by the catalog: it is decided again on a
        # fresh load before it counts (docs/design.md invariant 14).
        try:
            table, done = self._confirmed(
                lambda t: (t, self._decide(t, files, checkpoint, precondition)),
                all_clear=lambda decided: decided[1] is None,
            )
            if done is not None:
                log.info(
                    "batch %s (%s) of %s is already in %s (snapshot %d): not appended again",
                    checkpoint.batch_id,
                    checkpoint.incarnation,
                    checkpoint.pipeline_id,
                    self.name,
                    done.snapshot_id,
                )
                return done.snapshot_id
            if table is None:
                return self._create_with_first_commit(files, {**summary, **NOTHING_BEFORE})
            self._snapshots_at_commit = len(table.metadata.snapshots) + 1
            carried = carried_forward(table, checkpoint.pipeline_id)
            return self._append(table, files, {**summary, **carried})
        except BaseException:
            self.refresh()
            raise

    def _decide(
        self,
        table: Table | None,
        files: list[DataFile],
        checkpoint: CommitCheckpoint,
        precondition: Callable[[CommitCheckpoint | None], None] | None,
    ) -> Snapshot | None:
        """The checks of one commit attempt on ``table``: the snapshot that already holds
        the batch, None to append (or create), or the refusal raised."""
        if table is None:
            self._check_fence(None, checkpoint, precondition)
            return None
        latest = self._latest(table, checkpoint.pipeline_id)
        # a superseded writer stops even when a newer one committed its batch for it
        # (recovery recommits a paused writer's instant): it must not report success
        self._check_fence(latest, checkpoint, None)
        done = self._find_batch(
            table,
            checkpoint.pipeline_id,
            checkpoint.incarnation,
            checkpoint.batch_id,
            checkpoint.batch_end,
        )
        if done is not None:
            return done
        if precondition is not None:
            precondition(latest)
        self._check_files(table, files)
        return None

    # -- bounded history -----------------------------------------------------------------

    def _maybe_expire(self) -> None:
        """Expire old snapshots every ``expire_every`` commits (metadata only). Never fails
        the batch, which is committed already: a failed expiry is retried later."""
        if self._snapshots_at_commit < self.max_snapshots + self.expire_every:
            return
        self._snapshots_at_commit = 0
        try:
            table = self.load()
            if table is None:
                return
            expired = expirable(table, self.max_snapshots)
            if expired:
                view = expiry_view(table, set(expired))
                view.maintenance.expire_snapshots().by_ids(expired).commit()
                log.info("%s: expired %d old snapshots (metadata only)", self.name, len(expired))
        except Exception as e:  # housekeeping: retried after more commits
            log.warning("%s: snapshot expiry failed, retried later: %s", self.name, one_line(e))
        finally:
            self.refresh()

    def _append(self, table: Table, files: list[DataFile], summary: dict[str, str]) -> int:
        """One merge-append snapshot on top of ``table``'s head; no pyiceberg retry."""
        txn = append_view(table).transaction()
        with txn.update_snapshot(snapshot_properties=summary).merge_append() as append:
            for f in files:
                append.append_data_file(f)
            snapshot_id = append.snapshot_id
        # the view now holds the catalog's metadata as our commit left it: the next
        # batch's checks (and commit) start from it instead of loading again
        committed = txn.commit_transaction()
        self._read_view.offer(time.monotonic(), committed)
        return snapshot_id

    def _create_with_first_commit(self, files: list[DataFile], summary: dict[str, str]) -> int:
        location = self.table_location()
        self.catalog.create_namespace_if_not_exists(Catalog.namespace_from(self.identifier))
        txn = self.catalog.create_table_transaction(
            self.identifier,
            self.schema,
            location=location,
            partition_spec=self.partition_spec,
            properties=dict(self.table_properties),
        )
        with txn.update_snapshot(snapshot_properties=summary).merge_append() as append:
            for f in files:
                append.append_data_file(f)
            snapshot_id = append.snapshot_id
        txn.commit_transaction()
        self.refresh()
        log.info("created table %s at %s with its first commit", self.name, location)
        return snapshot_id
