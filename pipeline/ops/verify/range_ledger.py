"""Committed offset ranges: parsing commit metadata, range issues, windows, counting.

Pure functions over plain data (numpy for the per-window counting), so the bookkeeping
``ingest verify`` relies on is unit-tested without Kafka or a table.

Invariants
  * Ranges are half-open ``[start, end)`` Kafka offsets, as recorded in ``ingest.ranges``
    (and ``ingest.data-loss``) of every commit.
  * Expected offsets of a partition = union of its committed ranges minus the recorded
    data loss; windows tile the union of committed and lost ranges in offset order, so
    every committed offset is looked at exactly once.
  * Expired history (Iceberg keeps a bounded number of snapshots): the oldest retained
    commit of a pipeline carries ``ingest.ranges-before`` / ``ingest.data-loss-before``,
    the merged intervals committed (lost) before it; :func:`expired_history` turns them
    into stand-in commits so the expired ranges still count as committed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.commit.offsets import TopicPartition
from pipeline.ops.verify.model import PartitionVerdict, RangeIssue, _add_samples

RANGES_KEY = "ingest.ranges"
DATA_LOSS_KEY = "ingest.data-loss"
COMMITTED_KEY = "ingest.committed-offsets"
BATCH_ID_KEY = "ingest.batch-id"
INSTANT_KEY = "ingest.instant"
FENCE_KEY = "ingest.fence"
PIPELINE_KEY = "ingest.pipeline-id"
RANGES_BEFORE_KEY = "ingest.ranges-before"
DATA_LOSS_BEFORE_KEY = "ingest.data-loss-before"

Interval = tuple[int, int]


class MetadataError(ValueError):
    """A commit's ``ingest.*`` metadata cannot be parsed."""


