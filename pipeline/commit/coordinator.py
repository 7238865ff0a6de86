"""The batch coordinator: a two-phase instant commit per Spark batch (driver side).

Spark-free: unit tests drive it with in-memory tables and journals; the Spark adapter
supplies ``write`` (the workers) and the format adapters supply ``TableCommitter``s.

Operators, per batch (exactly-once mode)
  1. recover  -- first batch of a run only: every pending instant left by an earlier
                 run is finished. Already in the table → marked completed. INFLIGHT, of
                 the batch Spark is replaying (same incarnation, batch id and end
                 offsets), every staged file present with its size → RECOMMITTED without
                 running the workers. Anything else → ROLLED BACK: listed and orphaned
                 files deleted, then the rollback recorded. (DESIGN invariant 4)
  2. dedupe   -- (incarnation, batch id) already committed → skipped. (invariant 5)
  3. overlap  -- offsets below the table's committed offsets are dropped by the workers
                 and counted, or the batch fails under ``on_overlap="fail"``.
  4. mint     -- instant time T > every instant; REQUESTED(batch, epoch, planned offsets).
  5. write    -- workers stage files named with T; nothing visible.
  6. precommit-- INFLIGHT(T): the complete staged-file list and the checkpoint to commit.
  7. commit   -- dead letters, then ONE main-table commit carrying the checkpoint, both
                 refused when a newer writer epoch owns the table (invariant 7); then
                 COMPLETED(T).

Invariants this code keeps (each has a test)
  * The main-table commit is the only point where a batch becomes visible, and it happens
    at most once per (incarnation, batch id): every path to it checks the table first.
  * A crash leaves the table at the previous commit plus at most one pending instant,
    and the next run's recovery finishes or removes it before anything new is written.
  * Rollback never deletes a file the table references: an instant found in the table is
    marked completed instead.
  * Cumulative committed offsets never move backwards.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from pipeline.commit.faults import FaultPoints
from pipeline.commit.instant import (
    BatchIdentity,
    Inflight,
    Instant,
    InstantState,
    Requested,
    StagedFile,
)
from pipeline.commit.journal import AlreadyExists, InstantTimeline
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.errors import CommitError, FencedError, OverlapError

log = logging.getLogger(__name__)

MAIN, DEAD_LETTER = "main", "dead_letter"


@dataclass(frozen=True)
class PartitionStats:
    """What the workers saw for one partition: offsets, records written, overlap dropped."""

    topic: str
    partition: int
    min_offset: int
    max_offset: int
    records: int
    dropped: int = 0


@dataclass
class StagedBatch:
    """Workers' answer: staged (invisible) files and what they cover."""

    data_files: list[bytes] = field(default_factory=list)
    dead_letter_files: list[bytes] = field(default_factory=list)
    stats: list[PartitionStats] = field(default_factory=list)
    dead_letter_records: int = 0

    @property
    def records(self) -> int:
        """Records written (main + dead letters), overlap excluded."""
        return sum(s.records for s in self.stats)

    @property
    def dropped(self) -> int:
        return sum(s.dropped for s in self.stats)


@dataclass(frozen=True)
class Checkpoint:
    """The consumption checkpoint recorded with a commit (DESIGN invariant 2)."""

    pipeline_id: str
    incarnation: str
    batch_id: int
    epoch: int
    ranges: dict[TopicPartition, tuple[int, int]]
    committed: PartitionOffsets
    records: int
    dead_letter_records: int = 0
    data_loss: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    instant: str | None = None
    batch_end: PartitionOffsets | None = None  # planned end offsets: part of batch identity


