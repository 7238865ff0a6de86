"""The protocol never *skips* a record (docs/design.md invariants 4 and 8).

Spark-free, on the in-memory table of ``support.commit_env``: the gap check (a batch
starting above the table's committed offsets), read coverage (tasks that read other
offsets than planned), and dead letters committed at most once in every recovery
combination. Each test failed on the code before these checks (the gap and the skipping
reader committed silently; a new incarnation after lost main files committed the dead
letters twice).
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from support.commit_env import PIPE, T0, T1, E, Env, X, Y, assert_exactly_once

from pipeline.commit.faults import FaultInjected
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.commit.types import PartitionStats, StagedBatch
from pipeline.errors import CoverageError, GapError


def _commit_first(env: Env, n: int) -> None:
    c = env.driver()
    for k in range(n):
        assert env.batch(c, k).outcome == "committed"


def test_a_batch_starting_above_the_table_is_refused_before_anything_is_staged(
    env: Env,
) -> None:
    """The Spark checkpoint is ahead of the table (batch 3 never reached it): batch 4
    starts at E[3] while the table's committed offsets are E[2]."""
    _commit_first(env, 3)
    c = env.driver()
    calls, instants = len(env.workers.calls), len(env.timeline().instants())
    with pytest.raises(GapError) as err:
        env.run(c, X, 4, E[3], E[4])
    msg = str(err.value)
    assert msg.startswith("[ingest:gap] batch 4 starts above") and "\n" not in msg
    assert "t[0] [40, 50)" in msg and "t[1] [24, 32)" in msg, msg
    assert len(env.workers.calls) == calls  # nothing staged
    assert len(env.timeline().instants()) == instants  # nothing requested
    assert env.main.committed_offsets(PIPE) == E[2]


def test_on_gap_rewind_re_reads_from_the_table(env: Env) -> None:
    _commit_first(env, 3)
    c = env.driver(on_gap="rewind")
    out = env.run(c, X, 4, E[3], E[4])
    assert out.outcome == "committed"
    assert out.ranges == {T0: (40, 60), T1: (24, 40)}
    assert env.workers.calls[-1].drop_below == E[2]
    assert_exactly_once(env, E[4])


def test_a_start_at_or_below_the_table_is_no_gap(env: Env) -> None:
    _commit_first(env, 3)
    c = env.driver()
    assert env.run(c, Y, 0, None, E[3]).outcome == "committed"  # new checkpoint
    assert env.run(c, Y, 1, E[1], E[4]).outcome == "committed"  # overlap: dropped
    assert_exactly_once(env, E[4])


def _reader(env: Env, how: str, start: PartitionOffsets, end: PartitionOffsets):
    """A defective task: skips the head or the tail, re-reads offsets, or reads past."""
    honest = env.workers.for_batch(start, end)

    def write(write_id: str, drop_below: PartitionOffsets) -> StagedBatch:
        staged = honest(write_id, drop_below)
        s = staged.stats[0]
        if how == "skips-tail":
            n = len(env.kafka.read(T0, s.max_offset - 4, s.max_offset + 1))
            s = PartitionStats(s.topic, s.partition, s.min_offset, s.max_offset - 5, s.records - n)
        elif how == "skips-head":
            n = len(env.kafka.read(T0, s.min_offset, s.min_offset + 5))
            s = PartitionStats(s.topic, s.partition, s.min_offset + 5, s.max_offset, s.records - n)
        elif how == "reads-twice":
            s = PartitionStats(s.topic, s.partition, s.min_offset, s.max_offset, s.records + 1)
        elif how == "reads-past-end":
            s = PartitionStats(s.topic, s.partition, s.min_offset, end[T0] + 2, s.records + 2)
        elif how == "reads-below-start":
            s = PartitionStats(s.topic, s.partition, start[T0] - 3, s.max_offset, s.records + 2)
        staged.stats[0] = s
        return staged

    return write


@pytest.mark.parametrize(
    "how", ["skips-tail", "skips-head", "reads-twice", "reads-past-end", "reads-below-start"]
)
def test_tasks_that_do_not_read_their_ranges_are_refused_before_the_precommit(
    env: Env, how: str
) -> None:
    _commit_first(env, 2)
    c = env.driver()
    write = _reader(env, how, E[1], E[2])
    with pytest.raises(CoverageError) as err:
        c.run_batch(X, 2, E[1], E[2], write, count=env.count)
    msg = str(err.value)
    assert msg.startswith("[ingest:coverage] batch 2:") and "t[0] planned [25, 40)" in msg, msg
    inst = env.timeline().pending()[0]
    assert inst.inflight is None  # refused before the precommit
    assert env.main.committed_offsets(PIPE) == E[1]
    # the next run rolls the refused instant back and commits the batch
    c2 = env.driver()
    assert env.batch(c2, 2).recovered == [(inst.time, "rolled_back")]
    assert_exactly_once(env, E[2])


def test_legitimate_holes_are_confirmed_with_the_broker(env: Env) -> None:
    """The fake log has holes (every 7th / 5th offset is no record): the oracle confirms
    them; without an oracle holes are not judged."""
    asked: list[Mapping[TopicPartition, tuple[int, int]]] = []

    def count(ranges: Mapping[TopicPartition, tuple[int, int]]) -> dict[TopicPartition, int]:
        asked.append(dict(ranges))
        return env.count(ranges)

    c = env.driver()
    for k in range(3):
        start = E[k - 1] if k else None
        c.run_batch(X, k, start, E[k], env.workers.for_batch(start, E[k]), count=count)
    assert asked and all(set(r) <= {T0, T1} for r in asked)
    assert_exactly_once(env, E[2])


@pytest.mark.parametrize("incarnation", ["same", "new"])
@pytest.mark.parametrize("main_files", ["kept", "lost"])
def test_dead_letters_are_committed_at_most_once_in_every_recovery(
    env: Env, main_files: str, incarnation: str
) -> None:
    """Crash after the dead-letter commit of batch 1; the restart replays it in the same
    query or, with the checkpoint lost, as batch 0 of a new one starting at the table."""
    c1 = env.driver("after-dead-letter-commit:raise@1")
    env.batch(c1, 0)
    with pytest.raises(FaultInjected):
        env.batch(c1, 1)
    if main_files == "lost":
        inst = env.timeline().pending()[0]
        assert inst.inflight is not None
        env.main.delete_files([f.path for f in inst.inflight.files_of("main")])
    c2 = env.driver()
    if incarnation == "same":
        env.batch(c2, 1)
        env.batch(c2, 2)
    else:
        committed = env.main.committed_offsets(PIPE)
        env.run(c2, Y, 0, None, E[2], read_from=committed)
    assert env.dl.rows() == env.kafka.dead(E[2])  # each dead letter once
    assert_exactly_once(env, E[2])