def _nested(text: str, key: str) -> Iterator[tuple[TopicPartition, Any]]:
    try:
        data = json.loads(text)
    except ValueError as e:
        raise MetadataError(f"{key} is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise MetadataError(f"{key} is not a JSON object")
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise MetadataError(f"{key}[{topic!r}] is not a JSON object")
        for partition, value in parts.items():
            yield TopicPartition(str(topic), int(partition)), value


def parse_ranges(text: str, key: str = RANGES_KEY) -> dict[TopicPartition, Interval]:
    out: dict[TopicPartition, Interval] = {}
    for tp, value in _nested(text, key):
        if not isinstance(value, list) or len(value) != 2:
            raise MetadataError(f"{key}: {tp.topic}/{tp.partition} is not [start, end]")
        out[tp] = (int(value[0]), int(value[1]))
    return out


def parse_offsets(text: str, key: str = COMMITTED_KEY) -> dict[TopicPartition, int]:
    return {tp: int(v) for tp, v in _nested(text, key)}


def parse_intervals(text: str, key: str) -> dict[TopicPartition, list[Interval]]:
    """``{"topic": {"partition": [[start, end], ...]}}`` (the carried-forward keys)."""
    out: dict[TopicPartition, list[Interval]] = {}
    for tp, value in _nested(text, key):
        if not isinstance(value, list) or any(
            not isinstance(v, list) or len(v) != 2 for v in value
        ):
            raise MetadataError(f"{key}: {tp.topic}/{tp.partition} is not [[start, end], ...]")
        out[tp] = [(int(a), int(b)) for a, b in value]
    return out


def expired_history(
    commits: list[tuple[str, Mapping[str, Any]]],
) -> list[tuple[str, dict[str, str]]]:
    """Stand-in commits (oldest last, like ``commits``: newest first) for the ranges the
    expired snapshots recorded, per pipeline from its oldest retained commit's
    carried-forward intervals. Nothing when that commit carries none (history intact or
    written before the keys existed: then nothing was expired)."""
    oldest: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for commit, meta in commits:
        if meta.get(PIPELINE_KEY) is not None:
            oldest[str(meta[PIPELINE_KEY])] = (commit, meta)
    out: list[tuple[str, dict[str, str]]] = []
    for pipeline_id, (commit, meta) in sorted(oldest.items()):
        try:
            ranges = parse_intervals(meta.get(RANGES_BEFORE_KEY) or "{}", RANGES_BEFORE_KEY)
            lost = parse_intervals(meta.get(DATA_LOSS_BEFORE_KEY) or "{}", DATA_LOSS_BEFORE_KEY)
        except (MetadataError, ValueError, TypeError) as e:
            raise MetadataError(f"commit {commit}: malformed carried-forward ranges: {e}") from None
        depth = max((len(v) for v in (*ranges.values(), *lost.values())), default=0)
        for i in range(depth):  # one stand-in per interval index: one range per partition
            nested: dict[str, dict[str, list[int]]] = {}
            nested_lost: dict[str, dict[str, list[int]]] = {}
            for src, dst in ((ranges, nested), (lost, nested_lost)):
                for tp, spans in src.items():
                    if i < len(spans):
                        dst.setdefault(tp.topic, {})[str(tp.partition)] = list(spans[i])
            meta_out = {PIPELINE_KEY: pipeline_id, RANGES_KEY: json.dumps(nested)}
            if nested_lost:
                meta_out[DATA_LOSS_KEY] = json.dumps(nested_lost)
            out.append((f"expired-before-{commit}#{i}", meta_out))
    return out


@dataclass(frozen=True)
class CommitRanges:
    """The consumption checkpoint of one commit, as a table reader sees it."""

    commit: str  # Iceberg snapshot id or Hudi instant time
    ranges: dict[TopicPartition, Interval]
    data_loss: dict[TopicPartition, Interval] = field(default_factory=dict)
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    batch_id: str | None = None
    fence: bool = False

    @classmethod
    def from_metadata(cls, commit: str, meta: Mapping[str, Any]) -> CommitRanges | None:
        """None when the commit carries no checkpoint (written by someone else)."""
        if PIPELINE_KEY not in meta and RANGES_KEY not in meta:
            return None
        try:
            return cls(
                commit=commit,
                ranges=parse_ranges(meta[RANGES_KEY]) if meta.get(RANGES_KEY) else {},
                data_loss=(
                    parse_ranges(meta[DATA_LOSS_KEY], DATA_LOSS_KEY)
                    if meta.get(DATA_LOSS_KEY)
                    else {}
                ),
                committed=parse_offsets(meta[COMMITTED_KEY]) if meta.get(COMMITTED_KEY) else {},
                batch_id=str(meta[BATCH_ID_KEY]) if meta.get(BATCH_ID_KEY) is not None else None,
                fence=str(meta.get(FENCE_KEY, "")).lower() == "true",
            )
        except (MetadataError, ValueError, TypeError) as e:
            raise MetadataError(f"commit {commit}: malformed ingest metadata: {e}") from None


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, non-overlapping, non-adjacent union of half-open intervals."""
    out: list[Interval] = []
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def subtract(intervals: list[Interval], minus: list[Interval]) -> list[Interval]:
    """``intervals`` minus ``minus`` (both merged)."""
    out: list[Interval] = []
    for s, e in intervals:
        cur = s
        for ms, me in minus:
            if me <= cur or ms >= e:
                continue
            if ms > cur:
                out.append((cur, ms))
            cur = max(cur, me)
            if cur >= e:
                break
        if cur < e:
            out.append((cur, e))
    return out


def intersect(intervals: list[Interval], start: int, end: int) -> list[Interval]:
    return [(max(s, start), min(e, end)) for s, e in intervals if s < end and e > start]


def size(intervals: Iterable[Interval]) -> int:
    return sum(e - s for s, e in intervals)


def inside(offsets: np.ndarray, intervals: list[Interval]) -> np.ndarray:
    """Boolean mask: which offsets fall in one of the merged ``intervals``."""
    if not intervals or offsets.size == 0:
        return np.zeros(offsets.shape, dtype=bool)
    starts = np.fromiter((s for s, _ in intervals), dtype=np.int64, count=len(intervals))
    ends = np.fromiter((e for _, e in intervals), dtype=np.int64, count=len(intervals))
    idx = np.searchsorted(starts, offsets, side="right") - 1
    ok = idx >= 0
    clipped = np.where(ok, idx, 0)
    return ok & (offsets < ends[clipped])


def windows(intervals: list[Interval], window: int) -> Iterator[Interval]:
    """``[a, b)`` chunks of at most ``window`` offsets tiling ``intervals`` in order."""
    step = max(1, int(window))
    for s, e in intervals:
        a = s
        while a < e:
            b = min(e, a + step)
            yield a, b
            a = b


@dataclass
class PartitionPlan:
    """What the commits say about one partition."""

    committed: list[Interval]  # merged committed ranges
    lost: list[Interval]  # merged recorded data loss
    expected: list[Interval]  # committed minus lost
    scan: list[Interval]  # committed or lost: the windows tile these


def plan_partitions(commits: Iterable[CommitRanges]) -> dict[TopicPartition, PartitionPlan]:
    committed: dict[TopicPartition, list[Interval]] = {}
    lost: dict[TopicPartition, list[Interval]] = {}
    for c in commits:
        for tp, r in c.ranges.items():
            committed.setdefault(tp, []).append(r)
        for tp, r in c.data_loss.items():
            lost.setdefault(tp, []).append(r)
    out = {}
    for tp in sorted(set(committed) | set(lost)):
        com = merge(committed.get(tp, []))
        los = merge(lost.get(tp, []))
        out[tp] = PartitionPlan(com, los, subtract(com, los), merge(com + los))
    return out


def range_issues(commits: list[CommitRanges]) -> list[RangeIssue]:
    """Gaps and overlaps between the commits' ranges, per partition, and a cumulative
    committed offset (newest commit first in ``commits``) that disagrees with them."""
    per_tp: dict[TopicPartition, list[tuple[int, int, str]]] = {}
    lost: dict[TopicPartition, list[Interval]] = {}
    for c in commits:
        for tp, (s, e) in c.ranges.items():
            if e > s:
                per_tp.setdefault(tp, []).append((s, e, c.commit))
        for tp, r in c.data_loss.items():
            lost.setdefault(tp, []).append(r)
    issues: list[RangeIssue] = []
    for tp in sorted(per_tp):
        los = merge(lost.get(tp, []))
        prev_end: int | None = None
        prev_commit = ""
        for s, e, commit in sorted(per_tp[tp]):
            if prev_end is not None and s > prev_end:
                for gs, ge in subtract([(prev_end, s)], los):
                    issues.append(
                        RangeIssue(
                            "gap",
                            tp,
                            gs,
                            ge,
                            f"no commit covers these offsets (between commits "
                            f"{prev_commit} and {commit})",
                        )
                    )
            if prev_end is not None and s < prev_end:
                issues.append(
                    RangeIssue(
                        "overlap",
                        tp,
                        s,
                        min(e, prev_end),
                        f"commits {prev_commit} and {commit} both claim these offsets",
                    )
                )
            if prev_end is None or e > prev_end:
                prev_end, prev_commit = e, commit
        newest = next((c.committed for c in commits if c.committed and not c.fence), None)
        if newest is not None and tp in newest and prev_end is not None and newest[tp] != prev_end:
            lo, hi = sorted((newest[tp], prev_end))
            issues.append(
                RangeIssue(
                    "committed-offsets",
                    tp,
                    lo,
                    hi,
                    f"the newest commit says {newest[tp]} is committed but the "
                    f"ranges end at {prev_end}",
                )
            )
    return issues


def count_window(
    expected: np.ndarray,
    present: np.ndarray,
    excused: list[Interval] | None = None,
) -> PartitionVerdict:
    """Counts for one window.

    ``expected``: sorted unique offsets Kafka returned (verifiable, not lost);
    ``present``: offsets of every table row in the window (all copies, any order);
    ``excused``: offset intervals whose rows cannot be judged (committed offsets below
    the log start): present there is neither expected nor unexpected.
    """
    v = PartitionVerdict(expected=int(expected.size), present=int(present.size))
    if present.size:
        uniq, counts = np.unique(present, return_counts=True)
    else:
        uniq, counts = np.empty(0, np.int64), np.empty(0, np.int64)
    dup_mask = counts > 1
    v.duplicated = int((counts[dup_mask] - 1).sum())
    _add_samples(v.duplicated_offsets, uniq[dup_mask])
    miss = expected[~np.isin(expected, uniq, assume_unique=True)]
    v.missing = int(miss.size)
    _add_samples(v.missing_offsets, miss)
    extra = uniq[~np.isin(uniq, expected, assume_unique=True)]
    if excused:
        extra = extra[~inside(extra, excused)]
    v.unexpected = int(extra.size)
    _add_samples(v.unexpected_offsets, extra)
    return v
