"""Offset planning for the Kafka source: pure functions, no Kafka, no Spark.

Operators
  * ``PartitionOffsets``  -- ``{(topic, partition): next_offset}``; the checkpoint value.
  * ``offsets_with_topic_ids`` / ``topic_ids_in`` -- the source's offset-log entry also
                             records each topic's id (``"#topicIds"``, a key no topic can
                             have: ``#`` is not allowed in topic names).
  * ``reconcile``         -- compares a start position with what the broker now reports
                             (new, vanished, shrunk and retention-truncated partitions, a
                             re-created topic told from a truncated log by the topic id).
  * ``plan_end``          -- admission control: the end offsets of the next batch.
  * ``hold_trigger``      -- admission control: too few records yet, plan no batch.
  * ``split_ranges``      -- cuts per-partition ranges into contiguous sub-ranges (tasks).
  * ``pack_ranges``       -- groups ranges into a few tasks of similar size (one consumer
                             per task reads all of its group's ranges).

Invariants
  * Ranges are half-open ``[start, end)`` and never overlap; the sub-ranges of one
    partition tile its batch range exactly (no offset read twice, none skipped).
  * ``plan_end`` never returns an offset below ``start`` nor above the broker's end, and
    returns ``start`` itself when there is nothing to read (Spark's "no new data").
  * Planning is deterministic: the same inputs give the same ranges, so a replayed batch
    reads exactly the same records (docs/design.md invariant 1).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pipeline.errors import (
    DataLossError,
    LogTruncatedError,
    PartitionStateError,
    TopicRecreatedError,
)

# The offset-log key holding {topic: topic id}. Kafka topic names are [a-zA-Z0-9._-]+.
TOPIC_IDS_KEY = "#topicIds"


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]"


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Records ``[start, end)`` of one partition: the unit a task reads."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise ValueError(f"bad offset range {self}")

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        return self.end - self.start


class PartitionOffsets(Mapping[TopicPartition, int]):
    """Immutable ``(topic, partition) -> next offset`` map, serialised as Spark offsets.

    The JSON form ``{"topic": {"0": 42}}`` is what Spark stores in the offset log.
    """

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[TopicPartition, int] | None = None) -> None:
        self._data: dict[TopicPartition, int] = dict(sorted((data or {}).items()))

    def __getitem__(self, key: TopicPartition) -> int:
        return self._data[key]

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"PartitionOffsets({self.to_json()})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PartitionOffsets):
            return self._data == other._data
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._data.items()))

    def to_dict(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in self._data.items():
            out.setdefault(topic, {})[str(partition)] = offset
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Mapping[str, Mapping[str, int]]) -> PartitionOffsets:
        out: dict[TopicPartition, int] = {}
        for topic, parts in data.items():
            if topic == TOPIC_IDS_KEY:
                continue
            if not isinstance(parts, Mapping):
                raise ValueError(f"offsets for topic {topic!r} must be an object")
            for partition, offset in parts.items():
                out[TopicPartition(topic, int(partition))] = int(offset)
        return cls(out)

    @classmethod
    def from_json(cls, text: str) -> PartitionOffsets:
        return cls.from_dict(json.loads(text))

    def updated(self, other: Mapping[TopicPartition, int]) -> PartitionOffsets:
        merged = dict(self._data)
        merged.update(other)
        return PartitionOffsets(merged)


def offsets_with_topic_ids(offsets: PartitionOffsets, ids: Mapping[str, str]) -> dict[str, Any]:
    """The offset-log form of ``offsets`` with the ids of its topics (those known)."""
    out: dict[str, Any] = dict(offsets.to_dict())
    known = {t: ids[t] for t in out if t in ids}
    if known:
        out[TOPIC_IDS_KEY] = known
    return out


def topic_ids_in(logged: Mapping[str, Any]) -> dict[str, str]:
    """The topic ids an offset-log entry recorded ({} when written before topic ids)."""
    ids = logged.get(TOPIC_IDS_KEY)
    return {str(t): str(i) for t, i in ids.items()} if isinstance(ids, Mapping) else {}


@dataclass(frozen=True)
class BrokerOffsets:
    """What the broker reports for one partition: log start and end (high watermark)."""

    low: int
    high: int


@dataclass
class Reconciled:
    """A start position made consistent with the broker's current partitions."""

    start: PartitionOffsets
    new_partitions: list[TopicPartition] = field(default_factory=list)
    # partition -> (wanted offset, first offset still available), failOnDataLoss=false only
    data_loss: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)


