"""Bounded table history, format-neutral: what the commits of a table record about the
offsets they consumed, and which old commits may be forgotten.

A table keeps only its newest commits (Iceberg: snapshots of ``main``; Hudi: completed
instants on the active timeline) so that the cost of a commit does not grow with the age
of the table. What a forgotten commit recorded is not lost: every commit carries
``ingest.ranges-before`` / ``ingest.data-loss-before``, the merged offset intervals its
pipeline committed (lost) before it. Two rules, each a function here:

* :func:`carry_forward` -- the next commit's carried intervals are the previous commit's
  carried intervals plus that commit's own ranges (one step, not a history scan).
* :func:`forgettable` -- only a prefix of old commits may go, and only when every pipeline
  with commits in it has a retained commit carrying those keys (so the verifier and the
  operator still see every range ever committed, and the newest checkpoint of every
  pipeline stays readable: dedupe, fencing and committed offsets need it).

Commits are given newest first, as ``(commit id, summary)`` with the summary as the
format stores it (Iceberg snapshot summary, Hudi ``extraMetadata``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

from pipeline.commit.checkpoint import (
    DATA_LOSS_BEFORE_KEY,
    DATA_LOSS_KEY,
    PIPELINE_ID_KEY,
    RANGES_BEFORE_KEY,
    RANGES_KEY,
    parse_nested,
    parse_ranges,
)
from pipeline.commit.offsets import TopicPartition

Intervals = dict[TopicPartition, list[tuple[int, int]]]


def merge_into(acc: Intervals, tp: TopicPartition, spans: Iterable[tuple[int, int]]) -> None:
    """Add ``spans`` to ``acc[tp]``, keeping it sorted and merged (empty spans ignored)."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(acc.get(tp, []) + [s for s in spans if s[1] > s[0]]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    if merged:
        acc[tp] = merged


def intervals_json(intervals: Intervals) -> str:
    nested: dict[str, dict[str, list[list[int]]]] = {}
    for (topic, partition), spans in sorted(intervals.items()):
        nested.setdefault(topic, {})[str(partition)] = [[int(s), int(e)] for s, e in spans]
    return json.dumps(nested, separators=(",", ":"), sort_keys=True)


def parse_intervals(text: str, key: str) -> Intervals:
    out: Intervals = {}
    for tp, value in parse_nested(text, key):
        if not isinstance(value, list):
            raise ValueError(f"{key}: {tp} is not a list of [start, end]")
        merge_into(out, tp, [(int(s), int(e)) for s, e in value])
    return out


def add_commit(ranges: Intervals, lost: Intervals, summary: Mapping[str, str]) -> None:
    """Fold one commit's own ``ingest.ranges`` / ``ingest.data-loss`` into the totals."""
    for tp, span in parse_ranges(summary.get(RANGES_KEY) or "{}", RANGES_KEY).items():
        merge_into(ranges, tp, [span])
    for tp, span in parse_ranges(summary.get(DATA_LOSS_KEY) or "{}", DATA_LOSS_KEY).items():
        merge_into(lost, tp, [span])


def carry_forward(summaries: Iterable[Mapping[str, str]], pipeline_id: str) -> dict[str, str]:
    """``ingest.ranges-before`` / ``ingest.data-loss-before`` for the next commit of
    ``pipeline_id`` on top of ``summaries`` (newest first): the previous commit's carried
    intervals plus its own ranges. A previous commit without the keys (written before
    they existed) makes this fold older commits until one has them, or all of them."""
    ranges: Intervals = {}
    lost: Intervals = {}
    for summary in summaries:
        if summary.get(PIPELINE_ID_KEY) != pipeline_id:
            continue
        add_commit(ranges, lost, summary)
        if RANGES_BEFORE_KEY in summary:
            for tp, spans in parse_intervals(summary[RANGES_BEFORE_KEY], RANGES_BEFORE_KEY).items():
                merge_into(ranges, tp, spans)
            before_lost = summary.get(DATA_LOSS_BEFORE_KEY) or "{}"
            for tp, spans in parse_intervals(before_lost, DATA_LOSS_BEFORE_KEY).items():
                merge_into(lost, tp, spans)
            break
    return {RANGES_BEFORE_KEY: intervals_json(ranges), DATA_LOSS_BEFORE_KEY: intervals_json(lost)}


def forgettable(commits: Sequence[tuple[str, Mapping[str, str]]], keep: int) -> list[str]:
    """Ids of the commits beyond the newest ``keep`` (oldest last, like ``commits``), or
    nothing when one of them belongs to a pipeline whose oldest retained commit does not
    carry the keys (its history would vanish; also: its newest checkpoint would go)."""
    kept, old = commits[:keep], commits[keep:]
    if not old:
        return []
    oldest_kept: dict[str, Mapping[str, str]] = {}
    for _, summary in kept:  # newest first: the last one seen per pipeline is the oldest
        pipeline_id = summary.get(PIPELINE_ID_KEY)
        if pipeline_id is not None:
            oldest_kept[pipeline_id] = summary
    for _, summary in old:
        pipeline_id = summary.get(PIPELINE_ID_KEY)
        if pipeline_id is None:
            continue
        carrier = oldest_kept.get(pipeline_id)
        if carrier is None or RANGES_BEFORE_KEY not in carrier:
            return []
    return [commit_id for commit_id, _ in old]
