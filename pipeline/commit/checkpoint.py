"""The consumption checkpoint a table commit records, and its codec (docs/design.md invariant 2).

Format-neutral: the coordinator builds one :class:`CommitCheckpoint` per commit and every
table-format adapter stores it as it is, as string properties of the commit (Iceberg:
snapshot summary; Hudi: ``extraMetadata``) under the ``ingest.*`` keys below. This module
owns every one of those keys.

Operators
  * :meth:`CommitCheckpoint.to_summary`   -- checkpoint → ``{key: str}`` (JSON for offset
                                             maps: compact, keys sorted).
  * :meth:`CommitCheckpoint.from_summary` -- the inverse; None for a commit of no pipeline.

Invariants (pinned by ``tests/unit/commit/test_checkpoint.py``)
  * The encoding is stable byte for byte: tables outlive the code that wrote them.
  * ``from_summary(to_summary(c)) == c``; optional fields are written only when set.
  * A summary with a pipeline id but malformed checkpoint keys raises ``CommitError``,
    never yields a partial checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.commit.instant import BatchIdentity
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.errors import CommitError, one_line

__all__ = [
    "BATCH_END_KEY",
    "BATCH_ID_KEY",
    "COMMITTED_OFFSETS_KEY",
    "DATA_LOSS_BEFORE_KEY",
    "DATA_LOSS_KEY",
    "DEAD_LETTER_RECORDS_KEY",
    "EPOCH_KEY",
    "FENCE_KEY",
    "INCARNATION_KEY",
    "INSTANT_KEY",
    "PIPELINE_ID_KEY",
    "RANGES_BEFORE_KEY",
    "RANGES_KEY",
    "RECORDS_KEY",
    "CommitCheckpoint",
    "offsets_json",
    "parse_nested",
    "parse_offsets",
    "parse_ranges",
    "ranges_json",
]

# Commit summary keys of the consumption checkpoint.
PIPELINE_ID_KEY = "ingest.pipeline-id"
INCARNATION_KEY = "ingest.incarnation"
BATCH_ID_KEY = "ingest.batch-id"
EPOCH_KEY = "ingest.epoch"
RANGES_KEY = "ingest.ranges"  # {"topic": {"partition": [start, end]}} of this commit
COMMITTED_OFFSETS_KEY = "ingest.committed-offsets"  # {"topic": {"partition": next_offset}}
RECORDS_KEY = "ingest.records"
DATA_LOSS_KEY = "ingest.data-loss"  # optional, {"topic": {"partition": [start, end]}} skipped
DEAD_LETTER_RECORDS_KEY = "ingest.dead-letter-records"  # optional
INSTANT_KEY = "ingest.instant"  # optional: the journal instant this commit completed
# optional: the batch's planned end offsets (Spark's offset log entry). Part of the batch
# identity: a restored older checkpoint reuses batch ids for different ranges.
BATCH_END_KEY = "ingest.batch-end"
FENCE_KEY = "ingest.fence"  # "true" on the empty commit that fences older writer epochs
# Bounded history (pipeline.commit.history): {"topic": {"partition": [[start, end], ...]}},
# the merged ranges (data loss) this pipeline committed before this commit; survives the
# commits that recorded them.
RANGES_BEFORE_KEY = "ingest.ranges-before"
DATA_LOSS_BEFORE_KEY = "ingest.data-loss-before"


def ranges_json(ranges: Mapping[TopicPartition, tuple[int, int]]) -> str:
    nested: dict[str, dict[str, list[int]]] = {}
    for (topic, partition), (start, end) in sorted(ranges.items()):
        nested.setdefault(topic, {})[str(partition)] = [int(start), int(end)]
    return json.dumps(nested, separators=(",", ":"), sort_keys=True)


def offsets_json(offsets: Mapping[TopicPartition, int]) -> str:
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        nested.setdefault(topic, {})[str(partition)] = int(offset)
    return json.dumps(nested, separators=(",", ":"), sort_keys=True)


def parse_nested(text: str, key: str) -> Iterator[tuple[TopicPartition, Any]]:
    """``{"topic": {"partition": value}}`` as ``(TopicPartition, value)`` pairs."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{key} is not a JSON object")
    for topic, partitions in data.items():
        if not isinstance(partitions, dict):
            raise ValueError(f"{key}[{topic!r}] is not a JSON object")
        for partition, value in partitions.items():
            yield TopicPartition(str(topic), int(partition)), value


def parse_ranges(text: str, key: str) -> dict[TopicPartition, tuple[int, int]]:
    out: dict[TopicPartition, tuple[int, int]] = {}
    for tp, value in parse_nested(text, key):
        if not isinstance(value, list) or len(value) != 2:
            raise ValueError(f"{key}: {tp} is not [start, end]")
        out[tp] = (int(value[0]), int(value[1]))
    return out


def parse_offsets(text: str, key: str) -> dict[TopicPartition, int]:
    return {tp: int(value) for tp, value in parse_nested(text, key)}


