"""Offset ranges of one batch as the coordinators see them (pure functions).

  * :func:`consumed_ranges` -- ``[start, end)`` per partition a batch consumed, optionally
                               minus what the table already held (what a commit adds).
  * :func:`overlap`         -- the sub-ranges of a batch the table already committed.

Not to be confused with :func:`pipeline.commit.offsets.planned_ranges`, the source's plan
of the ranges a batch reads.
"""

from __future__ import annotations

from collections.abc import Mapping

from pipeline.commit.offsets import TopicPartition
from pipeline.commit.types import PartitionStats


def consumed_ranges(
    start: Mapping[TopicPartition, int] | None,
    end: Mapping[TopicPartition, int],
    stats: list[PartitionStats],
    previous: Mapping[TopicPartition, int] | None,
    *,
    clip: bool = True,
) -> dict[TopicPartition, tuple[int, int]]:
    """``[start, end)`` per partition this batch consumed (``clip``: minus what the table
    already held, i.e. what this commit adds).

    Start is the previous batch's logged end; for the first batch of a checkpoint it is
    the table's committed offset, else the first offset a worker saw.
    """
    first = {TopicPartition(s.topic, s.partition): s.min_offset for s in stats}
    out = {}
    for tp, e in end.items():
        if start is not None and tp in start:
            s = start[tp]
        elif previous is not None and tp in previous:
            s = previous[tp]
        else:
            s = first.get(tp, e)
        if clip and previous is not None and tp in previous:
            s = max(s, previous[tp])  # what the table already held is not this commit's
        s = min(s, e)
        if e > s:
            out[tp] = (s, e)
    return out


def overlap(
    ranges: Mapping[TopicPartition, tuple[int, int]], committed: Mapping[TopicPartition, int]
) -> dict[TopicPartition, tuple[int, int]]:
    """Sub-ranges the table already holds: ``[start, min(end, committed))``."""
    out = {}
    for tp, (s, e) in ranges.items():
        c = committed.get(tp)
        if c is not None and s < c:
            out[tp] = (s, min(e, c))
    return out