class TableCommitter(Protocol):
    """What the coordinator needs from a table-format adapter."""

    def is_committed(
        self,
        pipeline_id: str,
        incarnation: str,
        batch_id: int,
        batch_end: PartitionOffsets | None = None,
    ) -> bool:
        """Whether (pipeline, incarnation, batch) is committed -- with the same planned end
        offsets when given: a checkpoint restored from a backup reuses batch ids for other
        ranges, and such a batch must not be mistaken for the committed one."""
        ...

    def committed_offsets(self, pipeline_id: str) -> PartitionOffsets | None: ...

    def latest_epoch(self, pipeline_id: str) -> int | None: ...

    def commit(self, files: list[bytes], checkpoint: Checkpoint) -> None:
        """Append ``files`` atomically with ``checkpoint``; idempotent per batch; raises
        ``FencedError`` when a newer epoch of the pipeline committed."""
        ...

    def fence(self, pipeline_id: str, epoch: int, *, create: bool = False) -> None:
        """Make commits of older epochs fail; ``create``: also when the table is missing
        (create it empty with the fence)."""
        ...

    def describe(self, descriptor: bytes) -> tuple[str, int, int]:
        """(path, size in bytes, records) of a staged file descriptor."""
        ...

    def file_size(self, path: str) -> int | None: ...

    def delete_files(self, paths: Iterable[str]) -> list[str]: ...

    def begin(self, instant: str) -> None:
        """The instant is REQUESTED in the journal and workers are about to stage files
        named with it (Hudi: write the table's own requested/inflight instant files)."""
        ...

    def abort(self, instant: str) -> None:
        """Roll back the format's own state of ``instant``, after its files were deleted."""
        ...

    def orphan_files(self, write_id: str) -> list[str]:
        """Files staged under ``write_id`` (the instant time) that may not be listed
        anywhere (a crash before the precommit)."""
        ...


@dataclass
class BatchOutcome:
    batch_id: int
    outcome: str  # committed | replay_skipped | recommitted | overlap_skipped | at_least_once
    instant: str | None = None
    records: int = 0
    dead_letter_records: int = 0
    overlap_dropped: int = 0
    files: int = 0
    ranges: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    committed: PartitionOffsets = field(default_factory=PartitionOffsets)
    timings: dict[str, float] = field(default_factory=dict)
    recovered: list[tuple[str, str]] = field(default_factory=list)  # (instant, action)


def batch_ranges(
    start: Mapping[TopicPartition, int] | None,
    end: Mapping[TopicPartition, int],
    stats: list[PartitionStats],
    previous: Mapping[TopicPartition, int] | None,
    *,
    clip: bool = True,
) -> dict[TopicPartition, tuple[int, int]]:
    """``[start, end)`` per partition this batch consumed (``clip``: minus what the table
    already held, i.e. what this commit adds).

    Start is the previous batch's logged end; for the first batch of a checkpoint it is
    the table's committed offset, else the first offset a worker saw.
    """
    first = {TopicPartition(s.topic, s.partition): s.min_offset for s in stats}
    out = {}
    for tp, e in end.items():
        if start is not None and tp in start:
            s = start[tp]
        elif previous is not None and tp in previous:
            s = previous[tp]
        else:
            s = first.get(tp, e)
        if clip and previous is not None and tp in previous:
            s = max(s, previous[tp])  # what the table already held is not this commit's
        s = min(s, e)
        if e > s:
            out[tp] = (s, e)
    return out


def overlap(
    ranges: Mapping[TopicPartition, tuple[int, int]], committed: Mapping[TopicPartition, int]
) -> dict[TopicPartition, tuple[int, int]]:
    """Sub-ranges the table already holds: ``[start, min(end, committed))``."""
    out = {}
    for tp, (s, e) in ranges.items():
        c = committed.get(tp)
        if c is not None and s < c:
            out[tp] = (s, min(e, c))
    return out


# write(write_id, drop_below) -> staged files; drop_below: offsets under it are dropped
WriteFn = Callable[[str, PartitionOffsets], StagedBatch]