@dataclass(frozen=True)
class CommitCheckpoint:
    """The consumption checkpoint one table commit records.

    ``ranges``: this commit's half-open ``[start, end)`` per (topic, partition);
    ``committed_offsets``: cumulative next offset per (topic, partition) after this commit;
    ``data_loss``: offset ranges skipped because Kafka no longer had them (empty: none);
    ``instant``: the journal instant of the commit; ``batch_end``: the batch's planned end
    offsets (part of the batch identity).
    Keys are ``TopicPartition`` named tuples (plain ``(topic, partition)`` tuples compare
    and hash equal, so they work at runtime too).
    """

    pipeline_id: str
    incarnation: str
    batch_id: int
    epoch: int
    ranges: Mapping[TopicPartition, tuple[int, int]]
    committed_offsets: Mapping[TopicPartition, int]
    records: int
    data_loss: Mapping[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    dead_letter_records: int = 0
    instant: str | None = None
    batch_end: Mapping[TopicPartition, int] | None = None

    def to_summary(self) -> dict[str, str]:
        """Commit summary properties (all strings, JSON for the offset maps)."""
        summary = {
            PIPELINE_ID_KEY: self.pipeline_id,
            INCARNATION_KEY: self.incarnation,
            BATCH_ID_KEY: str(int(self.batch_id)),
            EPOCH_KEY: str(int(self.epoch)),
            RANGES_KEY: ranges_json(self.ranges),
            COMMITTED_OFFSETS_KEY: offsets_json(self.committed_offsets),
            RECORDS_KEY: str(int(self.records)),
        }
        if self.data_loss:
            summary[DATA_LOSS_KEY] = ranges_json(self.data_loss)
        if self.dead_letter_records:
            summary[DEAD_LETTER_RECORDS_KEY] = str(int(self.dead_letter_records))
        if self.instant:
            summary[INSTANT_KEY] = self.instant
        if self.batch_end is not None:
            summary[BATCH_END_KEY] = offsets_json(self.batch_end)
        return summary

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> CommitCheckpoint | None:
        """The checkpoint in a commit summary; None when it carries none.

        A summary with a pipeline id but malformed checkpoint keys raises CommitError.
        """
        pipeline_id = summary.get(PIPELINE_ID_KEY)
        if pipeline_id is None:
            return None
        try:
            data_loss_text = summary.get(DATA_LOSS_KEY)
            return cls(
                pipeline_id=str(pipeline_id),
                incarnation=str(summary[INCARNATION_KEY]),
                batch_id=int(summary[BATCH_ID_KEY]),
                epoch=int(summary[EPOCH_KEY]),
                ranges=parse_ranges(summary[RANGES_KEY], RANGES_KEY),
                committed_offsets=parse_offsets(
                    summary[COMMITTED_OFFSETS_KEY], COMMITTED_OFFSETS_KEY
                ),
                records=int(summary[RECORDS_KEY]),
                data_loss=(
                    parse_ranges(data_loss_text, DATA_LOSS_KEY)
                    if data_loss_text is not None
                    else {}
                ),
                dead_letter_records=int(summary.get(DEAD_LETTER_RECORDS_KEY) or 0),
                instant=summary.get(INSTANT_KEY) or None,
                batch_end=(
                    parse_offsets(summary[BATCH_END_KEY], BATCH_END_KEY)
                    if BATCH_END_KEY in summary
                    else None
                ),
            )
        except (KeyError, ValueError, TypeError) as e:
            raise CommitError(
                f"snapshot summary of pipeline {pipeline_id!r} has a malformed checkpoint: "
                f"{one_line(e)}"
            ) from e


def find_batch(
    checkpoints: Iterable[tuple[str, CommitCheckpoint]],
    incarnation: str,
    batch_id: int,
    batch_end: Mapping[TopicPartition, int] | None,
) -> str | None:
    """The commit (its key in ``checkpoints``: a pipeline's ``(commit, checkpoint)`` pairs,
    newest first) of batch ``batch_id`` of ``incarnation``, with the same planned end when
    both know it (a checkpoint restored from a backup reuses batch ids for other ranges);
    None when the batches of that incarnation went below ``batch_id`` (they commit in order)."""
    mine = None if batch_end is None else {(t, p): o for (t, p), o in batch_end.items()}
    for key, cp in checkpoints:
        if cp.incarnation != incarnation:
            continue
        if cp.batch_id == batch_id:
            logged = cp.batch_end
            if mine is not None and logged is not None and dict(logged.items()) != mine:
                continue  # same id, other range: a restored older checkpoint
            return key
        if cp.batch_id < batch_id:
            return None
    return None


class CheckpointReads:
    """The reads a ``TableCommitter`` makes of its table's checkpoints, for a table that
    lists them newest first (``_checkpoints``: a pipeline's ``(commit, checkpoint)`` pairs,
    read afresh on every call)."""

    def _checkpoints(self, pipeline_id: str) -> Iterator[tuple[str, CommitCheckpoint]]:
        raise NotImplementedError

    def latest_checkpoint(self, pipeline_id: str) -> CommitCheckpoint | None:
        return next((cp for _, cp in self._checkpoints(pipeline_id)), None)

    def is_committed(self, batch: BatchIdentity, end: PartitionOffsets | None = None) -> bool:
        found = find_batch(
            self._checkpoints(batch.pipeline_id), batch.incarnation, batch.batch_id, end
        )
        return found is not None

    def committed_offsets(self, pipeline_id: str) -> PartitionOffsets | None:
        cp = self.latest_checkpoint(pipeline_id)
        if cp is None:
            return None
        return PartitionOffsets(
            {TopicPartition(t, p): off for (t, p), off in cp.committed_offsets.items()}
        )
