"""The exactly-once batch coordinator: a two-phase instant commit per Spark batch (driver).

Spark-free: unit tests drive it with in-memory tables and journals; the Spark adapter
supplies ``write`` (the workers) and the format adapters supply ``TableCommitter``s
(:mod:`pipeline.commit.types`). ``commit.mode: at-least-once`` uses
:class:`pipeline.commit.at_least_once.AtLeastOnceCoordinator` instead; pick the class
with :func:`make_coordinator`.

Operators, per batch (exactly-once mode)
  1. recover  -- first batch of a run only: every pending instant left by an earlier
                 run is finished (completed, recommitted or rolled back; see
                 :mod:`pipeline.commit.recovery`, docs/design.md invariant 4).
  2. dedupe   -- (incarnation, batch id) already committed → skipped. (invariant 5)
  3. overlap  -- offsets below the table's committed offsets are dropped by the workers
                 and counted, or the batch fails under ``on_overlap="fail"``.
     gap      -- a start above the table's committed offsets fails (``GapError``) or,
                 under ``on_gap="rewind"``, is re-read from them (invariant 8);
                 :mod:`pipeline.commit.continuity`.
  4. mint     -- instant time T > every instant; REQUESTED(batch, epoch, planned offsets).
  5. write    -- workers stage files named with T; nothing visible.
  6. precommit-- INFLIGHT(T): the complete staged-file list and the checkpoint to commit,
                 refused (``CoverageError``) when the tasks' reads do not cover the
                 batch's ranges (invariant 8).
  7. commit   -- each table of the batch's set in commit order: dead letters, then one
                 commit per main table carrying the checkpoint (in parallel when there
                 are several), each refused when a newer writer epoch owns the table
                 (invariant 7); then COMPLETED(T).

The tables are a :class:`~pipeline.commit.table_set.CommitTables` (commit order and the
roll-forward rule are the set's); what one batch carries through the operators -- its
record counter, timings, recovered instants, how far it got -- is an
:class:`~pipeline.commit.inflight_batch.InFlightBatch`, never state on the coordinator.

Invariants this code keeps (each has a test)
  * A main table's commit is the only point where a batch becomes visible in it, and it
    happens at most once per (incarnation, batch id): every path to it checks the table
    first.
  * A crash leaves the table at the previous commit plus at most one pending instant,
    and the next run's recovery finishes or removes it before anything new is written.
  * Rollback never deletes a file the table references: an instant found in the table is
    marked completed instead.
  * Cumulative committed offsets never move backwards.
  * A halt, skip, rewind or drop is decided on a fresh read of the tables (``_fresh``,
    invariant 14): a cached view may only give the all-clear.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from pipeline.commit.at_least_once import AtLeastOnceCoordinator
from pipeline.commit.checkpoint import CommitCheckpoint
from pipeline.commit.continuity import (
    OnGap,
    OnOverlap,
    check_gaps,
    check_staged_overlap,
    planned_overlap,
    starts_exactly_at,
)
from pipeline.commit.coverage import coverage, coverage_error, planned_reads
from pipeline.commit.faults import FaultPoint, FaultPoints
from pipeline.commit.fence import check_fence
from pipeline.commit.inflight_batch import InFlightBatch
from pipeline.commit.instant import BatchIdentity, Inflight, Requested, StagedFile, staged_write_id
from pipeline.commit.journal import AlreadyExists, InstantTimeline
from pipeline.commit.offsets import PartitionOffsets
from pipeline.commit.protocol import BatchCoordinator
from pipeline.commit.recovery import Recovery
from pipeline.commit.table_ranges import consumed_ranges
from pipeline.commit.table_set import CommitTables
from pipeline.commit.types import (
    DEAD_LETTER,
    BatchOutcome,
    DataLossFn,
    Outcome,
    RecordCounter,
    RereadFn,
    StagedBatch,
    TableCommitter,
    WriteFn,
)
from pipeline.errors import CommitError

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class Coordinator:
    """Commits Spark batches exactly once into a set of tables (its main tables and a
    dead-letter table, :class:`~pipeline.commit.table_set.CommitTables`). Start-up
    recovery is a :class:`~pipeline.commit.recovery.Recovery` it composes and hands its
    commit operator (:meth:`_commit`)."""

    def __init__(
        self,
        pipeline_id: str,
        tables: CommitTables,
        *,
        timeline: InstantTimeline,
        epoch: int = 0,
        on_overlap: OnOverlap = "drop",
        faults: FaultPoints | None = None,
        data_loss: DataLossFn | None = None,
        on_gap: OnGap = "fail",
    ) -> None:
        self.pipeline_id = pipeline_id
        self.tables = tables
        self.timeline = timeline
        self.epoch = epoch
        self.on_overlap = on_overlap
        self.on_gap = on_gap
        self.faults = faults or FaultPoints("")
        self.data_loss = data_loss
        self._recovery_ran = False  # operator 1 runs on the first batch of a run only
        self.recovery = Recovery(
            pipeline_id, self.tables, timeline=timeline, faults=self.faults, commit=self._commit
        )

    @property
    def exactly_once(self) -> bool:
        return True

    # -- start-up -----------------------------------------------------------------------
    def acquire_epoch(self, owner: str = "") -> int:
        """Take a writer epoch above every earlier one and fence the tables with it."""
        known = self.tables.latest_epoch(self.pipeline_id)
        earlier_runs = bool(self.timeline.epochs())
        self.epoch = self.timeline.acquire_epoch(at_least=known + 1, owner=owner)
        # With an earlier run on record, it may still be alive and about to create a table
        # with its first commit: the fence then creates the table (empty) so that commit
        # fails. The very first run of a pipeline has no one to fence: tables stay absent
        # until their first commit (docs/design.md invariant 9).
        self.tables.fence(self.pipeline_id, self.epoch, create=earlier_runs)
        log.info("pipeline %s: writer epoch %d acquired", self.pipeline_id, self.epoch)
        return self.epoch

    def check_epoch(self) -> None:
        """Refuse to go on when a newer writer took over (journal or table); a newer epoch
        seen on a cached view of the table is confirmed on a fresh read first."""
        tables = self.tables
        table = tables.main_epoch(self.pipeline_id)
        if table > self.epoch:
            table = self._fresh(lambda: tables.main_epoch(self.pipeline_id))
        check_fence(self.pipeline_id, self.epoch, max([table, *self.timeline.epochs()]))

    def _fresh(self, read: Callable[[], _T]) -> _T:
        """``read`` on a fresh read of the tables: a halt, skip, rewind or drop decides on
        it, never on a cached view (docs/design.md invariant 14)."""
        self.tables.refresh()
        return read()

    def _committed_before(
        self, start: PartitionOffsets | None, end: PartitionOffsets
    ) -> PartitionOffsets:
        """The table's committed offsets this batch continues from. A cached view serves
        only the all-clear (the batch starts exactly there): a first batch, a gap or an
        overlap reads the table fresh before anything is decided on it."""
        tables = self.tables
        previous = tables.committed_offsets(self.pipeline_id) or PartitionOffsets()
        if not starts_exactly_at(start, end, previous):
            previous = self._fresh(
                lambda: tables.committed_offsets(self.pipeline_id) or PartitionOffsets()
            )
        return previous

    # -- the batch ----------------------------------------------------------------------
    def run_batch(
        self,
        incarnation: str,
        batch_id: int,
        start: PartitionOffsets | None,
        end: PartitionOffsets,
        write: WriteFn,
        *,
        reread: RereadFn | None = None,
        count: RecordCounter | None = None,
    ) -> BatchOutcome:
        """One batch. ``reread(start, end)``: a write of other ranges than Spark planned
        (gap rewind, repairs); ``count``: the broker's records in ranges read with holes
        (the coverage check's oracle)."""
        identity = BatchIdentity(self.pipeline_id, incarnation, batch_id)
        batch = InFlightBatch(identity, start, end, count)
        if not self._recovery_ran:  # operator 1
            recommitted = self._recover(batch, reread)
            if recommitted is not None:
                return recommitted
        batch.lap("recovery")
        tables = self.tables
        if tables.is_committed(identity, end) and self._fresh(  # operator 2
            lambda: tables.is_committed(identity, end)
        ):
            log.info("batch %d of %s already committed: replay skipped", batch_id, incarnation)
            return BatchOutcome(batch_id, Outcome.REPLAY_SKIPPED, recovered=batch.recovered)
        self.check_epoch()
        previous = self._committed_before(start, end)  # operator 3
        batch.start, write = check_gaps(batch_id, start, end, previous, write, reread, self.on_gap)
        lapped = planned_overlap(batch_id, batch.start, end, previous, self.on_overlap)
        instant = self._request(batch)  # operator 4
        self.faults.hit(FaultPoint.AFTER_REQUESTED, batch_id)
        batch.lap("request")  # dedupe + overlap checks, REQUESTED, begin
        staged = write(staged_write_id(self.pipeline_id, instant), previous)  # operator 5
        batch.lap("write")
        self.faults.hit(FaultPoint.AFTER_WRITE, batch_id)
        inflight = self._precommit(batch, previous, staged)  # operator 6
        batch.lap("precommit")
        self.faults.hit(FaultPoint.AFTER_PRECOMMIT, batch_id)
        outcome = self._commit(inflight, batch_id, batch)  # operator 7
        outcome.recovered = batch.recovered
        outcome.unknown_field_records = staged.unknown_field_records
        outcome.unknown_fields = list(staged.unknown_fields)
        outcome.timings.update(batch.timings)
        if staged.dropped:
            log.warning(
                "batch %d: %d records at already-committed offsets dropped%s",
                batch_id,
                staged.dropped,
                f" ({lapped})" if lapped else "",
            )
        return outcome

    def _recover(self, batch: InFlightBatch, reread: RereadFn | None) -> BatchOutcome | None:
        """Operator 1: finish every pending instant (repairs first); the outcome when it
        recommitted ``batch`` itself (the workers then never run)."""
        self._fresh(self.check_epoch)  # recovery decides on what the tables hold now
        b = batch.identity
        outcome, batch.recovered = self.recovery.recover(b.incarnation, b.batch_id, batch.end)
        for lost in self.recovery.repairs:
            assert lost.inflight is not None
            self._repair(lost.inflight, batch, reread)
            self.recovery.repaired(lost, b.batch_id)
        self._recovery_ran = True
        if outcome is not None:
            outcome.recovered = batch.recovered
        return outcome

    def _repair(self, lost: Inflight, batch: InFlightBatch, reread: RereadFn | None) -> None:
        """A rolled-back instant whose dead letters are committed but whose main files
        were lost: re-read its ranges and commit them under its own batch identity, so
        ``_commit`` skips the dead letters (already there) and any later batch finds the
        main table at its end (docs/design.md invariant 4)."""
        if self.tables.is_committed(lost.batch, lost.end):
            return
        end = lost.end
        if reread is None or end is None:
            raise CommitError(
                f"instant {lost.time}: dead letters committed, main files lost, and its "
                "ranges cannot be re-read here; nothing committed"
            )
        start = PartitionOffsets({tp: lost.ranges.get(tp, (e, e))[0] for tp, e in end.items()})
        previous = self.tables.committed_offsets(self.pipeline_id) or PartitionOffsets()
        repair = InFlightBatch(lost.batch, start, end, batch.count)
        instant = self._request(repair)
        staged = reread(start, end)(staged_write_id(self.pipeline_id, instant), previous)
        inflight = self._precommit(repair, previous, staged)
        self._commit(inflight, batch.batch_id, repair)
        dead_letter = self.tables.get(DEAD_LETTER)
        if dead_letter is not None:  # the repair's own copies, never referenced,
            # and its instant on the dead-letter table (never committed there)
            dead_letter.delete_files(f.path for f in inflight.files_of(DEAD_LETTER))
            dead_letter.abort(instant)
        log.warning(
            "instant %s: main rows of batch %d (instant %s) re-read and committed",
            instant,
            lost.batch.batch_id,
            lost.time,
        )

    def _request(self, batch: InFlightBatch) -> str:
        """Operator 4: mint an instant time and make REQUESTED durable (re-mint if
        another writer took the same millisecond); then every table begins it."""
        start = batch.start or PartitionOffsets()
        for _ in range(10):
            instant = self.timeline.mint()
            try:
                self.timeline.request(
                    Requested(instant, batch.identity, self.epoch, start, batch.end)
                )
            except AlreadyExists:
                continue
            batch.instant = instant
            self.tables.begin(instant)
            return instant
        raise CommitError("could not mint a unique instant time after 10 attempts")

    def _precommit(
        self, batch: InFlightBatch, previous: PartitionOffsets, staged: StagedBatch
    ) -> Inflight:
        """Operator 6: INFLIGHT(T) with the staged files and the checkpoint to commit."""
        assert batch.instant is not None, "precommit before the request"
        start, end = batch.start, batch.end
        check_staged_overlap(batch.batch_id, staged, previous, self.on_overlap)
        planned = planned_reads(start, end, staged.stats, previous)
        issues = coverage(planned, staged.stats, batch.count)
        if issues:
            raise coverage_error(batch.batch_id, issues)
        ranges = consumed_ranges(start, end, staged.stats, previous)
        committed = previous.updated(
            {tp: max(off, previous.get(tp, off)) for tp, off in end.items()}
        )
        files = [self._staged(name, d) for name, d in self.tables.staged_files(staged)]
        inflight = Inflight(
            time=batch.instant,
            batch=batch.identity,
            epoch=self.epoch,
            files=tuple(files),
            ranges=ranges,
            committed=committed,
            records=staged.records - staged.dead_letter_records,
            dead_letter_records=staged.dead_letter_records,
            overlap_dropped=staged.dropped,
            data_loss=self.data_loss(staged, ranges) if self.data_loss else {},
            end=end,
        )
        self.timeline.precommit(inflight)
        batch.inflight = inflight
        return inflight

    def _staged(self, table: str, descriptor: bytes) -> StagedFile:
        committer = self.tables.get(table)
        assert committer is not None
        path, size, records = committer.describe(descriptor)
        return StagedFile(table, path, size, records, descriptor)

    def _checkpoint(self, inf: Inflight) -> CommitCheckpoint:
        return CommitCheckpoint(
            pipeline_id=inf.batch.pipeline_id,
            incarnation=inf.batch.incarnation,
            batch_id=inf.batch.batch_id,
            epoch=self.epoch,  # recommits carry the current (fencing) epoch
            ranges=inf.ranges,
            committed_offsets=inf.committed,
            records=inf.records,
            dead_letter_records=inf.dead_letter_records,
            data_loss=inf.data_loss,
            instant=inf.time,
            batch_end=inf.end,
        )

    def _commit(
        self, inf: Inflight, batch_id: int, batch: InFlightBatch | None = None
    ) -> BatchOutcome:
        """Operator 7 (also recovery's recommit): each table of the set in commit order,
        every main table's commit carrying the checkpoint; then COMPLETED(T)."""
        t0 = time.monotonic()
        checkpoint = self._checkpoint(inf)
        if self.tables.get(DEAD_LETTER) is None:  # its point is hit whatever the set holds
            self.faults.hit(FaultPoint.AFTER_DEAD_LETTER_COMMIT, batch_id)
        last = self.tables.last()

        def commit_to(name: str, table: TableCommitter) -> None:
            if self.tables.needs_commit(inf, name):
                table.commit([f.descriptor for f in inf.files_of(name)], checkpoint)
                if batch is not None:
                    batch.committed_to.append(name)
            if name == DEAD_LETTER:
                self.faults.hit(FaultPoint.AFTER_DEAD_LETTER_COMMIT, batch_id)
            elif name != last:
                self.faults.hit(FaultPoint.BETWEEN_TABLE_COMMITS, batch_id)

        for name, table in self.tables.others():
            commit_to(name, table)
        self.tables.commit_mains(commit_to)
        self.faults.hit(FaultPoint.AFTER_COMMIT, batch_id)
        self.timeline.complete(inf.time)
        self.faults.hit(FaultPoint.AFTER_COMMIT_BEFORE_CHECKPOINT, batch_id)
        return BatchOutcome.of_commit(batch_id, inf, checkpoint.epoch, time.monotonic() - t0)


def make_coordinator(
    pipeline_id: str,
    tables: CommitTables,
    *,
    timeline: InstantTimeline | None = None,
    epoch: int = 0,
    on_overlap: OnOverlap = "drop",
    faults: FaultPoints | None = None,
    data_loss: DataLossFn | None = None,
    on_gap: OnGap = "fail",
) -> BatchCoordinator:
    """The coordinator of a pipeline: exactly-once with a journal ``timeline``, else the
    at-least-once baseline (no journal, no fencing, no dedupe: ``on_overlap``,
    ``on_gap``, ``faults`` and ``data_loss`` are the exactly-once path's)."""
    if timeline is None:
        return AtLeastOnceCoordinator(pipeline_id, tables)
    return Coordinator(
        pipeline_id,
        tables,
        timeline=timeline,
        epoch=epoch,
        on_overlap=on_overlap,
        faults=faults,
        data_loss=data_loss,
        on_gap=on_gap,
    )
