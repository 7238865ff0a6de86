"""The one seam between the runtime and a batch coordinator: :class:`BatchCoordinator`.

Both coordinators satisfy it -- :class:`~pipeline.commit.coordinator.Coordinator`
(exactly-once: journal, epoch, recovery) and
:class:`~pipeline.commit.at_least_once.AtLeastOnceCoordinator` (plain appends) -- and
:func:`~pipeline.commit.coordinator.make_coordinator` picks one; the runtime
(:mod:`pipeline.runtime.batches`, :mod:`pipeline.runtime.telemetry`, :mod:`pipeline.app`)
holds only this type.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pipeline.commit.offsets import PartitionOffsets
from pipeline.commit.types import BatchOutcome, RecordCounter, RereadFn, WriteFn

__all__ = ["BatchCoordinator"]


@runtime_checkable
class BatchCoordinator(Protocol):
    """Commits each Spark batch into a pipeline's tables."""

    @property
    def pipeline_id(self) -> str: ...

    @property
    def epoch(self) -> int:
        """The writer epoch this run's commits carry (0: none acquired, or no fencing)."""
        ...

    @property
    def exactly_once(self) -> bool:
        """Whether batches are deduplicated, fenced and recovered (``commit.mode``)."""
        ...

    def acquire_epoch(self, owner: str = "") -> int:
        """Take a writer epoch above every earlier one and fence the tables with it."""
        ...

    def check_epoch(self) -> None:
        """Raise ``FencedError`` when a newer writer took over."""
        ...

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
        """One batch: ``write`` runs the workers; ``reread`` writes other ranges than
        Spark planned and ``count`` counts the broker's records in ranges read with holes
        (the exactly-once checks of docs/design.md invariant 8 use them)."""
        ...