def reconcile(
    start: PartitionOffsets,
    broker: Mapping[TopicPartition, BrokerOffsets],
    *,
    fail_on_data_loss: bool,
    recorded_ids: Mapping[str, str] | None = None,
    current_ids: Mapping[str, str] | None = None,
) -> Reconciled:
    """Check ``start`` against the broker; add new partitions at their earliest offset.

    Raises ``TopicRecreatedError`` when a topic's id differs from the one recorded with
    ``start`` (deleted and re-created: its offsets restarted, wherever its end now is).
    Raises ``LogTruncatedError`` when the same topic's end is below our next offset, and
    ``PartitionStateError`` when a partition is gone, or its end is below our next offset
    and no id was recorded to tell the two apart: continuing would either stall or
    silently skip records. Raises ``DataLossError`` when offsets we still need were
    deleted by retention and ``fail_on_data_loss`` is set.
    """
    was, now = recorded_ids or {}, current_ids or {}
    for topic in sorted({tp.topic for tp in start}):
        if topic in was and topic in now and was[topic] != now[topic]:
            raise TopicRecreatedError(
                f"topic {topic} was deleted and re-created (topic id {was[topic]}, now "
                f"{now[topic]}): its offsets restarted, so the checkpoint's say nothing about "
                "it; refusing to continue. Start its partitions explicitly with "
                "startingOffsets (and a new checkpoint) to read the new topic"
            )
    out: dict[TopicPartition, int] = {}
    result = Reconciled(start=start)
    for tp, offset in start.items():
        b = broker.get(tp)
        if b is None:
            raise PartitionStateError(
                f"partition {tp} was at offset {offset} but no longer exists on the broker "
                "(topic deleted or partitions reduced); refusing to continue"
            )
        if b.high < offset and tp.topic in was and was[tp.topic] == now.get(tp.topic):
            raise LogTruncatedError(
                f"partition {tp}: the log now ends at offset {b.high}, below the committed "
                f"next offset {offset}, in the same topic (id {was[tp.topic]}): the broker "
                f"truncated it (an unclean leader election?) and will hand out offsets "
                f"[{b.high}, {offset}) again to new records, which the tables already hold; "
                "refusing to continue"
            )
        if b.high < offset:
            raise PartitionStateError(
                f"partition {tp}: committed next offset {offset} is beyond the partition's end "
                f"offset {b.high} (topic deleted and recreated, or its log truncated); "
                "refusing to continue. Reset this partition explicitly with startingOffsets "
                "to resume"
            )
        if offset < b.low:
            if fail_on_data_loss:
                raise DataLossError(
                    f"partition {tp}: next offset {offset} is below the log start offset "
                    f"{b.low}; records [{offset}, {b.low}) ({b.low - offset} records) were "
                    "deleted by retention before they were ingested (set failOnDataLoss=false "
                    "to skip them)"
                )
            result.data_loss[tp] = (offset, b.low)
            offset = b.low
        out[tp] = offset
    for tp in sorted(set(broker) - set(start)):
        out[tp] = broker[tp].low
        result.new_partitions.append(tp)
    result.start = PartitionOffsets(out)
    return result


