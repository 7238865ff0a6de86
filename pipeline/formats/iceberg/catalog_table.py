"""Driver side: :class:`IcebergTable`, one Iceberg table as a commit target, with the
one-snapshot commit and the fence.

Every commit is ONE Iceberg snapshot (a merge-append) whose summary carries the
consumption checkpoint (docs/design.md invariant 2): pipeline id, checkpoint incarnation, batch
id, writer epoch, this commit's offset ranges and the cumulative committed offsets. The
table alone therefore tells what was ingested: the reads are
:class:`~pipeline.formats.iceberg.checkpoint_reads.SnapshotCheckpoints`, the loads and the
shared read view :class:`~pipeline.formats.iceberg.table_view.TableView`, schema evolution
:class:`~pipeline.formats.iceberg.schema_evolution.SchemaEvolution`, the workers' write
contexts :class:`~pipeline.formats.iceberg.write_contexts.WriteContexts`.

pyiceberg details this module relies on (pyiceberg 0.12):

* ``Transaction.commit_transaction`` retries a ``CommitFailedException`` by itself
  (``commit.retry.num-retries``, default 4) and rebases appends onto the new head without
  any check -- a fenced zombie's append would land. Tables created here get
  ``commit.retry.num-retries=0``; for tables created elsewhere the transaction runs on a
  local view of the metadata whose properties say 0 (only local: the catalog applies the
  snapshot updates to its own current metadata, the property is never persisted; see
  :func:`~pipeline.formats.iceberg.expiry.append_view`, which also trims the history
  pyiceberg would deep-copy). Our own
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
  :class:`~pipeline.formats.iceberg.write_context.WriteContext` used.
Bounded history: :mod:`pipeline.formats.iceberg.expiry`.

A commit decided on the read view is checked by the catalog (main must still be at the
view's head); a refusal or a skip decided on it (fence, precondition, already committed)
is decided again on a fresh load before it counts (:meth:`IcebergTable._commit_once`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pyiceberg.catalog import Catalog
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from pipeline.commit.checkpoint import FENCE_KEY, CommitCheckpoint
from pipeline.commit.fence import check_fence
from pipeline.errors import CommitError, one_line
from pipeline.formats.iceberg.catalog import load_catalog
from pipeline.formats.iceberg.checkpoint_reads import SnapshotCheckpoints
from pipeline.formats.iceberg.data_file_codec import deserialize_data_file
from pipeline.formats.iceberg.expiry import (
    NOTHING_BEFORE,
    append_view,
    carried_forward,
    expirable,
    expiry_view,
)
from pipeline.formats.iceberg.write_contexts import WriteContexts

log = logging.getLogger(__name__)

__all__ = ["IcebergTable", "load_catalog"]


class IcebergTable(SnapshotCheckpoints, WriteContexts):
    """One Iceberg table as a commit target for one pipeline's batches."""

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
