"""The batch in flight: what one Spark batch carries through the coordinator's sequence.

One :class:`InFlightBatch` per :meth:`Coordinator.run_batch
<pipeline.commit.coordinator.Coordinator.run_batch>` call, never kept on the coordinator:
the batch's identity and planned offsets, the broker's record counter for the coverage
check, the instants recovery finished before it, the phase timings, and how far the
sequence got -- REQUESTED (:meth:`~InFlightBatch.is_requested`), precommitted
(:meth:`~InFlightBatch.is_precommitted`), committed to which tables
(:meth:`~InFlightBatch.is_committed_to`, :meth:`~InFlightBatch.is_partly_committed`,
:meth:`~InFlightBatch.is_committed`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pipeline.commit.instant import BatchIdentity, Inflight
from pipeline.commit.offsets import PartitionOffsets
from pipeline.commit.types import MAIN, RecordCounter, Recovered

__all__ = ["InFlightBatch"]


@dataclass
class InFlightBatch:
    """One batch between its dedupe and its journal's COMPLETED marker."""

    identity: BatchIdentity
    start: PartitionOffsets | None
    end: PartitionOffsets
    count: RecordCounter | None = None  # the coverage check's oracle (invariant 8)
    recovered: list[tuple[str, Recovered]] = field(default_factory=list)
    instant: str | None = None  # minted and REQUESTED
    inflight: Inflight | None = None  # precommitted: INFLIGHT durable
    committed_to: list[str] = field(default_factory=list)  # tables, in commit order
    timings: dict[str, float] = field(default_factory=dict)  # phase -> seconds
    clock: Callable[[], float] = time.monotonic
    _lap: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self._lap = self.clock()

    @property
    def batch_id(self) -> int:
        return self.identity.batch_id

    def lap(self, phase: str) -> None:
        """``phase`` took the time since the previous lap (or since the batch began)."""
        now = self.clock()
        self.timings[phase] = now - self._lap
        self._lap = now

    def is_requested(self) -> bool:
        """An instant was minted for the batch and REQUESTED in the journal."""
        return self.instant is not None

    def is_precommitted(self) -> bool:
        """INFLIGHT is durable: the staged files and the checkpoint to commit."""
        return self.inflight is not None

    def is_committed_to(self, table: str) -> bool:
        return table in self.committed_to

    def is_partly_committed(self) -> bool:
        """Some table holds the batch but the main table does not yet: such a batch is
        finished by recovery, never rolled back (docs/design.md invariant 4)."""
        return bool(self.committed_to) and not self.is_committed()

    def is_committed(self) -> bool:
        """The main table holds the batch: it is visible (docs/design.md invariant 3)."""
        return self.is_committed_to(MAIN)
