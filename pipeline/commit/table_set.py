"""The tables one batch commits to: :class:`CommitTables`, an ordered mapping of table
name -> :class:`~pipeline.commit.types.TableCommitter`.

Today a pipeline's set is its main table and, when configured, its dead-letter table
(``both`` is one main committer over an Iceberg and a Hudi table,
:mod:`pipeline.formats.both`). The names are the ones the journal's staged-file lists
carry (``main``, ``dead_letter``), so an instant's files find their table again.

Rules of the set (docs/design.md invariants 3 and 4)
  * Commit order is fixed: :data:`COMMIT_ORDER`, the main table last -- its commit is the
    one point where a batch becomes visible.
  * A batch committed to ANY table of the set is finished, never rolled back
    (:meth:`CommitTables.holds_any`): rolling it back would delete files a table
    references. Rollback undoes the tables in reverse commit order.
"""

from __future__ import annotations

from collections.abc import Iterator

from pipeline.commit.instant import BatchIdentity, Inflight
from pipeline.commit.offsets import PartitionOffsets
from pipeline.commit.types import DEAD_LETTER, MAIN, TableCommitter

__all__ = ["COMMIT_ORDER", "CommitTables"]

#: The order in which a batch's tables commit: dead letters first, the main table last.
COMMIT_ORDER: tuple[str, ...] = (DEAD_LETTER, MAIN)


class CommitTables:
    """A pipeline's tables by name, iterated in :data:`COMMIT_ORDER`."""

    def __init__(self, main: TableCommitter, dead_letter: TableCommitter | None = None) -> None:
        given = {MAIN: main, DEAD_LETTER: dead_letter}
        self._tables: dict[str, TableCommitter] = {
            name: t for name in COMMIT_ORDER if (t := given[name]) is not None
        }

    @property
    def main(self) -> TableCommitter:
        return self._tables[MAIN]

    def get(self, name: str) -> TableCommitter | None:
        return self._tables.get(name)

    def __iter__(self) -> Iterator[tuple[str, TableCommitter]]:
        """``(name, table)`` in commit order."""
        return iter(self._tables.items())

    def main_first(self) -> Iterator[tuple[str, TableCommitter]]:
        """``(name, table)`` in reverse commit order: rollback undoes the main table
        first; begin, fence and refresh keep that order too."""
        return reversed(list(self._tables.items()))

    def commits_to(self, inflight: Inflight, name: str) -> bool:
        """Whether the batch of ``inflight`` commits to table ``name``: the main table
        always (its commit carries the checkpoint), any other one when it lists files."""
        return name in self._tables and (name == MAIN or bool(inflight.files_of(name)))

    def needs_commit(self, inflight: Inflight, name: str) -> bool:
        """Whether the commit sequence commits ``inflight`` to table ``name``: the main
        table always (its commit is idempotent per batch), another one when it lists
        files and does not hold them yet (a repair re-runs the sequence after them)."""
        table = self._tables.get(name)
        if table is None or not self.commits_to(inflight, name):
            return False
        return name == MAIN or not table.is_committed(inflight.batch, inflight.end)

    def holds(
        self,
        name: str,
        batch: BatchIdentity,
        end: PartitionOffsets | None,
        inflight: Inflight | None,
    ) -> bool:
        """Whether table ``name`` holds ``batch`` (a table other than the main one only
        when the precommit ``inflight`` lists files for it)."""
        table = self._tables.get(name)
        if table is None or (name != MAIN and (inflight is None or not inflight.files_of(name))):
            return False
        return table.is_committed(batch, end)

    def holds_any(
        self, batch: BatchIdentity, end: PartitionOffsets | None, inflight: Inflight | None
    ) -> bool:
        """The roll-forward rule: some table of the set (or, for a main committer over
        several tables, one of those: ``any_committed``) holds ``batch``, so its instant
        is finished, never rolled back."""
        return any(
            table.any_committed(batch, end)
            if name == MAIN
            else self.holds(name, batch, end, inflight)
            for name, table in self
        )

    def refresh(self) -> None:
        """Drop every cached view: the next reads are fresh (docs/design.md invariant 14)."""
        for _, table in self.main_first():
            table.refresh()

    def begin(self, instant: str) -> None:
        for _, table in self.main_first():
            table.begin(instant)

    def fence(self, pipeline_id: str, epoch: int, *, create: bool) -> None:
        for _, table in self.main_first():
            table.fence(pipeline_id, epoch, create=create)

    def latest_epoch(self, pipeline_id: str) -> int:
        """The newest writer epoch any table of the set records (0: none)."""
        return max((t.latest_epoch(pipeline_id) or 0 for _, t in self), default=0)
