"""What recovery reads of a pending instant, and the one rollback of an instant.

Recovery's internals: only :mod:`pipeline.commit.recovery` imports this module (an
import-linter contract in ``pyproject.toml``); the coordinator composes a ``Recovery``
and never decides about pending instants itself.

Invariant (docs/design.md invariant 4): a rollback never deletes a file a table
references -- each table of the set that holds the instant's batch keeps its files (the
roll-forward rule of :class:`~pipeline.commit.table_set.CommitTables`).
"""

from __future__ import annotations

import logging

from pipeline.commit.faults import FaultPoint, FaultPoints
from pipeline.commit.instant import Instant, InstantState, staged_write_id
from pipeline.commit.journal import InstantTimeline
from pipeline.commit.table_set import CommitTables
from pipeline.commit.types import DEAD_LETTER

log = logging.getLogger(__name__)


class PendingInstants:
    """The checks recovery makes on a pending instant, and its rollback."""

    def __init__(
        self,
        pipeline_id: str,
        tables: CommitTables,
        timeline: InstantTimeline,
        faults: FaultPoints,
    ) -> None:
        self.pipeline_id = pipeline_id
        self.tables = tables
        self.timeline = timeline
        self.faults = faults

    def partly_committed(self, inst: Instant) -> bool:
        """Some table of the set already references the instant's files: it must be
        finished, never rolled back."""
        b = inst.batch
        return b is not None and self.tables.holds_any(b, inst.end, inst.inflight)

    def dead_letters_committed(self, inst: Instant) -> bool:
        b = inst.batch
        return b is not None and self.tables.holds(DEAD_LETTER, b, inst.end, inst.inflight)

    def intact(self, inst: Instant) -> bool:
        """Precommitted, and every staged file still there with its recorded size."""
        if inst.state is not InstantState.INFLIGHT or inst.inflight is None:
            return False
        for f in inst.inflight.files:
            table = self.tables.get(f.table)
            if table is None or table.file_size(f.path) != f.size:
                log.warning(
                    "instant %s: staged file %s missing or changed; rolling back", inst.time, f.path
                )
                return False
        return True

    def roll_back(self, inst: Instant, batch_id: int) -> None:
        """Delete the instant's listed and orphaned files (those no table references),
        let each format drop its own pending state, then record the rollback; the
        tables in reverse commit order."""
        deleted: list[str] = []
        listed = inst.inflight.files if inst.inflight is not None else ()
        b = inst.batch
        if self.dead_letters_committed(inst):
            # its main rows are (being) committed by a repair under another instant: the
            # main tables' state of this one goes, the dead letters stay
            kept = [DEAD_LETTER]
            log.warning(
                "instant %s: its dead letters are committed; rolling back the rest only",
                inst.time,
            )
        else:  # main tables holding the batch although files were lost: keep theirs
            kept = [
                name
                for name, _ in self.tables.mains()
                if b is not None and self.tables.holds(name, b, inst.end, inst.inflight)
            ]
            if kept:
                log.error(
                    "instant %s: committed to %s but files lost; keeping their files",
                    inst.time,
                    ", ".join(kept),
                )
        for name, table in self.tables.main_first():
            if name in kept:
                continue
            paths = [f.path for f in listed if f.table == name]
            first, rest = paths[:1], paths[1:]
            deleted += table.delete_files(first)
            self.faults.hit(FaultPoint.DURING_ROLLBACK, batch_id)
            deleted += table.delete_files(rest)
            deleted += table.delete_files(
                table.orphan_files(staged_write_id(self.pipeline_id, inst.time))
            )
            table.abort(inst.time)  # format's own pending-instant state, after its files
        self.timeline.roll_back(inst.time, deleted)
        log.warning("instant %s rolled back: %d staged files deleted", inst.time, len(deleted))
