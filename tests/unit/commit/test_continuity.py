"""Overlap self-correction (docs/design.md invariant 5; pipeline/commit/continuity.py):
lost and restored checkpoints, the range a self-corrected commit records, and
``on_overlap: fail`` before and after writing.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from support.commit_env import (
    PIPE,
    T0,
    T1,
    E,
    Env,
    X,
    Y,
    assert_exactly_once,
)

from pipeline.commit.instant import (
    InstantState,
)
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.errors import OverlapError

# ---------------------------------------------------------------------------------------
# Overlap self-correction (invariant 5)
# ---------------------------------------------------------------------------------------


def _records_between(env: Env, lo: Mapping[TopicPartition, int], hi: PartitionOffsets) -> int:
    return sum(1 for (t, p, o) in env.kafka.records(hi) if o >= lo.get(TopicPartition(t, p), 0))


def test_overlap_from_earliest_with_new_checkpoint_is_dropped_and_counted(env: Env) -> None:
    c1 = env.driver()
    env.batch(c1, 0)
    env.batch(c1, 1)
    # checkpoint deleted and the source configured with startingOffsets=earliest
    c2 = env.driver()
    out = env.run(c2, Y, 0, None, E[2], earliest=True)
    assert out.outcome == "committed"
    assert out.overlap_dropped == len(env.kafka.records(E[1]))
    assert out.records + out.dead_letter_records == _records_between(env, E[1], E[2])
    assert out.ranges == {tp: (E[1][tp], E[2][tp]) for tp in E[2]}
    assert_exactly_once(env, E[2])


def test_first_batch_of_new_checkpoint_entirely_below_the_table_is_dropped(env: Env) -> None:
    """Checkpoint lost, startingOffsets=earliest, a batch size smaller than what the table
    holds: the new checkpoint's first batch (no logged start) ends below the table's
    offsets. Every record it read is dropped and counted; the table does not move back."""
    c1 = env.driver()
    env.batch(c1, 0)
    env.batch(c1, 1)
    c2 = env.driver()
    out = env.run(c2, Y, 0, None, E[0], earliest=True)
    assert out.outcome == "committed"
    assert (out.records, out.dead_letter_records) == (0, 0)
    assert out.overlap_dropped == len(env.kafka.records(E[0]))
    assert env.main.committed_offsets(PIPE) == E[1]
    out2 = env.run(c2, Y, 1, E[0], E[2])
    assert out2.overlap_dropped == _records_between(env, E[0], E[1])
    assert_exactly_once(env, E[2])


MID = PartitionOffsets({T0: 18, T1: 12})  # between E[0] and E[1]


def test_restored_older_checkpoint_replans_and_overlap_is_dropped(env: Env) -> None:
    """The restored checkpoint's offset log ends at batch 0: Spark plans batches 1, 2 again
    with other ranges. Same batch ids, other ranges: not mistaken for the committed ones,
    and the part the table holds is dropped and counted."""
    c1 = env.driver()
    for k in range(3):
        env.batch(c1, k)
    c2 = env.driver()
    out1 = env.run(c2, X, 1, E[0], MID)  # entirely below the table's offsets
    assert out1.outcome == "committed"
    assert (out1.records, out1.dead_letter_records) == (0, 0)
    assert out1.overlap_dropped == _records_between(env, E[0], MID)
    assert env.main.committed_offsets(PIPE) == E[2]  # never moves backwards
    out2 = env.run(c2, X, 2, MID, E[3])
    assert out2.overlap_dropped == _records_between(env, MID, E[2])
    assert out2.records + out2.dead_letter_records == _records_between(env, E[2], E[3])
    assert_exactly_once(env, E[3])


def test_self_corrected_commit_records_only_the_range_it_added(env: Env) -> None:
    c1 = env.driver()
    for k in range(3):
        env.batch(c1, k)
    c2 = env.driver()
    out = env.run(c2, X, 2, MID, E[3])
    assert out.ranges == {tp: (E[2][tp], E[3][tp]) for tp in E[3]}


def test_on_overlap_fail_before_writing_names_partition_and_offsets(env: Env) -> None:
    c1 = env.driver()
    for k in range(2):
        env.batch(c1, k)
    snapshots, calls = len(env.main.snapshots), len(env.workers.calls)
    instants = len(env.timeline().instants())
    c2 = env.driver(on_overlap="fail")
    snapshots += 1  # c2's fence
    with pytest.raises(OverlapError) as err:
        env.run(c2, X, 1, E[0], MID)
    assert "t[0]" in err.value.message and "[10, 18)" in err.value.message
    assert "onOverlap=fail" in err.value.message
    assert len(env.main.snapshots) == snapshots
    assert len(env.workers.calls) == calls
    assert len(env.timeline().instants()) == instants  # nothing minted
    assert_exactly_once(env, E[1])


def test_on_overlap_fail_after_writing_commits_nothing(env: Env) -> None:
    """Batch 0 of a new checkpoint has no logged start: the overlap is only seen by the
    workers. Nothing is committed; the next run rolls the staged files back."""
    c1 = env.driver()
    env.batch(c1, 0)
    env.batch(c1, 1)
    c2 = env.driver(on_overlap="fail")
    snapshots = len(env.main.snapshots)
    with pytest.raises(OverlapError) as err:
        env.run(c2, Y, 0, None, E[2], earliest=True)
    assert "onOverlap=fail" in err.value.message
    assert len(env.main.snapshots) == snapshots
    assert env.main.committed_offsets(PIPE) == E[1]
    pending = env.timeline().pending()
    assert len(pending) == 1 and pending[0].state is InstantState.REQUESTED

    c3 = env.driver()
    out = env.run(c3, Y, 0, None, E[2], earliest=True)
    assert out.recovered == [(pending[0].time, "rolled_back")]
    assert_exactly_once(env, E[2])


def test_on_overlap_fail_after_writing_names_the_partition(env: Env) -> None:
    c1 = env.driver()
    env.batch(c1, 0)
    c2 = env.driver(on_overlap="fail")
    with pytest.raises(OverlapError) as err:
        env.run(c2, Y, 0, None, E[1], earliest=True)
    assert "t[0]" in err.value.message and "[0, 10)" in err.value.message
