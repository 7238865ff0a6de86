"""Recovery of pending instants on start (operator 1 of the exactly-once batch loop).

The first batch of a run finishes every pending instant an earlier run left in the
journal before anything new is written:

  * already in the table                          → marked COMPLETED (only the marker was
                                                    missing);
  * partly committed (dead letters, or one of several main tables) and intact
                                                  → RECOMMITTED (rolled forward), whatever
                                                    its incarnation;
  * INFLIGHT of the batch Spark is replaying (same incarnation, batch id and end offsets),
    every staged file present with its size       → RECOMMITTED without running the workers;
  * anything else                                 → ROLLED BACK: listed and orphaned files
                                                    deleted, then the rollback recorded.
(DESIGN invariant 4)

Invariants
  * Rollback never deletes a file a table references: an instant found in the table is
    marked completed instead, and a partly committed one keeps the files of the table
    that holds them.
  * After recovery the journal holds no pending instant: the table is at its last commit.
"""

from __future__ import annotations

import hashlib
import logging
import time

from pipeline.commit.faults import FaultPoints
from pipeline.commit.instant import BatchIdentity, Inflight, Instant, InstantState
from pipeline.commit.journal import InstantTimeline
from pipeline.commit.offsets import PartitionOffsets
from pipeline.commit.types import DEAD_LETTER, MAIN, BatchOutcome, Outcome, TableCommitter

log = logging.getLogger(__name__)


def staged_write_id(pipeline_id: str, instant: str) -> str:
    """Names staged files: the instant time plus a tag of the pipeline, so a rollback
    never touches files of another pipeline writing the same table."""
    return f"{instant}-{hashlib.sha1(pipeline_id.encode()).hexdigest()[:8]}"


class Recovery:
    """Start-up recovery, a base of :class:`pipeline.commit.coordinator.Coordinator`
    (which supplies the commit operator, :meth:`_commit`)."""

    pipeline_id: str
    main: TableCommitter
    dead_letter: TableCommitter | None
    timeline: InstantTimeline
    faults: FaultPoints

    def _commit(self, inf: Inflight, batch_id: int) -> BatchOutcome:
        """Commit a precommitted instant: dead letters, the main table, COMPLETED."""
        raise NotImplementedError

    def write_id(self, instant: str) -> str:
        return staged_write_id(self.pipeline_id, instant)

    def _table(self, name: str) -> TableCommitter | None:
        return self.main if name == MAIN else self.dead_letter

    def recover(
        self, incarnation: str, batch_id: int, end: PartitionOffsets
    ) -> tuple[BatchOutcome | None, list[tuple[str, str]]]:
        """Finish every pending instant; return the outcome when the replayed batch was
        recommitted (the caller then skips the workers), and what was done."""
        done: list[tuple[str, str]] = []
        recommitted: BatchOutcome | None = None
        for inst in self.timeline.pending():
            b = inst.batch
            if (
                b is not None
                and b.pipeline_id == self.pipeline_id
                and self.main.is_committed(b, inst.end)
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
                    outcome.outcome = Outcome.RECOMMITTED
                    recommitted = outcome
                continue
            if recommitted is None and self._can_recommit(inst, incarnation, batch_id, end):
                assert inst.inflight is not None
                t0 = time.monotonic()
                log.info(
                    "instant %s (batch %d) recommitting without recomputing", inst.time, batch_id
                )
                outcome = self._commit(inst.inflight, batch_id)
                outcome.outcome = Outcome.RECOMMITTED
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
        return self._dead_letters_committed(inst) or self.main.any_committed(b, inst.end)

    def _dead_letters_committed(self, inst: Instant) -> bool:
        b = inst.batch
        return (
            b is not None
            and self.dead_letter is not None
            and inst.inflight is not None
            and bool(inst.inflight.files_of(DEAD_LETTER))
            and self.dead_letter.is_committed(b, inst.end)
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
