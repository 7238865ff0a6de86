"""The tables one batch commits to: :class:`CommitTables`, an ordered mapping of table
name -> :class:`~pipeline.commit.types.TableCommitter`.

A pipeline's set is its dead-letter table (when configured) and its main tables: one
(``main``), or several that each take every row of the batch (``both``: an Iceberg table
named ``main`` and a Hudi table, :mod:`pipeline.formats.both`). The names are the ones the
journal's staged-file lists carry, so an instant's files find their table again.

Rules of the set (docs/design.md invariants 3 and 4)
  * Commit order is fixed: dead letters first, then the main tables (in parallel when
    there are several, :meth:`CommitTables.commit_mains`). Each main table's commit
    carries the checkpoint -- a table the batch routed nothing to too, with no files --
    so the batch is done when all of them hold it (:meth:`CommitTables.is_committed`), and
    the pipeline stands where the one furthest behind stands
    (:meth:`CommitTables.committed_offsets`).
  * A batch committed to ANY table of the set is finished, never rolled back
    (:meth:`CommitTables.holds_any`): rolling it back would delete files a table
    references. Rollback undoes the tables in reverse commit order.
  * A main-table file as the workers return it is routed to its table by the set's
    :class:`StagedRoute`; an INFLIGHT journaled before a set had several main tables lists
    them all under ``main`` in that form, and :meth:`CommitTables.upgraded` routes them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Protocol

from pipeline.commit.instant import BatchIdentity, Inflight, Instant
from pipeline.commit.offsets import PartitionOffsets
from pipeline.commit.types import DEAD_LETTER, MAIN, StagedBatch, TableCommitter
from pipeline.errors import TableSetChanged

__all__ = ["CommitTables", "StagedRoute", "one_main"]


class StagedRoute(Protocol):
    """A main-table file descriptor as a worker returns it -> (the name of its table, the
    descriptor that table reads). Total: a descriptor already routed maps to itself."""

    def __call__(self, descriptor: bytes) -> tuple[str, bytes]: ...


def one_main(descriptor: bytes) -> tuple[str, bytes]:
    """The route of a set with one main table: every main file is its own."""
    return MAIN, descriptor


class CommitTables:
    """A pipeline's tables by name, iterated in commit order."""

    def __init__(
        self,
        main: TableCommitter,
        dead_letter: TableCommitter | None = None,
        *,
        more_mains: Sequence[tuple[str, TableCommitter]] = (),
        route: StagedRoute = one_main,
        commit_threads: int = 8,
    ) -> None:
        mains = [(MAIN, main), *more_mains]
        names = [name for name, _ in mains]
        if DEAD_LETTER in names or len(set(names)) != len(names):
            raise ValueError(f"main tables need distinct names other than {DEAD_LETTER!r}")
        self._mains = tuple(names)
        self._tables: dict[str, TableCommitter] = {}
        if dead_letter is not None:
            self._tables[DEAD_LETTER] = dead_letter
        self._tables.update(mains)
        self.route = route
        self.commit_threads = max(1, commit_threads)

    @property
    def main(self) -> TableCommitter:
        """The first main table (``both``: the Iceberg one)."""
        return self._tables[MAIN]

    def get(self, name: str) -> TableCommitter | None:
        return self._tables.get(name)

    def is_main(self, name: str) -> bool:
        return name in self._mains

    def __iter__(self) -> Iterator[tuple[str, TableCommitter]]:
        """``(name, table)`` in commit order."""
        return iter(self._tables.items())

    def mains(self) -> Iterator[tuple[str, TableCommitter]]:
        """``(name, table)`` of the main tables, in commit order."""
        return ((name, self._tables[name]) for name in self._mains)

    def main_first(self) -> Iterator[tuple[str, TableCommitter]]:
        """``(name, table)`` in reverse commit order: rollback undoes the main tables
        first; begin, fence and refresh keep that order too."""
        return reversed(list(self._tables.items()))

    def others(self) -> Iterator[tuple[str, TableCommitter]]:
        """``(name, table)`` of the tables that are not main tables (dead letters)."""
        return ((n, t) for n, t in self._tables.items() if n not in self._mains)

    def commit_mains(self, commit: Callable[[str, TableCommitter], None]) -> None:
        """``commit(name, table)`` for every main table: on a pool of at most
        ``commit_threads`` when there are several, so the commit phase of many tables is
        not one commit after another. Every call runs to its end before the first error
        (in commit order) is raised: the set's roll-forward rule finishes the batch
        whichever of its tables committed."""
        mains = list(self.mains())
        if len(mains) == 1 or self.commit_threads == 1:
            for name, table in mains:
                commit(name, table)
            return
        with ThreadPoolExecutor(min(self.commit_threads, len(mains)), "commit") as pool:
            futures = [pool.submit(commit, name, table) for name, table in mains]
            wait(futures)
        for f in futures:
            f.result()

    def last(self) -> str:
        """The name of the table committed last."""
        return self._mains[-1]

    # -- which tables a batch touches -----------------------------------------------------
    def _listed(self, name: str, inflight: Inflight | None) -> bool:
        """A main table takes part in every batch (its commit carries the checkpoint);
        another one when the precommit ``inflight`` lists files for it."""
        if name not in self._tables:
            return False
        return self.is_main(name) or (inflight is not None and bool(inflight.files_of(name)))

    def holds(
        self,
        name: str,
        batch: BatchIdentity,
        end: PartitionOffsets | None,
        inflight: Inflight | None,
    ) -> bool:
        """Whether table ``name`` takes part in ``batch`` and holds it."""
        return self._listed(name, inflight) and self._tables[name].is_committed(batch, end)

    def needs_commit(self, inflight: Inflight, name: str) -> bool:
        """Whether the commit sequence commits ``inflight`` to table ``name``: a main
        table always (its commit is idempotent per batch), another one when it lists
        files and does not hold them yet (a repair re-runs the sequence after them)."""
        if not self._listed(name, inflight):
            return False
        return self.is_main(name) or not self.holds(name, inflight.batch, inflight.end, inflight)

    def holds_any(
        self, batch: BatchIdentity, end: PartitionOffsets | None, inflight: Inflight | None
    ) -> bool:
        """The roll-forward rule: some table of the set holds ``batch``, so its instant
        is finished, never rolled back."""
        return any(self.holds(name, batch, end, inflight) for name in self._tables)

    def staged_files(self, staged: StagedBatch) -> list[tuple[str, bytes]]:
        """``(table name, descriptor)`` of every file the workers staged: the main
        tables' files routed, then the dead letters."""
        routed = [self.route(d) for d in staged.data_files] + list(staged.routed_files)
        return routed + [(DEAD_LETTER, d) for d in staged.dead_letter_files]

    def check_holds_tables_of(self, inst: Instant) -> None:
        """TableSetChanged when ``inst`` staged files for a table this set does not hold
        (a route removed before the instant was recovered): finishing it without that
        table would lose its records, rolling it back could delete files another table
        of the set references."""
        inf = inst.inflight
        unknown = sorted({f.table for f in inf.files} - set(self._tables)) if inf else []
        if unknown:
            raise TableSetChanged(
                f"pending instant {inst.time} lists files for table(s) {', '.join(unknown)}, "
                "which the configured set no longer holds: restore their routes until a run "
                "has recovered it"
            )

    def upgraded(self, inst: Instant) -> Instant:
        """``inst`` with its main-table files routed to their tables (a no-op for an
        INFLIGHT written since the set routes them, and for one main table)."""
        inf = inst.inflight
        if inf is None:
            return inst
        files = []
        for f in inf.files:
            if f.table == MAIN:
                table, descriptor = self.route(f.descriptor)
                f = dataclasses.replace(f, table=table, descriptor=descriptor)
            files.append(f)
        return dataclasses.replace(inst, inflight=dataclasses.replace(inf, files=tuple(files)))

    # -- what the main tables hold --------------------------------------------------------
    def is_committed(self, batch: BatchIdentity, end: PartitionOffsets | None = None) -> bool:
        """Every main table holds ``batch``: it is done."""
        return all(t.is_committed(batch, end) for _, t in self.mains())

    def committed_offsets(self, pipeline_id: str) -> PartitionOffsets | None:
        """Where the pipeline stands: per partition, the main table furthest behind (every
        main table commits every batch, so they differ by one batch at most, and only
        while that batch's instant is pending)."""
        found = [o for _, t in self.mains() if (o := t.committed_offsets(pipeline_id))]
        if len(found) <= 1:
            return found[0] if found else None
        first, rest = found[0], found[1:]
        return PartitionOffsets(
            {tp: min([off, *(o.get(tp, off) for o in rest)]) for tp, off in first.items()}
        )

    def last_commit_time(self, pipeline_id: str) -> float | None:
        """The newest of the main tables' last commit times of the pipeline."""
        times = [t for _, m in self.mains() if (t := m.last_commit_time(pipeline_id)) is not None]
        return max(times) if times else None

    def main_epoch(self, pipeline_id: str) -> int:
        """The newest writer epoch a main table records (0: none)."""
        return max(t.latest_epoch(pipeline_id) or 0 for _, t in self.mains())

    def latest_epoch(self, pipeline_id: str) -> int:
        """The newest writer epoch any table of the set records (0: none)."""
        return max((t.latest_epoch(pipeline_id) or 0 for _, t in self), default=0)

    # -- every table ------------------------------------------------------------------------
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