class Coordinator:
    """Commits Spark batches into a main table and a dead-letter table."""

    def __init__(
        self,
        pipeline_id: str,
        main: TableCommitter,
        dead_letter: TableCommitter | None = None,
        *,
        timeline: InstantTimeline | None = None,
        epoch: int = 0,
        on_overlap: str = "drop",
        faults: FaultPoints | None = None,
        data_loss: Callable[
            [StagedBatch, dict[TopicPartition, tuple[int, int]]],
            dict[TopicPartition, tuple[int, int]],
        ]
        | None = None,
    ) -> None:
        self.pipeline_id = pipeline_id
        self.main = main
        self.dead_letter = dead_letter
        self.timeline = timeline  # None: at-least-once mode (no journal, no fencing)
        self.epoch = epoch
        self.on_overlap = on_overlap
        self.faults = faults or FaultPoints("")
        self.data_loss = data_loss
        self.recovered = False

    @property
    def exactly_once(self) -> bool:
        return self.timeline is not None

    # -- start-up -----------------------------------------------------------------------
    def acquire_epoch(self, owner: str = "") -> int:
        """Take a writer epoch above every earlier one and fence the tables with it."""
        assert self.timeline is not None
        known = [self.main.latest_epoch(self.pipeline_id) or 0]
        if self.dead_letter is not None:
            known.append(self.dead_letter.latest_epoch(self.pipeline_id) or 0)
        earlier_runs = bool(self.timeline.epochs())
        self.epoch = self.timeline.acquire_epoch(at_least=max(known) + 1, owner=owner)
        # With an earlier run on record, it may still be alive and about to create a table
        # with its first commit: the fence then creates the table (empty) so that commit
        # fails. The very first run of a pipeline has no one to fence: tables stay absent
        # until their first commit (DESIGN invariant 9).
        self.main.fence(self.pipeline_id, self.epoch, create=earlier_runs)
        if self.dead_letter is not None:
            self.dead_letter.fence(self.pipeline_id, self.epoch, create=earlier_runs)
        log.info("pipeline %s: writer epoch %d acquired", self.pipeline_id, self.epoch)
        return self.epoch

    def check_epoch(self) -> None:
        """Refuse to go on when a newer writer took over (journal or table)."""
        if self.timeline is None:
            return
        newest = max([self.epoch, *self.timeline.epochs()])
        table = self.main.latest_epoch(self.pipeline_id) or 0
        if newest > self.epoch or table > self.epoch:
            raise FencedError(
                f"pipeline {self.pipeline_id!r}: writer epoch {self.epoch} was superseded by "
                f"epoch {max(newest, table)} (another driver took over); stopping"
            )

    # -- recovery -----------------------------------------------------------------------
    def recover(
        self, incarnation: str, batch_id: int, end: PartitionOffsets
    ) -> tuple[BatchOutcome | None, list[tuple[str, str]]]:
        """Finish every pending instant; return the outcome when the replayed batch was
        recommitted (the caller then skips the workers), and what was done."""
        assert self.timeline is not None
        done: list[tuple[str, str]] = []
        recommitted: BatchOutcome | None = None
        for inst in self.timeline.pending():
            b = inst.batch
            if (
                b is not None
                and b.pipeline_id == self.pipeline_id
                and self.main.is_committed(b.pipeline_id, b.incarnation, b.batch_id, inst.end)
            ):
                self.timeline.complete(inst.time)  # committed; only the marker was missing
                done.append((inst.time, "completed"))
                continue
            if b is not None and self._partly_committed(inst) and self._intact(inst):
                # Dead letters of this instant are committed: rolling it back would delete
                # files that table references. Finish it instead (any incarnation): the
                # main table then holds its offsets and replays drop them as overlap.
                assert inst.inflight is not None
                # logged before the commit: a crash inside it still shows the attempt
                log.info("instant %s (batch %d) recommitting (roll forward)", inst.time, batch_id)
                outcome = self._commit(inst.inflight, batch_id)
                done.append((inst.time, "recommitted"))
                if (
                    recommitted is None
                    and inst.inflight.batch
                    == BatchIdentity(self.pipeline_id, incarnation, batch_id)
                    and inst.end == end
                ):
                    outcome.outcome = "recommitted"
                    recommitted = outcome
                continue
            if recommitted is None and self._can_recommit(inst, incarnation, batch_id, end):
                assert inst.inflight is not None
                t0 = time.monotonic()
                log.info(
                    "instant %s (batch %d) recommitting without recomputing", inst.time, batch_id
                )
                outcome = self._commit(inst.inflight, batch_id)
                outcome.outcome = "recommitted"
                outcome.timings["recovery"] = time.monotonic() - t0
                recommitted = outcome
                done.append((inst.time, "recommitted"))
                continue
            self._roll_back(inst, batch_id)
            done.append((inst.time, "rolled_back"))
        return recommitted, done

    def _can_recommit(
        self, inst: Instant, incarnation: str, batch_id: int, end: PartitionOffsets
    ) -> bool:
        if inst.state is not InstantState.INFLIGHT or inst.inflight is None:
            return False
        inf = inst.inflight
        if inf.batch != BatchIdentity(self.pipeline_id, incarnation, batch_id):
            return False
        if inst.requested is not None and inst.requested.end != end:
            return False  # Spark replans this batch differently: recompute it
        return self._intact(inst)

    def _partly_committed(self, inst: Instant) -> bool:
        """Some table already references the instant's files (dead letters, or one of
        several main tables): it must be finished, never rolled back."""
        b = inst.batch
        if b is None:
            return False
        any_committed = getattr(self.main, "any_committed", None)  # multi-table mains
        return self._dead_letters_committed(inst) or bool(
            any_committed is not None
            and any_committed(b.pipeline_id, b.incarnation, b.batch_id, inst.end)
        )

    def _dead_letters_committed(self, inst: Instant) -> bool:
        b = inst.batch
        return (
            b is not None
            and self.dead_letter is not None
            and inst.inflight is not None
            and bool(inst.inflight.files_of(DEAD_LETTER))
            and self.dead_letter.is_committed(b.pipeline_id, b.incarnation, b.batch_id, inst.end)
        )

    def _intact(self, inst: Instant) -> bool:
        """Precommitted, and every staged file still there with its recorded size."""
        if inst.state is not InstantState.INFLIGHT or inst.inflight is None:
            return False
        for f in inst.inflight.files:
            table = self._table(f.table)
            if table is None or table.file_size(f.path) != f.size:
                log.warning(
                    "instant %s: staged file %s missing or changed; rolling back", inst.time, f.path
                )
                return False
        return True

    def _roll_back(self, inst: Instant, batch_id: int) -> None:
        assert self.timeline is not None
        deleted: list[str] = []
        listed = inst.inflight.files if inst.inflight is not None else ()
        keep_dead = self._dead_letters_committed(inst)
        if keep_dead:
            log.error(
                "instant %s: dead letters committed but main files lost; keeping the dead "
                "letters (a recomputed batch may add them again)",
                inst.time,
            )
        keep_main = not keep_dead and self._partly_committed(inst)  # a multi-table main
        if keep_main:
            log.error("instant %s: partly committed but files lost; keeping its files", inst.time)
        for name, table in ((MAIN, self.main), (DEAD_LETTER, self.dead_letter)):
            if table is None or (name == DEAD_LETTER and keep_dead) or (name == MAIN and keep_main):
                continue
            paths = [f.path for f in listed if f.table == name]
            first, rest = paths[:1], paths[1:]
            deleted += table.delete_files(first)
            self.faults.hit("during-rollback", batch_id)
            deleted += table.delete_files(rest)
            deleted += table.delete_files(table.orphan_files(self.write_id(inst.time)))
            table.abort(inst.time)  # format's own pending-instant state, after its files
        self.timeline.roll_back(inst.time, deleted)
        log.warning("instant %s rolled back: %d staged files deleted", inst.time, len(deleted))

    # -- the batch ----------------------------------------------------------------------
    def run_batch(
        self,
        incarnation: str,
        batch_id: int,
        start: PartitionOffsets | None,
        end: PartitionOffsets,
        write: WriteFn,
    ) -> BatchOutcome:
        if self.timeline is None:
            return self._run_at_least_once(incarnation, batch_id, start, end, write)
        t0 = time.monotonic()
        recovered: list[tuple[str, str]] = []
        if not self.recovered:
            self.check_epoch()
            outcome, recovered = self.recover(incarnation, batch_id, end)
            self.recovered = True
            if outcome is not None:
                outcome.recovered = recovered
                return outcome
        t_rec = time.monotonic()
        if self.main.is_committed(self.pipeline_id, incarnation, batch_id, end):
            log.info("batch %d of %s already committed: replay skipped", batch_id, incarnation)
            return BatchOutcome(batch_id, "replay_skipped", recovered=recovered)
        self.check_epoch()
        previous = self.main.committed_offsets(self.pipeline_id) or PartitionOffsets()
        planned = batch_ranges(start, end, [], previous, clip=False)
        lapped = overlap(planned, previous)
        if lapped and self.on_overlap == "fail":
            tp, (s, e) = next(iter(sorted(lapped.items())))
            raise OverlapError(
                f"partition {tp}: batch {batch_id} re-reads offsets [{s}, {e}) that the table "
                f"already committed (checkpoint older than the table?); onOverlap=fail. "
                f"{len(lapped)} partition(s) overlap"
            )

        batch = BatchIdentity(self.pipeline_id, incarnation, batch_id)
        instant = self._request(batch, start or PartitionOffsets(), end)
        for table in (self.main, self.dead_letter):
            if table is not None:
                table.begin(instant)
        self.faults.hit("after-requested", batch_id)
        t1 = time.monotonic()
        staged = write(self.write_id(instant), previous)
        t2 = time.monotonic()
        self.faults.hit("after-write", batch_id)
        if staged.dropped and self.on_overlap == "fail":
            s0 = next(s for s in staged.stats if s.dropped)
            tp = TopicPartition(s0.topic, s0.partition)
            raise OverlapError(
                f"partition {tp}: batch {batch_id} re-read {s0.dropped} records in "
                f"[{s0.min_offset}, {previous.get(tp)}) that the table already committed; "
                "onOverlap=fail "
                f"({sum(1 for s in staged.stats if s.dropped)} partition(s) overlap)"
            )

        ranges = batch_ranges(start, end, staged.stats, previous)
        committed = previous.updated(
            {tp: max(off, previous.get(tp, off)) for tp, off in end.items()}
        )
        loss = self.data_loss(staged, ranges) if self.data_loss else {}
        files = [self._staged(MAIN, d) for d in staged.data_files]
        files += [self._staged(DEAD_LETTER, d) for d in staged.dead_letter_files]
        inflight = Inflight(
            time=instant,
            batch=batch,
            epoch=self.epoch,
            files=tuple(files),
            ranges=ranges,
            committed=committed,
            records=staged.records - staged.dead_letter_records,
            dead_letter_records=staged.dead_letter_records,
            overlap_dropped=staged.dropped,
            data_loss=loss,
            end=end,
        )
        self.timeline.precommit(inflight)
        t3 = time.monotonic()
        self.faults.hit("after-precommit", batch_id)
        outcome = self._commit(inflight, batch_id)
        outcome.recovered = recovered
        outcome.timings.update(
            {
                "recovery": t_rec - t0,
                "request": t1 - t_rec,  # dedupe + overlap checks, REQUESTED, begin
                "write": t2 - t1,
                "precommit": t3 - t2,
                "commit": outcome.timings.get("commit", 0.0),
            }
        )
        if staged.dropped:
            log.warning(
                "batch %d: %d records at already-committed offsets dropped (%s)",
                batch_id,
                staged.dropped,
                lapped,
            )
        return outcome

    def _request(self, batch: BatchIdentity, start: PartitionOffsets, end: PartitionOffsets) -> str:
        """Mint an instant time and make REQUESTED durable (re-mint if another writer
        took the same millisecond)."""
        assert self.timeline is not None
        for _ in range(10):
            instant = self.timeline.mint()
            try:
                self.timeline.request(Requested(instant, batch, self.epoch, start, end))
                return instant
            except AlreadyExists:
                continue
        raise CommitError("could not mint a unique instant time after 10 attempts")

    def write_id(self, instant: str) -> str:
        """Names staged files: the instant time plus a tag of the pipeline, so a rollback
        never touches files of another pipeline writing the same table."""
        return f"{instant}-{hashlib.sha1(self.pipeline_id.encode()).hexdigest()[:8]}"

    def _staged(self, table: str, descriptor: bytes) -> StagedFile:
        committer = self._table(table)
        assert committer is not None
        path, size, records = committer.describe(descriptor)
        return StagedFile(table, path, size, records, descriptor)

    def _table(self, name: str) -> TableCommitter | None:
        return self.main if name == MAIN else self.dead_letter

    def _checkpoint(self, inf: Inflight) -> Checkpoint:
        return Checkpoint(
            pipeline_id=inf.batch.pipeline_id,
            incarnation=inf.batch.incarnation,
            batch_id=inf.batch.batch_id,
            epoch=self.epoch,  # recommits carry the current (fencing) epoch
            ranges=inf.ranges,
            committed=inf.committed,
            records=inf.records,
            dead_letter_records=inf.dead_letter_records,
            data_loss=inf.data_loss,
            instant=inf.time,
            batch_end=inf.end,
        )

    def _commit(self, inf: Inflight, batch_id: int) -> BatchOutcome:
        assert self.timeline is not None
        t0 = time.monotonic()
        checkpoint = self._checkpoint(inf)
        b = inf.batch
        dead = [f.descriptor for f in inf.files_of(DEAD_LETTER)]
        if (
            dead
            and self.dead_letter is not None
            and not self.dead_letter.is_committed(b.pipeline_id, b.incarnation, b.batch_id, inf.end)
        ):
            self.dead_letter.commit(dead, checkpoint)
        self.faults.hit("after-dead-letter-commit", batch_id)
        self.main.commit([f.descriptor for f in inf.files_of(MAIN)], checkpoint)
        self.faults.hit("after-commit", batch_id)
        self.timeline.complete(inf.time)
        self.faults.hit("after-commit-before-checkpoint", batch_id)
        return BatchOutcome(
            batch_id,
            "committed",
            instant=inf.time,
            records=inf.records,
            dead_letter_records=inf.dead_letter_records,
            overlap_dropped=inf.overlap_dropped,
            files=len(inf.files),
            ranges=inf.ranges,
            committed=inf.committed,
            timings={"commit": time.monotonic() - t0},
        )

    # -- at-least-once baseline ----------------------------------------------------------
    def _run_at_least_once(
        self,
        incarnation: str,
        batch_id: int,
        start: PartitionOffsets | None,
        end: PartitionOffsets,
        write: WriteFn,
    ) -> BatchOutcome:
        """No journal, no fencing, no dedupe: plain appends (benchmark baseline)."""
        t1 = time.monotonic()
        staged = write(f"alo-{incarnation[:8]}-{batch_id}", PartitionOffsets())
        t2 = time.monotonic()
        previous = self.main.committed_offsets(self.pipeline_id) or PartitionOffsets()
        ranges = batch_ranges(start, end, staged.stats, previous)
        committed = previous.updated(dict(end))
        checkpoint = Checkpoint(
            self.pipeline_id,
            incarnation,
            batch_id,
            0,
            ranges,
            committed,
            staged.records - staged.dead_letter_records,
            staged.dead_letter_records,
            batch_end=end,
        )
        if staged.dead_letter_files and self.dead_letter is not None:
            self.dead_letter.commit(staged.dead_letter_files, checkpoint)
        self.main.commit(staged.data_files, checkpoint)
        return BatchOutcome(
            batch_id,
            "committed",
            records=checkpoint.records,
            dead_letter_records=staged.dead_letter_records,
            files=len(staged.data_files) + len(staged.dead_letter_files),
            ranges=ranges,
            committed=committed,
            timings={"write": t2 - t1, "commit": time.monotonic() - t2},
        )
