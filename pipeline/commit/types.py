"""What the batch coordinators exchange with the workers, the table formats and observers.

Spark-free and format-free: the Spark adapter produces :class:`StagedBatch`es (the
workers' answer), the format adapters implement :class:`TableCommitter`, and observers
(metrics, logs, the demo) consume :class:`BatchOutcome` -- which carries everything they
need, so no observer re-reads a table.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from pipeline.commit.checkpoint import CommitCheckpoint
from pipeline.commit.instant import BatchIdentity, Inflight
from pipeline.commit.offsets import PartitionOffsets, TopicPartition

# a pipeline's (first) main table and its dead-letter table, as named in the journal's
# staged-file lists
MAIN, DEAD_LETTER = "main", "dead_letter"


class Outcome(enum.StrEnum):
    """What happened to one Spark batch (a ``str``: compares and logs as its value)."""

    COMMITTED = "committed"  # written and committed now
    REPLAY_SKIPPED = "replay_skipped"  # (incarnation, batch id) already committed
    RECOMMITTED = "recommitted"  # an intact precommitted instant committed by recovery


class Recovered(enum.StrEnum):
    """What start-up recovery did with one pending instant (``BatchOutcome.recovered``)."""

    COMPLETED = "completed"  # in the table already: only the marker was missing
    RECOMMITTED = "recommitted"  # finished (rolled forward)
    ROLLED_BACK = "rolled_back"  # its staged files deleted, the rollback recorded


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
    # files a worker staged for a named main table of a routed set
    routed_files: list[tuple[str, bytes]] = field(default_factory=list)
    dead_letter_files: list[bytes] = field(default_factory=list)
    stats: list[PartitionStats] = field(default_factory=list)
    dead_letter_records: int = 0
    # records carrying fields the configured schema lacks, and those names (bounded)
    unknown_field_records: int = 0
    unknown_fields: list[str] = field(default_factory=list)

    @property
    def records(self) -> int:
        """Records written (main + dead letters), overlap excluded."""
        return sum(s.records for s in self.stats)

    @property
    def dropped(self) -> int:
        return sum(s.dropped for s in self.stats)


class TableCommitter(Protocol):
    """What the coordinator needs from a table-format adapter."""

    def is_committed(self, batch: BatchIdentity, end: PartitionOffsets | None = None) -> bool:
        """Whether (pipeline, incarnation, batch) is committed -- with the same planned end
        offsets when given: a checkpoint restored from a backup reuses batch ids for other
        ranges, and such a batch must not be mistaken for the committed one."""
        ...

    def committed_offsets(self, pipeline_id: str) -> PartitionOffsets | None: ...

    def refresh(self) -> None:
        """Drop any cached view of the table: the next read is fresh. A check that halts,
        skips, rewinds or drops decides on a fresh read (docs/design.md invariant 14)."""
        ...

    def latest_epoch(self, pipeline_id: str) -> int | None: ...

    def last_commit_time(self, pipeline_id: str) -> float | None:
        """Unix time of the pipeline's newest commit to the table (None: none yet); read
        once at start, so observers never read the table themselves."""
        ...

    def commit(self, files: list[bytes], checkpoint: CommitCheckpoint) -> None:
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
    """One batch, as observers see it. The size fields are set for batches that commit
    (committed, recommitted, at-least-once appends); zero/empty/None otherwise."""

    batch_id: int
    outcome: Outcome
    instant: str | None = None
    records: int = 0
    dead_letter_records: int = 0
    overlap_dropped: int = 0
    files: int = 0  # main + dead-letter files committed
    ranges: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    committed: PartitionOffsets = field(default_factory=PartitionOffsets)
    timings: dict[str, float] = field(default_factory=dict)
    recovered: list[tuple[str, Recovered]] = field(default_factory=list)  # (instant, action)
    bytes: int = 0  # main tables' data-file bytes committed by this batch
    dead_letter_files: int = 0
    dead_letter_bytes: int = 0
    data_loss: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    epoch: int | None = None  # the writer epoch the commit carried (None: no epoch)
    unknown_field_records: int = 0  # written by this run's workers (not by a recommit)
    unknown_fields: list[str] = field(default_factory=list)
    # records committed per main table (its name in the set; dead letters excluded)
    table_records: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of_commit(cls, batch_id: int, inf: Inflight, epoch: int, seconds: float) -> BatchOutcome:
        """The outcome of committing the precommitted ``inf`` (in ``seconds``)."""
        dead_files = inf.files_of(DEAD_LETTER)
        main_files = [f for f in inf.files if f.table != DEAD_LETTER]
        per_table: dict[str, int] = {}
        for f in main_files:
            per_table[f.table] = per_table.get(f.table, 0) + f.records
        return cls(
            batch_id,
            Outcome.COMMITTED,
            instant=inf.time,
            records=inf.records,
            dead_letter_records=inf.dead_letter_records,
            overlap_dropped=inf.overlap_dropped,
            files=len(inf.files),
            ranges=inf.ranges,
            committed=inf.committed,
            timings={"commit": seconds},
            bytes=sum(f.size for f in main_files),
            dead_letter_files=len(dead_files),
            dead_letter_bytes=sum(f.size for f in dead_files),
            data_loss=dict(inf.data_loss),
            epoch=epoch,
            table_records=per_table,
        )


# write(write_id, drop_below) -> staged files; drop_below: offsets under it are dropped
WriteFn = Callable[[str, PartitionOffsets], StagedBatch]

# reread(start, end) -> a write of exactly [start, end) per partition, whatever Spark
# planned: a gap re-read (commit.onGap: rewind) and the repair of an instant whose main
# files were lost after its dead letters were committed
RereadFn = Callable[[PartitionOffsets, PartitionOffsets], WriteFn]

# data_loss(staged, ranges) -> the ranges of the batch recorded as lost (Kafka no longer
# had them)
DataLossFn = Callable[
    [StagedBatch, dict[TopicPartition, tuple[int, int]]],
    dict[TopicPartition, tuple[int, int]],
]

Range = tuple[int, int]

# ranges -> records the broker delivers in each (read_committed: markers, aborted and
# compacted-away offsets are not records); asked only for ranges read with holes (the
# coverage check's oracle, docs/design.md invariant 8)
RecordCounter = Callable[[Mapping[TopicPartition, Range]], Mapping[TopicPartition, int]]
