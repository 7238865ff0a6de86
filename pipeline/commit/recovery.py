"""Recovery of pending instants on start (operator 1 of the exactly-once batch loop).

The first batch of a run finishes every pending instant an earlier run left in the
journal before anything new is written (docs/design.md invariant 4):

  * already in every main table                   → marked COMPLETED (only the marker was
                                                    missing);
  * partly committed (dead letters, or one of several main tables) and intact
                                                  → RECOMMITTED (rolled forward), whatever
                                                    its incarnation;
  * INFLIGHT of the batch Spark is replaying (same incarnation, batch id and end offsets),
    every staged file present with its size       → RECOMMITTED without running the workers;
  * dead letters committed, main files lost       → listed in ``repairs``: the coordinator
                                                    re-reads its ranges and commits the main
                                                    rows alone under its batch identity, then
                                                    ``repaired`` ROLLS it BACK (keeping the
                                                    dead letters): the dead letters are never
                                                    committed twice, in any incarnation, also
                                                    when a run dies mid-repair (the instant is
                                                    still pending and repaired again);
  * anything else                                 → ROLLED BACK: listed and orphaned files
                                                    deleted, then the rollback recorded.

Each pending instant is first read as the set names its files
(:meth:`CommitTables.upgraded <pipeline.commit.table_set.CommitTables.upgraded>`: an
INFLIGHT an earlier release wrote lists several main tables' files under ``main``).

The coordinator composes a :class:`Recovery` and hands it its commit operator; the checks
on a pending instant and the rollback live in :mod:`pipeline.commit.pending`, which only
this module imports.

Invariants
  * Rollback never deletes a file a table references: an instant found in the table is
    marked completed instead, and a partly committed one keeps the files of the table
    that holds them.
  * After recovery the journal holds no pending instant: the table is at its last commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pipeline.commit.faults import FaultPoints
from pipeline.commit.instant import BatchIdentity, Inflight, Instant, InstantState
from pipeline.commit.journal import InstantTimeline
from pipeline.commit.offsets import PartitionOffsets
from pipeline.commit.pending import PendingInstants
from pipeline.commit.table_set import CommitTables
from pipeline.commit.types import BatchOutcome, Outcome, Recovered

log = logging.getLogger(__name__)

# commit(inflight, batch_id): the coordinator's commit operator (dead letters, main, COMPLETED)
CommitFn = Callable[[Inflight, int], BatchOutcome]


class Recovery:
    """Start-up recovery of one pipeline's pending instants."""

    def __init__(
        self,
        pipeline_id: str,
        tables: CommitTables,
        *,
        timeline: InstantTimeline,
        faults: FaultPoints,
        commit: CommitFn,
    ) -> None:
        self.pipeline_id = pipeline_id
        self.tables = tables
        self.timeline = timeline
        self._commit = commit
        self._pending = PendingInstants(pipeline_id, tables, timeline, faults)
        # instants rolled back although their dead letters are committed (main files lost):
        # the coordinator commits their main rows alone before anything else (repair),
        # then hands each back to ``repaired``
        self.repairs: list[Instant] = []

    def recover(
        self, incarnation: str, batch_id: int, end: PartitionOffsets
    ) -> tuple[BatchOutcome | None, list[tuple[str, Recovered]]]:
        """Finish every pending instant; return the outcome when the replayed batch was
        recommitted (the caller then skips the workers), and what was done."""
        done: list[tuple[str, Recovered]] = []
        self.repairs = []
        recommitted: BatchOutcome | None = None
        replayed = BatchIdentity(self.pipeline_id, incarnation, batch_id)
        pending = self._pending
        for inst in map(self.tables.upgraded, self.timeline.pending()):
            self.tables.check_holds_tables_of(inst)
            b = inst.batch
            if (
                b is not None
                and b.pipeline_id == self.pipeline_id
                and self.tables.is_committed(b, inst.end)
            ):
                self.timeline.complete(inst.time)  # committed; only the marker was missing
                done.append((inst.time, Recovered.COMPLETED))
                continue
            if b is not None and pending.partly_committed(inst) and pending.intact(inst):
                # Dead letters of this instant are committed: rolling it back would delete
                # files that table references. Finish it instead (any incarnation): the
                # main table then holds its offsets and replays drop them as overlap.
                assert inst.inflight is not None
                # logged before the commit: a crash inside it still shows the attempt
                log.info("instant %s (batch %d) recommitting (roll forward)", inst.time, batch_id)
                outcome = self._commit(inst.inflight, batch_id)
                done.append((inst.time, Recovered.RECOMMITTED))
                if recommitted is None and inst.inflight.batch == replayed and inst.end == end:
                    outcome.outcome = Outcome.RECOMMITTED
                    recommitted = outcome
                continue
            if recommitted is None and self._can_recommit(inst, replayed, end):
                assert inst.inflight is not None
                t0 = time.monotonic()
                log.info(
                    "instant %s (batch %d) recommitting without recomputing", inst.time, batch_id
                )
                outcome = self._commit(inst.inflight, batch_id)
                outcome.outcome = Outcome.RECOMMITTED
                outcome.timings["recovery"] = time.monotonic() - t0
                recommitted = outcome
                done.append((inst.time, Recovered.RECOMMITTED))
                continue
            if pending.dead_letters_committed(inst) and inst.inflight is not None:
                # Rolled back only once the repair committed its main rows: a run that
                # dies before then finds this instant again and repairs it again.
                self.repairs.append(inst)
                done.append((inst.time, Recovered.ROLLED_BACK))
                continue
            pending.roll_back(inst, batch_id)
            done.append((inst.time, Recovered.ROLLED_BACK))
        return recommitted, done

    def repaired(self, inst: Instant, batch_id: int) -> None:
        """Roll back an instant of ``repairs`` once the main table holds its batch (its
        committed dead letters stay)."""
        self._pending.roll_back(inst, batch_id)

    def _can_recommit(self, inst: Instant, replayed: BatchIdentity, end: PartitionOffsets) -> bool:
        if inst.state is not InstantState.INFLIGHT or inst.inflight is None:
            return False
        if inst.inflight.batch != replayed:
            return False
        if inst.requested is not None and inst.requested.end != end:
            return False  # Spark replans this batch differently: recompute it
        return self._pending.intact(inst)
