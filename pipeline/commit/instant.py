"""Instants: the protocol messages of the two-phase commit, as named, serialisable types.

An instant is one attempt to commit one Spark batch. Its life:

    REQUESTED ──▶ INFLIGHT ──▶ COMPLETED
        │             │
        └─────────────┴──────▶ ROLLED_BACK

* ``Requested``  -- written before any worker runs: the batch identity (pipeline,
  checkpoint incarnation, batch id), the writer epoch and the planned offset ranges.
* ``Inflight``   -- the precommit: the complete list of staged files (path, size, records,
  the format adapter's own file descriptor) plus the checkpoint the commit will carry.
  Once durable, the batch can be committed without recomputing it.
* ``Completed``  -- written after the table commit succeeded (the table commit itself is
  the commit point; this marker only saves recovery a table look-up).
* ``RolledBack`` -- the instant's files were deleted; it will never commit.
"""

from __future__ import annotations

import base64
import enum
import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pipeline.commit.offsets import PartitionOffsets, TopicPartition

INSTANT_TIME_FORMAT = "%Y%m%d%H%M%S%f"  # trimmed to milliseconds: yyyyMMddHHmmssSSS


class InstantState(enum.Enum):
    REQUESTED = "requested"
    INFLIGHT = "inflight"
    COMPLETED = "completed"
    ROLLED_BACK = "rolled_back"


def format_instant_time(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime(INSTANT_TIME_FORMAT)[:17]


def parse_instant_time(text: str) -> datetime:
    if len(text) != 17 or not text.isdigit():
        raise ValueError(f"instant time {text!r} is not yyyyMMddHHmmssSSS")
    return datetime.strptime(text + "000", INSTANT_TIME_FORMAT).replace(tzinfo=UTC)


def next_instant_time(after: str | None, now: datetime | None = None) -> str:
    """A time strictly greater than ``after`` (clock going backwards included)."""
    t = format_instant_time(now or datetime.now(UTC))
    if after is not None and t <= after:
        t = format_instant_time(parse_instant_time(after) + timedelta(milliseconds=1))
    return t


def staged_write_id(pipeline_id: str, instant: str) -> str:
    """Names staged files: the instant time plus a tag of the pipeline, so a rollback
    never touches files of another pipeline writing the same table."""
    return f"{instant}-{hashlib.sha1(pipeline_id.encode()).hexdigest()[:8]}"


def _ranges_to_json(
    ranges: dict[TopicPartition, tuple[int, int]],
) -> dict[str, dict[str, list[int]]]:
    out: dict[str, dict[str, list[int]]] = {}
    for (t, p), (s, e) in sorted(ranges.items()):
        out.setdefault(t, {})[str(p)] = [s, e]
    return out


def _ranges_from_json(data: dict[str, Any]) -> dict[TopicPartition, tuple[int, int]]:
    return {
        TopicPartition(t, int(p)): (int(v[0]), int(v[1]))
        for t, parts in data.items()
        for p, v in parts.items()
    }


@dataclass(frozen=True)
class BatchIdentity:
    pipeline_id: str
    incarnation: str
    batch_id: int

    def to_json(self) -> dict[str, Any]:
        return {
            "pipeline_id": self.pipeline_id,
            "incarnation": self.incarnation,
            "batch_id": self.batch_id,
        }


@dataclass(frozen=True)
class Requested:
    time: str
    batch: BatchIdentity
    epoch: int
    start: PartitionOffsets
    end: PartitionOffsets

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            **self.batch.to_json(),
            "epoch": self.epoch,
            "start": self.start.to_dict(),
            "end": self.end.to_dict(),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Requested:
        return cls(
            time=str(d["time"]),
            batch=BatchIdentity(str(d["pipeline_id"]), str(d["incarnation"]), int(d["batch_id"])),
            epoch=int(d["epoch"]),
            start=PartitionOffsets.from_dict(d["start"]),
            end=PartitionOffsets.from_dict(d["end"]),
        )


@dataclass(frozen=True)
class StagedFile:
    """One file a worker staged: enough to check it survived and to commit it."""

    table: str  # the name of its table in the set (``main``, ``dead_letter``, ...)
    path: str
    size: int
    records: int
    descriptor: bytes  # the format adapter's serialized file description

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "path": self.path,
            "size": self.size,
            "records": self.records,
            "descriptor": base64.b64encode(self.descriptor).decode("ascii"),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StagedFile:
        return cls(
            str(d["table"]),
            str(d["path"]),
            int(d["size"]),
            int(d["records"]),
            base64.b64decode(d["descriptor"]),
        )


@dataclass(frozen=True)
class Inflight:
    """The precommit: everything needed to finish the commit without the workers."""

    time: str
    batch: BatchIdentity
    epoch: int
    files: tuple[StagedFile, ...]
    ranges: dict[TopicPartition, tuple[int, int]]
    committed: PartitionOffsets
    records: int
    dead_letter_records: int = 0
    overlap_dropped: int = 0
    data_loss: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    end: PartitionOffsets | None = None  # the batch's planned end (part of its identity)

    def files_of(self, table: str) -> list[StagedFile]:
        return [f for f in self.files if f.table == table]

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time,
            **self.batch.to_json(),
            "epoch": self.epoch,
            "files": [f.to_json() for f in self.files],
            "ranges": _ranges_to_json(self.ranges),
            "committed": self.committed.to_dict(),
            "records": self.records,
            "dead_letter_records": self.dead_letter_records,
            "overlap_dropped": self.overlap_dropped,
            "data_loss": _ranges_to_json(self.data_loss),
            "end": self.end.to_dict() if self.end is not None else None,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Inflight:
        return cls(
            time=str(d["time"]),
            batch=BatchIdentity(str(d["pipeline_id"]), str(d["incarnation"]), int(d["batch_id"])),
            epoch=int(d["epoch"]),
            files=tuple(StagedFile.from_json(f) for f in d["files"]),
            ranges=_ranges_from_json(d["ranges"]),
            committed=PartitionOffsets.from_dict(d["committed"]),
            records=int(d["records"]),
            dead_letter_records=int(d.get("dead_letter_records", 0)),
            overlap_dropped=int(d.get("overlap_dropped", 0)),
            data_loss=_ranges_from_json(d.get("data_loss", {})),
            end=PartitionOffsets.from_dict(d["end"]) if d.get("end") is not None else None,
        )


@dataclass(frozen=True)
class Instant:
    """An instant as recovery sees it: its latest durable state and payloads."""

    time: str
    state: InstantState
    requested: Requested | None = None
    inflight: Inflight | None = None

    @property
    def batch(self) -> BatchIdentity | None:
        src = self.inflight or self.requested
        return src.batch if src else None

    @property
    def end(self) -> PartitionOffsets | None:
        if self.inflight is not None and self.inflight.end is not None:
            return self.inflight.end
        return self.requested.end if self.requested is not None else None

    @property
    def epoch(self) -> int | None:
        src = self.inflight or self.requested
        return src.epoch if src else None

    @property
    def is_pending(self) -> bool:
        return self.state in (InstantState.REQUESTED, InstantState.INFLIGHT)
