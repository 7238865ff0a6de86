"""Iceberg table maintenance: bin-pack compaction of small data files, file statistics,
and orphan cleanup (:mod:`pipeline.formats.iceberg.orphans`), as one
:class:`~pipeline.commit.maintenance.TableMaintenance`.

Operators of one compaction run (the invariants are in :mod:`pipeline.commit.maintenance`):

1. **plan** -- the head's live data files (``plan_files``), per partition of the current
   spec; files below the policy's small-file size are packed into groups of at most the
   target size (:func:`~pipeline.commit.maintenance.bin_pack`).
2. **write** -- each group is read with pyiceberg's ``ArrowScan`` (table column names and
   types, whatever the file schema) and written by the workers' own writer
   (:func:`~pipeline.formats.iceberg.writer.write_data_files`) as one file, under a
   ``compact-<uuid>`` write id. Nothing references these files yet.
3. **commit** -- one ``replace`` snapshot (Iceberg's operation for a rewrite that changes
   no data: streaming and incremental readers skip it) that deletes the inputs and adds
   the outputs, summary ``ingest.compaction=true`` and no ``ingest.*`` pipeline keys, so
   the latest checkpoint read through the ancestry is the one before it. Requirement:
   ``main`` is still at the head the plan saw (the catalog checks it), with pyiceberg's
   own retry off (:func:`~pipeline.formats.iceberg.expiry.append_view`).
4. **re-plan on conflict** -- the catalog refused (an ingest append or a fence moved
   ``main``): reload; when every input is still live, commit the same output on the new
   head; else delete the output and plan again. An ingest commit that lost to us simply
   retries (it re-checks dedupe and fence first), so ingest never waits for compaction.

Outputs are deleted only when the commit certainly did not land (refused, fenced, or
every attempt refused); after an unknown outcome they stay, and orphan cleanup takes them
once they are older than its safety interval.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile
from pyiceberg.table import FileScanTask, Table

from pipeline.commit.maintenance import (
    COMPACTION_KEY,
    CompactionPolicy,
    CompactionResult,
    FileStats,
    OrphanResult,
    WriterFence,
    bin_pack,
)
from pipeline.errors import FencedError
from pipeline.formats.iceberg.catalog_table import IcebergTable
from pipeline.formats.iceberg.data_file_codec import deserialize_data_file
from pipeline.formats.iceberg.expiry import append_view
from pipeline.formats.iceberg.orphans import data_location, list_data_files, referenced_paths
from pipeline.formats.iceberg.pyiceberg_internals import replace_files
from pipeline.formats.iceberg.write_context import WriteContext
from pipeline.formats.iceberg.writer import write_data_files
from pipeline.formats.orphans import delete_stored, path_key, sweep
from pipeline.storage.fs import filesystem_for

log = logging.getLogger(__name__)

__all__ = ["IcebergMaintenance", "plan_compaction"]

#: ``written`` larger than this per file is never produced by the size split (one group
#: becomes one file; groups are bounded by the target on disk already).
_ONE_FILE = 1 << 62


def live_data_files(table: Table) -> list[DataFile]:
    """The data files a reader of the head opens."""
    if table.current_snapshot() is None:
        return []
    return [task.file for task in table.scan().plan_files()]


def plan_compaction(
    files: Iterable[DataFile], spec_id: int, policy: CompactionPolicy
) -> list[list[DataFile]]:
    """Groups of small files of the current partition spec, one output file each."""
    by_partition: dict[tuple[Any, ...], list[DataFile]] = {}
    for f in files:
        if f.spec_id != spec_id or f.file_size_in_bytes >= policy.small_below:
            continue
        key = tuple(f.partition[i] for i in range(len(f.partition)))
        by_partition.setdefault(key, []).append(f)
    groups: list[list[DataFile]] = []
    for _, small in sorted(by_partition.items(), key=lambda kv: repr(kv[0])):
        if len(small) < policy.min_input_files:
            continue
        by_path = {f.file_path: f for f in small}
        sizes = [(f.file_path, int(f.file_size_in_bytes)) for f in small]
        groups.extend(
            [by_path[p] for p in group] for group in bin_pack(sizes, policy.target_file_size_bytes)
        )
    return groups


class IcebergMaintenance:
    """Compaction, file statistics and orphan cleanup of one Iceberg table."""

    def __init__(
        self, table: IcebergTable, properties: dict[str, str], *, max_attempts: int = 4
    ) -> None:
        self.iceberg = table
        self.properties = properties  # FileIO-style (s3.*) for deletes and listings
        self.max_attempts = max(1, max_attempts)

    @property
    def name(self) -> str:
        return f"table {self.iceberg.name}"

    def file_stats(self) -> FileStats:
        table = self.iceberg.load()
        files = live_data_files(table) if table is not None else []
        return FileStats(self.name, len(files), sum(int(f.file_size_in_bytes) for f in files))

    def compaction_commits(self) -> list[str]:
        table = self.iceberg.load()
        if table is None:
            return []
        snapshots = sorted(table.snapshots(), key=lambda s: s.sequence_number or 0)
        return [
            str(s.snapshot_id)
            for s in snapshots
            if s.summary is not None and s.summary.get(COMPACTION_KEY) == "true"
        ]

    # -- compaction ----------------------------------------------------------------------

    def compact(
        self,
        policy: CompactionPolicy,
        fence: WriterFence | None = None,
        on_step: Callable[[str], None] | None = None,
    ) -> CompactionResult:
        step = on_step or (lambda _: None)
        inputs: list[DataFile] = []
        written: list[DataFile] = []
        try:
            for attempt in range(1, self.max_attempts + 1):
                table = self.iceberg.load()
                if table is None:
                    return CompactionResult(self.name)
                self._check_fence(fence)
                if written and not self._still_live(table, inputs):
                    # another compaction replaced some input: start over
                    self._delete(written)
                    inputs, written = [], []
                if not written:
                    groups = plan_compaction(
                        live_data_files(table), table.metadata.default_spec_id, policy
                    )
                    if not groups:
                        return CompactionResult(self.name, attempts=attempt - 1)
                    inputs = [f for group in groups for f in group]
                    written = self._write(table, groups)
                    step("written")
                try:
                    snapshot_id = self._commit(table, inputs, written)
                except CommitFailedException as e:
                    log.info("%s: compaction lost a race (%s); re-planning", self.name, e)
                    continue
                result = CompactionResult(
                    self.name,
                    rewritten_files=len(inputs),
                    written_files=len(written),
                    rewritten_bytes=sum(int(f.file_size_in_bytes) for f in inputs),
                    written_bytes=sum(int(f.file_size_in_bytes) for f in written),
                    commit=str(snapshot_id),
                    attempts=attempt,
                )
                written = []  # committed: theirs now
                step("committed")
                log.info(
                    "%s: compacted %d files (%d bytes) into %d as snapshot %d",
                    self.name,
                    result.rewritten_files,
                    result.rewritten_bytes,
                    result.written_files,
                    snapshot_id,
                )
                return result
            log.warning(
                "%s: compaction gave up after %d refused commits", self.name, self.max_attempts
            )
            return CompactionResult(self.name, attempts=self.max_attempts)
        except (FencedError, CommitFailedException):
            raise
        finally:
            if written:  # never committed (refused, fenced or given up): nobody needs them
                self._delete(written)

    def _check_fence(self, fence: WriterFence | None) -> None:
        if fence is not None:
            latest = self.iceberg.latest_checkpoint(fence.pipeline_id)
            fence.check(latest.epoch if latest else None, f"compaction of {self.name}")

    @staticmethod
    def _still_live(table: Table, inputs: list[DataFile]) -> bool:
        live = {f.file_path for f in live_data_files(table)}
        return all(f.file_path in live for f in inputs)

    def _write(self, table: Table, groups: list[list[DataFile]]) -> list[DataFile]:
        ctx = dataclasses.replace(
            WriteContext.for_table(table, f"compact-{uuid.uuid4().hex[:16]}"),
            target_file_size_bytes=_ONE_FILE,
        )
        schema = table.schema()
        written: list[DataFile] = []
        try:
            for task_id, group in enumerate(groups):
                scan = ArrowScan(table.metadata, table.io, schema, AlwaysTrue())
                batches = scan.to_record_batches([FileScanTask(f) for f in group])
                blobs = write_data_files(ctx, batches, task_id)
                written.extend(deserialize_data_file(b) for b in blobs)
        except BaseException:
            self._delete(written)
            raise
        return written

    def _commit(self, table: Table, inputs: list[DataFile], written: list[DataFile]) -> int:
        view = append_view(table)
        txn = view.transaction()
        with replace_files(txn, view.io, {COMPACTION_KEY: "true"}) as rewrite:
            for f in inputs:
                rewrite.delete_data_file(f)
            for f in written:
                rewrite.append_data_file(f)
            snapshot_id = rewrite.snapshot_id
        try:
            txn.commit_transaction()
        finally:
            self.iceberg.refresh()  # the head moved (or may have)
        return snapshot_id

    def _delete(self, files: list[DataFile]) -> None:
        for f in files:
            fs, path = filesystem_for(f.file_path, self.properties)
            try:
                fs.delete_file(path)
            except FileNotFoundError:
                pass
            except OSError as e:  # an orphan now: the cleanup takes it later
                log.warning("%s: could not delete %s: %s", self.name, f.file_path, e)

    # -- orphans -------------------------------------------------------------------------

    def remove_orphans(
        self, older_than_s: float, protected: Iterable[str] = (), *, dry_run: bool = False
    ) -> OrphanResult:
        table = self.iceberg.load()
        if table is None:
            return OrphanResult(self.name, dry_run=dry_run)
        # list before reading the references: a file committed in between is referenced
        # by then; one staged in between is younger than any safety interval
        stored = list_data_files(data_location(table), self.properties)
        table = self.iceberg.load()
        if table is None:
            return OrphanResult(self.name, dry_run=dry_run)
        keep = {path_key(p) for p in referenced_paths(table)} | {path_key(p) for p in protected}
        return sweep(
            self.name,
            stored,
            held=lambda f: path_key(f.uri) in keep,
            uri=lambda f: f.uri,
            delete=delete_stored(self.properties),
            older_than_s=older_than_s,
            now=time.time(),
            dry_run=dry_run,
        )
