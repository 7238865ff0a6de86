"""A run's totals, kept in driver memory for the progress display and ``ingest run``'s
summary line."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from pipeline.commit.offsets import PartitionOffsets
from pipeline.commit.types import BatchOutcome, Outcome


@dataclass
class RunStats:
    """Running totals the progress display and `status` read (driver memory only)."""

    batches: int = 0
    skipped: int = 0
    records: int = 0
    dead_letters: int = 0
    last: BatchOutcome | None = None
    committed: PartitionOffsets = field(default_factory=PartitionOffsets)
    overlap_dropped: int = 0
    recommitted: int = 0
    recovered: dict[str, int] = field(default_factory=dict)  # action -> instants
    epoch: int = 0
    fenced: bool = False
    error: BaseException | None = None
    stop_requested: bool = False  # request_stop() (SIGTERM/SIGINT) ended the run
    stop_cut_short: bool = False  # ... after run.stopTimeoutSeconds, a batch still running
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, outcome: BatchOutcome) -> None:
        """Count one batch's outcome."""
        with self.lock:
            self.last = outcome
            for _, action in outcome.recovered:
                self.recovered[action] = self.recovered.get(action, 0) + 1
            if outcome.outcome == Outcome.REPLAY_SKIPPED:
                self.skipped += 1
                return
            self.batches += 1
            self.records += outcome.records
            self.dead_letters += outcome.dead_letter_records
            self.overlap_dropped += outcome.overlap_dropped
            self.committed = outcome.committed
            if outcome.outcome == Outcome.RECOMMITTED:
                self.recommitted += 1
