"""Offset ranges of one batch as the coordinators see them (pipeline/commit/table_ranges.py):
where a batch's consumed range starts, what a commit adds past the table, and the part of
a batch the table already holds."""

from __future__ import annotations

from pipeline.commit.offsets import TopicPartition
from pipeline.commit.table_ranges import consumed_ranges, overlap
from pipeline.commit.types import PartitionStats

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def stats(tp: TopicPartition, lo: int, hi: int) -> PartitionStats:
    return PartitionStats(tp.topic, tp.partition, lo, hi, hi - lo + 1)


def test_a_batch_consumes_from_the_previous_batchs_end() -> None:
    assert consumed_ranges({T0: 10, T1: 5}, {T0: 20, T1: 5}, [], None) == {T0: (10, 20)}


def test_the_first_batch_starts_at_the_tables_offset_else_the_first_offset_seen() -> None:
    ranges = consumed_ranges(None, {T0: 20, T1: 30}, [stats(T1, 12, 29)], {T0: 7})
    assert ranges == {T0: (7, 20), T1: (12, 30)}


def test_a_partition_nobody_read_and_the_table_never_held_consumed_nothing() -> None:
    assert consumed_ranges(None, {T0: 20}, [], None) == {}


def test_clipping_leaves_what_the_table_already_held_out_of_the_commit() -> None:
    start, end, held = {T0: 10, T1: 10}, {T0: 20, T1: 20}, {T0: 15, T1: 25}
    assert consumed_ranges(start, end, [], held) == {T0: (15, 20)}
    assert consumed_ranges(start, end, [], held, clip=False) == {T0: (10, 20), T1: (10, 20)}


def test_overlap_is_the_part_below_the_tables_committed_offset() -> None:
    ranges = {T0: (10, 20), T1: (10, 20)}
    assert overlap(ranges, {T0: 15, T1: 10}) == {T0: (10, 15)}
    assert overlap(ranges, {T0: 30}) == {T0: (10, 20)}
    assert overlap(ranges, {}) == {}
