"""Offset planning: admission control, splitting and reconciliation (pure)."""

from __future__ import annotations

import pytest

from pipeline.commit.offsets import (
    BrokerOffsets,
    OffsetRange,
    PartitionOffsets,
    TopicPartition,
    offsets_with_topic_ids,
    plan_end,
    planned_ranges,
    reconcile,
    split_ranges,
    topic_ids_in,
)
from pipeline.errors import (
    DataLossError,
    LogTruncatedError,
    PartitionStateError,
    TopicRecreatedError,
)

A0, A1, A2 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("a", 2)


def test_json_round_trip_uses_spark_offset_shape() -> None:
    offs = PartitionOffsets({A1: 7, A0: 3, TopicPartition("b", 0): 0})
    assert offs.to_dict() == {"a": {"0": 3, "1": 7}, "b": {"0": 0}}
    assert PartitionOffsets.from_json(offs.to_json()) == offs


def test_plan_end_reads_everything_without_limit() -> None:
    start = PartitionOffsets({A0: 0, A1: 5})
    assert plan_end(start, {A0: 10, A1: 5}, None) == PartitionOffsets({A0: 10, A1: 5})


def test_plan_end_spreads_budget_fairly_and_refills() -> None:
    start = PartitionOffsets({A0: 0, A1: 0, A2: 0})
    end = plan_end(start, {A0: 2, A1: 100, A2: 100}, 30)
    # A0 only has 2: its unused share goes to the others
    assert end == PartitionOffsets({A0: 2, A1: 14, A2: 14})
    assert sum(end[tp] - start[tp] for tp in start) == 30


def test_plan_end_small_budget_never_exceeds_limit() -> None:
    start = PartitionOffsets({A0: 0, A1: 0, A2: 0})
    end = plan_end(start, {A0: 5, A1: 5, A2: 5}, 2)
    assert sum(end.values()) == 2
    assert all(end[tp] <= 5 for tp in end)


def test_plan_end_returns_start_when_nothing_new() -> None:
    start = PartitionOffsets({A0: 4})
    assert plan_end(start, {A0: 4}, 10) == start


@pytest.mark.parametrize("min_partitions", [None, 1, 2, 3, 7, 50])
def test_split_ranges_tile_exactly(min_partitions: int | None) -> None:
    ranges = [OffsetRange("a", 0, 10, 110), OffsetRange("a", 1, 0, 3), OffsetRange("a", 2, 5, 5)]
    pieces = split_ranges(ranges, min_partitions)
    for r in ranges:
        own = sorted(p for p in pieces if p.tp == r.tp)
        covered = [o for p in own for o in range(p.start, p.end)]
        assert covered == list(range(r.start, r.end))  # no offset twice, none skipped
    if min_partitions and min_partitions <= 103:
        assert len(pieces) >= min(min_partitions, 2)


def test_split_ranges_makes_at_least_min_partitions_when_possible() -> None:
    pieces = split_ranges([OffsetRange("a", 0, 0, 1000)], 4)
    assert len(pieces) == 4
    assert [p.size for p in pieces] == [250, 250, 250, 250]


def test_batch_ranges_between_checkpoints() -> None:
    start = PartitionOffsets({A0: 3, A1: 9})
    end = PartitionOffsets({A0: 8, A1: 9})
    assert planned_ranges(start, end) == [OffsetRange("a", 0, 3, 8)]


def test_reconcile_adds_new_partitions_at_log_start() -> None:
    rec = reconcile(
        PartitionOffsets({A0: 5}),
        {A0: BrokerOffsets(0, 10), A1: BrokerOffsets(4, 9)},
        fail_on_data_loss=True,
    )
    assert rec.start == PartitionOffsets({A0: 5, A1: 4})
    assert rec.new_partitions == [A1]


def test_reconcile_vanished_partition_is_an_error() -> None:
    with pytest.raises(PartitionStateError, match=r"a\[1\].*no longer exists"):
        reconcile(
            PartitionOffsets({A0: 1, A1: 1}), {A0: BrokerOffsets(0, 2)}, fail_on_data_loss=True
        )


def test_offsets_carry_topic_ids_that_offset_readers_ignore() -> None:
    offs = PartitionOffsets({A0: 3, TopicPartition("b", 0): 0})
    logged = offsets_with_topic_ids(offs, {"a": "id-a", "b": "id-b", "gone": "id-x"})
    assert logged["#topicIds"] == {"a": "id-a", "b": "id-b"}  # only topics it has offsets of
    assert PartitionOffsets.from_dict(logged) == offs
    assert topic_ids_in(logged) == {"a": "id-a", "b": "id-b"}
    assert topic_ids_in(offs.to_dict()) == {}  # a checkpoint written before topic ids


def test_reconcile_end_below_offset_without_recorded_ids_is_an_error_not_a_stall() -> None:
    with pytest.raises(PartitionStateError, match=r"beyond the partition's end offset 3"):
        reconcile(PartitionOffsets({A0: 50}), {A0: BrokerOffsets(0, 3)}, fail_on_data_loss=True)


@pytest.mark.parametrize("high", [3, 500], ids=["end-below", "end-above"])
def test_reconcile_recreated_topic_is_told_by_its_id_wherever_its_end_is(high: int) -> None:
    with pytest.raises(
        TopicRecreatedError,
        match=r"^\[ingest:topic-recreated\] topic a was deleted and re-created "
        r"\(topic id id-1, now id-2\)",
    ):
        reconcile(
            PartitionOffsets({A0: 50}),
            {A0: BrokerOffsets(0, high)},
            fail_on_data_loss=True,
            recorded_ids={"a": "id-1"},
            current_ids={"a": "id-2"},
        )


def test_reconcile_same_topic_ending_below_the_offset_is_a_truncated_log() -> None:
    with pytest.raises(
        LogTruncatedError,
        match=r"^\[ingest:log-truncated\] partition a\[0\]: the log now ends at offset 3, "
        r"below the committed next offset 50",
    ):
        reconcile(
            PartitionOffsets({A0: 50}),
            {A0: BrokerOffsets(0, 3)},
            fail_on_data_loss=True,
            recorded_ids={"a": "id-1"},
            current_ids={"a": "id-1"},
        )


def test_reconcile_data_loss_fails_by_default_and_names_offsets() -> None:
    with pytest.raises(
        DataLossError, match=r"a\[0\]: next offset 2 is below the log start offset 7"
    ):
        reconcile(PartitionOffsets({A0: 2}), {A0: BrokerOffsets(7, 9)}, fail_on_data_loss=True)


def test_reconcile_data_loss_skips_and_records_when_allowed() -> None:
    rec = reconcile(PartitionOffsets({A0: 2}), {A0: BrokerOffsets(7, 9)}, fail_on_data_loss=False)
    assert rec.start == PartitionOffsets({A0: 7})
    assert rec.data_loss == {A0: (2, 7)}
