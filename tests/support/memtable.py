"""An in-memory table and fake workers for Spark-free tests of the commit protocol.

``MemTable`` implements the coordinator's ``TableCommitter`` protocol the way the Iceberg
adapter (``pipeline/formats/iceberg/table.py``) behaves, minus Parquet and the catalog:

* A table is a list of snapshots; each adds files and carries a checkpoint (the summary).
  Fence snapshots add nothing and repeat the latest committed offsets at a new epoch.
* Files live in a "physical" store (path -> size and records) that exists independently
  of snapshots: workers stage files there before any commit, rollback deletes them, and a
  snapshot may reference a file that was deleted (``dangling``) -- the corruption the
  protocol must never cause.
* Commits are optimistic: an attempt loads the head, dedupes, checks the fence, then
  compare-and-sets the head. A commit that landed in between makes the attempt retry from
  the load (``rebase_on_conflict=True`` models pyiceberg's own retry instead, which
  re-applies the append onto the new head without any check).
* ``exists=False`` models a table the first commit creates: until then ``fence`` is a
  no-op, like the real adapter's.

Every operation touching shared state first calls ``self.point(label)``; tests replace it
to interleave writers step by step (see ``StepScheduler`` in the tests) or to inject a
concurrent commit at a precise moment (``on``).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from pipeline.commit.checkpoint import CommitCheckpoint
from pipeline.commit.instant import BatchIdentity
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.commit.types import PartitionStats, StagedBatch
from pipeline.errors import CommitError, FencedError

Rec = tuple[str, int, int]  # (topic, partition, offset)


class CommitConflict(Exception):
    """The head moved between load and compare-and-set (CommitFailedException)."""


@dataclass(frozen=True)
class Snapshot:
    id: int
    parent: int | None
    files: tuple[str, ...]
    checkpoint: CommitCheckpoint
    fence: bool = False


@dataclass
class PhysicalFile:
    size: int
    records: tuple[Rec, ...]


@dataclass(frozen=True)
class CommitAttempt:
    """What one ``commit`` call did: appended | duplicate | fenced (for assertions)."""

    epoch: int
    incarnation: str
    batch_id: int
    result: str
    head_before: int | None


def _no_point(label: str) -> None:
    return None


class MemTable:
    """One table (main or dead-letter) shared by any number of coordinators."""

    def __init__(
        self,
        name: str = "main",
        *,
        exists: bool = True,
        max_attempts: int = 8,
        rebase_on_conflict: bool = False,
    ) -> None:
        self.name = name
        self.exists = exists
        self.max_attempts = max_attempts
        self.rebase_on_conflict = rebase_on_conflict
        self.snapshots: list[Snapshot] = []
        self.physical: dict[str, PhysicalFile] = {}
        self.attempts: list[CommitAttempt] = []
        self.begun: list[str] = []  # instants announced by begin()
        self.aborted: list[str] = []  # instants rolled back by abort()
        self.point: Callable[[str], None] = _no_point
        self._hooks: dict[str, list[Callable[[], None]]] = {}
        self._ids = itertools.count(1)
        self._tokens = itertools.count()
        self._lock = threading.RLock()

    # -- test hooks ------------------------------------------------------------------
    def on(self, label: str, fn: Callable[[], None]) -> None:
        """Run ``fn`` once, the next time an operation reaches ``label`` (e.g. a concurrent
        commit between an attempt's load and its compare-and-set: ``commit-cas``)."""
        self._hooks.setdefault(label, []).append(fn)

    def _at(self, label: str) -> None:
        self.point(label)
        hooks = self._hooks.pop(label, [])
        for fn in hooks:
            fn()

    # -- physical storage (workers) --------------------------------------------------
    def stage(self, write_id: str, records: Iterable[Rec]) -> bytes:
        """A worker writes a data file for ``write_id``; returns its descriptor."""
        recs = tuple(records)
        self._at("stage")
        with self._lock:
            path = f"mem://{self.name}/data/00000-00000-{write_id}-{next(self._tokens):05d}.parquet"
            size = 100 + 16 * len(recs)
            self.physical[path] = PhysicalFile(size, recs)
        return json.dumps({"path": path, "size": size, "records": len(recs)}).encode()

    def describe(self, descriptor: bytes) -> tuple[str, int, int]:
        d = json.loads(descriptor)
        return str(d["path"]), int(d["size"]), int(d["records"])

    def file_size(self, path: str) -> int | None:
        self._at("file_size")
        with self._lock:
            f = self.physical.get(path)
            return f.size if f is not None else None

    def delete_files(self, paths: Iterable[str]) -> list[str]:
        paths = list(paths)
        self._at("delete_files")
        deleted = []
        with self._lock:
            for p in paths:
                if self.physical.pop(p, None) is not None:
                    deleted.append(p)
        return deleted

    def begin(self, instant: str) -> None:
        """Like Iceberg: no pending state of its own (recorded for assertions)."""
        with self._lock:
            self.begun.append(instant)

    def abort(self, instant: str) -> None:
        with self._lock:
            self.aborted.append(instant)

    def orphan_files(self, write_id: str) -> list[str]:
        self._at("orphan_files")
        marker = f"-{write_id}-"
        with self._lock:
            return sorted(p for p in self.physical if marker in p.rsplit("/", 1)[-1])

    # -- reading the table -----------------------------------------------------------
    def _latest(self, pipeline_id: str) -> CommitCheckpoint | None:
        for s in reversed(self.snapshots):
            if s.checkpoint.pipeline_id == pipeline_id:
                return s.checkpoint
        return None

    def _find_batch(
        self,
        pipeline_id: str,
        incarnation: str,
        batch_id: int,
        batch_end: Mapping[TopicPartition, int] | None,
    ) -> Snapshot | None:
        # the adapter's ancestry walk: fences skipped, planned end compared when both sides
        # know it (a restored checkpoint reuses batch ids), early stop included
        for s in reversed(self.snapshots):
            cp = s.checkpoint
            if s.fence or cp.pipeline_id != pipeline_id or cp.incarnation != incarnation:
                continue
            if cp.batch_id == batch_id:
                if (
                    batch_end is not None
                    and cp.batch_end is not None
                    and dict(cp.batch_end) != dict(batch_end)
                ):
                    continue
                return s
            if cp.batch_id < batch_id:
                return None
        return None

    def refresh(self) -> None:
        """Every read is of the shared state itself: nothing to drop."""

    def is_committed(self, batch: BatchIdentity, end: PartitionOffsets | None = None) -> bool:
        self._at("is_committed")
        with self._lock:
            return (
                self._find_batch(batch.pipeline_id, batch.incarnation, batch.batch_id, end)
                is not None
            )

    def committed_offsets(self, pipeline_id: str) -> PartitionOffsets | None:
        self._at("committed_offsets")
        with self._lock:
            cp = self._latest(pipeline_id)
            return PartitionOffsets(cp.committed_offsets) if cp is not None else None

    def latest_epoch(self, pipeline_id: str) -> int | None:
        self._at("latest_epoch")
        with self._lock:
            cp = self._latest(pipeline_id)
            return cp.epoch if cp is not None else None

    # -- committing ------------------------------------------------------------------
    def _head(self) -> int | None:
        return self.snapshots[-1].id if self.snapshots else None

    def _cas(self, base: int | None, base_exists: bool, snap: Snapshot) -> None:
        with self._lock:
            if self.exists != base_exists or self._head() != base:
                raise CommitConflict(f"{self.name}: head moved from {base} to {self._head()}")
            self.exists = True
            self.snapshots.append(snap)

    def _snapshot(
        self, files: tuple[str, ...], cp: CommitCheckpoint, parent: int | None, fence: bool = False
    ) -> Snapshot:
        return Snapshot(next(self._ids), parent, files, cp, fence)

    def commit(self, files: list[bytes], checkpoint: CommitCheckpoint) -> None:
        paths = tuple(self.describe(d)[0] for d in files)
        for _ in range(self.max_attempts):
            self._at("commit-load")
            with self._lock:
                base, base_exists = self._head(), self.exists
                if base_exists:
                    done = self._find_batch(
                        checkpoint.pipeline_id,
                        checkpoint.incarnation,
                        checkpoint.batch_id,
                        checkpoint.batch_end,
                    )
                    if done is not None:
                        self._record(checkpoint, "duplicate", base)
                        return
                latest = self._latest(checkpoint.pipeline_id)
                if latest is not None and latest.epoch > checkpoint.epoch:
                    self._record(checkpoint, "fenced", base)
                    raise FencedError(
                        f"table {self.name} has commits of pipeline {checkpoint.pipeline_id!r} "
                        f"at writer epoch {latest.epoch}; this writer holds epoch "
                        f"{checkpoint.epoch} and must stop"
                    )
                snap = self._snapshot(paths, checkpoint, base)
            self._at("commit-cas")
            try:
                self._cas(base, base_exists, snap)
            except CommitConflict:
                if not self.rebase_on_conflict:
                    continue  # reload, dedupe and fence-check again
                with self._lock:  # pyiceberg's own retry: re-apply onto the new head
                    self.exists = True
                    self.snapshots.append(self._snapshot(paths, checkpoint, self._head()))
            self._record(checkpoint, "appended", base)
            return
        raise CommitError(f"commit to {self.name}: too many conflicts")

    def _record(self, cp: CommitCheckpoint, result: str, head: int | None) -> None:
        with self._lock:
            self.attempts.append(CommitAttempt(cp.epoch, cp.incarnation, cp.batch_id, result, head))

    def fence(self, pipeline_id: str, epoch: int, *, create: bool = False) -> None:
        for _ in range(self.max_attempts):
            self._at("fence-load")
            with self._lock:
                base_exists = self.exists
                if not base_exists and not create:
                    return  # the first commit creates the table (adapter: returns None)
                base = self._head() if base_exists else None
                latest = self._latest(pipeline_id)
                if latest is not None and latest.epoch >= epoch:
                    if latest.epoch > epoch:
                        raise FencedError(
                            f"cannot fence table {self.name} at epoch {epoch}: pipeline "
                            f"{pipeline_id!r} already committed at epoch {latest.epoch}"
                        )
                    return
                marker = CommitCheckpoint(
                    pipeline_id=pipeline_id,
                    incarnation=latest.incarnation if latest is not None else "",
                    batch_id=latest.batch_id if latest is not None else -1,
                    epoch=epoch,
                    ranges={},
                    committed_offsets=latest.committed_offsets
                    if latest is not None
                    else PartitionOffsets(),
                    records=0,
                )
                snap = self._snapshot((), marker, base, fence=True)
            self._at("fence-cas")
            try:
                self._cas(base, base_exists, snap)
                return
            except CommitConflict:
                continue
        raise CommitError(f"fence of {self.name}: too many conflicts")

    # -- assertions ------------------------------------------------------------------
    def referenced(self) -> list[str]:
        return [p for s in self.snapshots for p in s.files]

    def dangling(self) -> list[str]:
        """Files the table references that are gone: readers would fail (data loss)."""
        return sorted(p for p in self.referenced() if p not in self.physical)

    def orphans(self) -> list[str]:
        """Staged files no snapshot references."""
        ref = set(self.referenced())
        return sorted(p for p in self.physical if p not in ref)

    def rows(self) -> list[Rec]:
        """The table contents: records of every referenced file (duplicates kept)."""
        out: list[Rec] = []
        for p in self.referenced():
            f = self.physical.get(p)
            if f is None:
                raise AssertionError(f"{self.name} references missing file {p}")
            out.extend(f.records)
        return sorted(out)

    def commits(self, pipeline_id: str = "p1") -> list[CommitCheckpoint]:
        """Checkpoints of data commits (fences excluded), oldest first."""
        return [
            s.checkpoint
            for s in self.snapshots
            if not s.fence and s.checkpoint.pipeline_id == pipeline_id
        ]


# ---------------------------------------------------------------------------------------
# Fake Kafka and workers
# ---------------------------------------------------------------------------------------


@dataclass
class FakeKafka:
    """Partition -> offsets present (gaps allowed: compaction, transaction markers).

    ``bad`` records fail decoding and go to the dead-letter table."""

    logs: dict[TopicPartition, list[int]]
    bad: set[Rec] = field(default_factory=set)

    def read(self, tp: TopicPartition, start: int, end: int) -> list[int]:
        return [o for o in self.logs.get(tp, []) if start <= o < end]

    def records(self, end: Mapping[TopicPartition, int], start: int = 0) -> list[Rec]:
        return sorted(
            (tp.topic, tp.partition, o) for tp, e in end.items() for o in self.read(tp, start, e)
        )

    def good(self, end: Mapping[TopicPartition, int]) -> list[Rec]:
        return [r for r in self.records(end) if r not in self.bad]

    def dead(self, end: Mapping[TopicPartition, int]) -> list[Rec]:
        return [r for r in self.records(end) if r in self.bad]


@dataclass
class WriteCall:
    write_id: str
    drop_below: PartitionOffsets
    files: list[str]


class FakeWorkers:
    """Builds the coordinator's ``write(write_id, drop_below)`` for one batch.

    The write "reads" ``[read_from, end)`` of every partition from the fake log (Spark's
    input partitions), drops offsets below ``drop_below`` (counted), stages main-table
    and dead-letter files (up to ``files_per_partition`` each) and returns the
    ``StagedBatch`` with per-partition statistics like the Spark workers do.
    """

    def __init__(
        self,
        kafka: FakeKafka,
        main: MemTable,
        dead_letter: MemTable | None,
        files_per_partition: int = 2,
    ) -> None:
        self.kafka = kafka
        self.main = main
        self.dead_letter = dead_letter
        self.files_per_partition = files_per_partition
        self.calls: list[WriteCall] = []

    def for_batch(
        self,
        read_from: Mapping[TopicPartition, int] | None,
        end: Mapping[TopicPartition, int],
    ) -> Callable[[str, PartitionOffsets], StagedBatch]:
        def write(write_id: str, drop_below: PartitionOffsets) -> StagedBatch:
            call = WriteCall(write_id, drop_below, [])
            self.calls.append(call)
            staged = StagedBatch()
            for tp, e in sorted(end.items()):
                s = (read_from or {}).get(tp, 0)
                offsets = self.kafka.read(tp, s, e)
                if not offsets:
                    continue
                floor = drop_below.get(tp)
                kept = [o for o in offsets if floor is None or o >= floor]
                recs = [(tp.topic, tp.partition, o) for o in kept]
                good = [r for r in recs if r not in self.kafka.bad]
                bad = [r for r in recs if r in self.kafka.bad]
                staged.data_files += self._stage(self.main, write_id, good, call)
                if bad:
                    assert self.dead_letter is not None, "dead letters but no dead-letter table"
                    staged.dead_letter_files += self._stage(self.dead_letter, write_id, bad, call)
                    staged.dead_letter_records += len(bad)
                staged.stats.append(
                    PartitionStats(
                        tp.topic,
                        tp.partition,
                        min(offsets),
                        max(offsets),
                        len(kept),
                        len(offsets) - len(kept),
                    )
                )
            return staged

        return write

    def _stage(
        self, table: MemTable, write_id: str, recs: list[Rec], call: WriteCall
    ) -> list[bytes]:
        if not recs:
            return []
        n = min(self.files_per_partition, len(recs))
        chunks = [recs[i::n] for i in range(n)]
        out = []
        for chunk in chunks:
            d = table.stage(write_id, chunk)
            call.files.append(table.describe(d)[0])
            out.append(d)
        return out

    def written_by(self, instants: Iterable[str]) -> set[str]:
        """Files staged for these instants (write ids are ``<instant>-<pipeline tag>``)."""
        ids = set(instants)
        return {
            f
            for c in self.calls
            if c.write_id in ids or c.write_id.split("-", 1)[0] in ids
            for f in c.files
        }