def plan_end(
    start: PartitionOffsets,
    latest: Mapping[TopicPartition, int],
    max_records: int | None,
) -> PartitionOffsets:
    """End offsets of the next batch: everything available, or at most ``max_records``.

    The budget is spread fairly: every partition with data gets an equal share, and what a
    small partition does not use goes to the others (water-filling), so one hot partition
    cannot starve the rest and the batch is never smaller than the budget allows.
    """
    available = {tp: max(0, latest.get(tp, off) - off) for tp, off in start.items()}
    if max_records is None:
        take = available
    else:
        if max_records <= 0:
            raise ValueError("max_records must be positive")
        take = _water_fill(available, max_records)
    return PartitionOffsets({tp: off + take[tp] for tp, off in start.items()})


def available_records(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]
) -> int:
    """Records between ``start`` and ``latest``, summed over ``start``'s partitions."""
    return sum(max(0, latest.get(tp, off) - off) for tp, off in start.items())


def hold_trigger(
    available: int,
    min_records: int | None,
    waited_s: float,
    max_delay_s: float,
    *,
    read_all: bool = False,
) -> bool:
    """Whether a trigger plans no batch: ``minRecordsPerTrigger`` / ``maxTriggerDelay``.

    Held while fewer than ``min_records`` records are ``available`` and less than
    ``max_delay_s`` has passed (``waited_s``) since the last admitted batch; never held
    without a minimum or when the whole backlog must be read (``read_all``:
    Trigger.AvailableNow / once, which must not stop short).
    """
    if min_records is None or read_all:
        return False
    return available < min_records and waited_s < max_delay_s


def _water_fill(available: Mapping[TopicPartition, int], budget: int) -> dict[TopicPartition, int]:
    take = dict.fromkeys(available, 0)
    hungry = sorted((tp for tp, n in available.items() if n > 0), key=lambda t: available[t])
    while hungry and budget > 0:
        share, extra = divmod(budget, len(hungry))
        if share == 0:
            # fewer records left than partitions: give one each, in a stable order
            for tp in sorted(hungry)[:extra]:
                take[tp] += 1
            budget = 0
            break
        still: list[TopicPartition] = []
        for tp in hungry:
            room = available[tp] - take[tp]
            give = min(room, share)
            take[tp] += give
            budget -= give
            if available[tp] - take[tp] > 0:
                still.append(tp)
        hungry = still
    return take


def planned_ranges(start: PartitionOffsets, end: PartitionOffsets) -> list[OffsetRange]:
    """Non-empty per-partition ranges between two checkpoints (partitions new in ``end``
    start at 0 only if ``start`` lacks them, which reconcile prevents)."""
    out = []
    for tp, e in end.items():
        s = start.get(tp, e)
        if e > s:
            out.append(OffsetRange(tp.topic, tp.partition, s, e))
    return out


def split_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Cut ranges into at least ``min_partitions`` contiguous pieces where possible.

    Like Spark's Kafka source: large ranges are cut in proportion to their size, each
    piece is exact and contiguous, and a partition never yields more pieces than records.
    """
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        pieces = max(1, min(r.size, round(min_partitions * r.size / total)))
        step, rem = divmod(r.size, pieces)
        pos = r.start
        for i in range(pieces):
            n = step + (1 if i < rem else 0)
            out.append(OffsetRange(r.topic, r.partition, pos, pos + n))
            pos += n
        assert pos == r.end
    return out


def pack_ranges(ranges: Iterable[OffsetRange], tasks: int) -> list[list[OffsetRange]]:
    """Group ``ranges`` into at most ``tasks`` non-empty groups of similar record counts.

    Greedy largest-first onto the lightest group; deterministic (ties broken by order), so
    a replayed batch gets the same groups. Every range lands in exactly one group.
    """
    if tasks < 1:
        raise ValueError("tasks must be >= 1")
    todo = sorted((r for r in ranges if r.size > 0), key=lambda r: (-r.size, r))
    groups: list[list[OffsetRange]] = [[] for _ in range(min(tasks, len(todo)))]
    loads = [0] * len(groups)
    for r in todo:
        i = min(range(len(groups)), key=lambda g: (loads[g], g))
        groups[i].append(r)
        loads[i] += r.size
    return [sorted(g) for g in groups]
