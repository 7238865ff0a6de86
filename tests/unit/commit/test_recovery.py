"""Recovery after a crash (pipeline/commit/recovery.py), Spark-free: every driver crash
point followed by a restart, rollback interrupted by another crash, pending instants of
an old incarnation, damaged precommits, and what a rollback must keep (dead letters
already committed, files of another pipeline sharing the table).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

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
    assert_sizes,
    batch_keys,
    rolled_back_paths,
)
from support.memtable import FakeKafka, FakeWorkers, MemTable

from pipeline.commit import journal as journal_module
from pipeline.commit.coordinator import Coordinator
from pipeline.commit.faults import POINTS, FaultInjected, FaultPoints
from pipeline.commit.instant import (
    BatchIdentity,
    InstantState,
    next_instant_time,
)
from pipeline.commit.journal import (
    InstantTimeline,
)
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.commit.table_set import CommitTables
from pipeline.commit.types import BatchOutcome
from pipeline.storage.local import LocalJournalStore

# ---------------------------------------------------------------------------------------
# Every driver crash point, then a restart
# ---------------------------------------------------------------------------------------

# mid-write is worker-side, during-rollback has its own tests, between-table-commits only
# exists with two main tables (tests/integration/commit/test_dual_pipeline.py)
OTHER_POINTS = {
    "mid-write",
    "during-rollback",
    "between-table-commits",
    # background maintenance: tests/integration/formats/*/test_*_maintenance.py
    "compaction-after-write",
    "compaction-after-commit",
    # at start, before any batch: tests/integration/decode/test_schema_evolution.py
    "after-schema-change",
}
DRIVER_CRASH_POINTS = [p for p in POINTS if p not in OTHER_POINTS]

# point -> (recovery action on the crashed instant, replay outcome, final state, writes)
EXPECTED = {
    "after-requested": ("rolled_back", "committed", InstantState.ROLLED_BACK, 1),
    "after-write": ("rolled_back", "committed", InstantState.ROLLED_BACK, 1),
    "after-precommit": ("recommitted", "recommitted", InstantState.COMPLETED, 0),
    "after-dead-letter-commit": ("recommitted", "recommitted", InstantState.COMPLETED, 0),
    "after-commit": ("completed", "replay_skipped", InstantState.COMPLETED, 0),
    "after-commit-before-checkpoint": (None, "replay_skipped", InstantState.COMPLETED, 0),
}


def test_every_driver_crash_point_has_an_expectation() -> None:
    assert set(EXPECTED) == set(DRIVER_CRASH_POINTS)
    assert set(POINTS) - set(DRIVER_CRASH_POINTS) == OTHER_POINTS


@pytest.mark.parametrize("point", DRIVER_CRASH_POINTS)
def test_crash_point_then_restart_replays_exactly_once(env: Env, point: str) -> None:
    c1 = env.driver(f"{point}:raise@1")
    assert env.batch(c1, 0).outcome == "committed"
    with pytest.raises(FaultInjected):
        env.batch(c1, 1)

    tl = env.timeline()
    crashed = tl.instants()[-1]
    assert crashed.batch == BatchIdentity(PIPE, X, 1)
    staged = sorted(env.workers.written_by([crashed.time]))
    # invariant 3: the previous commit plus at most one pending instant
    main_done = point in ("after-commit", "after-commit-before-checkpoint")
    assert batch_keys(env.main) == ([(X, 0), (X, 1)] if main_done else [(X, 0)])
    assert len(tl.pending()) <= 1
    dl_done = main_done or point == "after-dead-letter-commit"
    assert batch_keys(env.dl) == ([(X, 0), (X, 1)] if dl_done else [(X, 0)])

    # The driver died; a new one starts over the same journal and tables and Spark replays
    # batch 1 (same query id, same planned offsets), then goes on with batch 2.
    c2 = env.driver()
    assert c2.epoch == 2
    calls = len(env.workers.calls)
    out = env.batch(c2, 1)
    action, outcome, state, writes = EXPECTED[point]
    assert out.outcome == outcome
    assert out.recovered == ([(crashed.time, action)] if action else [])
    assert len(env.workers.calls) - calls == writes
    assert tl.instant(crashed.time).state is state
    assert crashed.time in env.main.begun and crashed.time in env.dl.begun
    aborted = action == "rolled_back"
    assert (crashed.time in env.main.aborted, crashed.time in env.dl.aborted) == (aborted,) * 2
    if action == "rolled_back":
        assert rolled_back_paths(env, crashed.time) == staged
        assert not set(staged) & (set(env.main.physical) | set(env.dl.physical))
        assert out.instant is not None and out.instant > crashed.time
    if action == "recommitted":
        # committed from the precommit: the crashed run's files, the new (fencing) epoch
        assert out.instant == crashed.time
        cp = env.main.commits()[-1]
        assert (cp.batch_id, cp.epoch, cp.instant) == (1, 2, crashed.time)
        assert sorted(env.main.snapshots[-1].files + _dl_files_of(env, 1)) == staged
        assert_sizes(env, out, staged)
        assert out.epoch == 2

    assert env.batch(c2, 2).outcome == "committed"
    assert batch_keys(env.main) == [(X, 0), (X, 1), (X, 2)]
    assert_exactly_once(env, E[2])


def _dl_files_of(env: Env, batch_id: int) -> tuple[str, ...]:
    return tuple(
        p
        for s in env.dl.snapshots
        if not s.fence and s.checkpoint.batch_id == batch_id
        for p in s.files
    )


@pytest.mark.parametrize(
    ("first_crash", "incarnation"), [("after-write", X), ("after-precommit", Y)]
)
def test_crash_during_rollback_then_restart_finishes_the_rollback(
    env: Env, first_crash: str, incarnation: str
) -> None:
    """after-write: a REQUESTED instant with unlisted (orphan) files; after-precommit + a
    lost checkpoint (new query id): an INFLIGHT instant that must not be recommitted."""
    c1 = env.driver(f"{first_crash}:raise@1")
    env.batch(c1, 0)
    with pytest.raises(FaultInjected):
        env.batch(c1, 1)
    crashed = env.timeline().pending()[0]
    staged = set(env.workers.written_by([crashed.time]))

    def replay(c: Coordinator) -> BatchOutcome:
        if incarnation == X:
            return env.batch(c, 1)
        # new checkpoint, startingOffsets=table: batch 0 of the new query from E[0]
        return env.run(c, Y, 0, None, E[2], read_from=env.main.committed_offsets(PIPE))

    c2 = env.driver("during-rollback:raise")
    with pytest.raises(FaultInjected):
        replay(c2)
    left = staged & (set(env.main.physical) | set(env.dl.physical))
    # listed files go one by one: the first is gone, the rest (and orphans) still there
    assert len(staged - left) == (1 if first_crash == "after-precommit" else 0)
    assert [i.time for i in env.timeline().pending()] == [crashed.time]
    assert batch_keys(env.main) == [(X, 0)]

    c3 = env.driver()
    calls = len(env.workers.calls)
    out = replay(c3)
    assert out.outcome == "committed"
    assert out.recovered == [(crashed.time, "rolled_back")]
    assert len(env.workers.calls) - calls == 1
    assert env.timeline().instant(crashed.time).state is InstantState.ROLLED_BACK
    assert set(rolled_back_paths(env, crashed.time)) == left
    if incarnation == X:
        env.batch(c3, 2)
    assert_exactly_once(env, E[2])


# ---------------------------------------------------------------------------------------
# Recovery decisions
# ---------------------------------------------------------------------------------------


def test_new_incarnation_rolls_back_pending_inflight_and_resumes_from_table(env: Env) -> None:
    c1 = env.driver("after-precommit:raise@2")
    env.batch(c1, 0)
    env.batch(c1, 1)
    with pytest.raises(FaultInjected):
        env.batch(c1, 2)
    crashed = env.timeline().pending()[0]
    assert crashed.state is InstantState.INFLIGHT

    # checkpoint deleted: a new query id; startingOffsets=table (invariant 6)
    c2 = env.driver()
    table = env.main.committed_offsets(PIPE)
    assert table == E[1]
    calls = len(env.workers.calls)
    out = env.run(c2, Y, 0, None, E[3], read_from=table)
    assert out.outcome == "committed"
    assert out.recovered == [(crashed.time, "rolled_back")]
    assert len(env.workers.calls) - calls == 1
    assert out.overlap_dropped == 0
    assert out.ranges == {tp: (E[1][tp], E[3][tp]) for tp in E[3]}
    assert batch_keys(env.main) == [(X, 0), (X, 1), (Y, 0)]
    assert_exactly_once(env, E[3])


@pytest.mark.parametrize("damage", ["deleted", "resized", "dead-letter-deleted", "replanned"])
def test_precommit_that_is_not_intact_is_rolled_back_and_recomputed(env: Env, damage: str) -> None:
    c1 = env.driver("after-precommit:raise@1")
    env.batch(c1, 0)
    with pytest.raises(FaultInjected):
        env.batch(c1, 1)
    inst = env.timeline().pending()[0]
    assert inst.inflight is not None
    main_file = inst.inflight.files_of("main")[0].path
    end = E[1]
    if damage == "deleted":
        env.main.delete_files([main_file])
    elif damage == "resized":
        env.main.physical[main_file].size += 1
    elif damage == "dead-letter-deleted":
        env.dl.delete_files([inst.inflight.files_of("dead_letter")[0].path])
    else:  # Spark lost the offset log entry and planned batch 1 again, differently
        end = PartitionOffsets({T0: 20, T1: 12})

    c2 = env.driver()
    calls = len(env.workers.calls)
    out = env.run(c2, X, 1, E[0], end)
    assert out.outcome == "committed"
    assert out.recovered == [(inst.time, "rolled_back")]
    assert len(env.workers.calls) - calls == 1
    assert not {f.path for f in inst.inflight.files} & (
        set(env.main.physical) | set(env.dl.physical)
    )
    env.run(c2, X, 2, end, E[2])
    assert_exactly_once(env, E[2])


def test_recovery_without_pending_instants_does_nothing(env: Env) -> None:
    c1 = env.driver()
    env.batch(c1, 0)
    c2 = env.driver()
    out = env.batch(c2, 1)
    assert (out.outcome, out.recovered) == ("committed", [])
    assert_exactly_once(env, E[1])


# ---------------------------------------------------------------------------------------
# Other core defects, shown deterministically
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("replay", ["new-query", "replanned", "main-file-lost"])
def test_rollback_keeps_dead_letter_files_already_committed(env: Env, replay: str) -> None:
    """Crash after the dead-letter commit; the pending instant is then rolled back rather
    than recommitted (new query id / Spark planned the batch again differently / a staged
    main-table file is gone): rollback deletes files the dead-letter table references."""
    c1 = env.driver("after-dead-letter-commit:raise@1")
    env.batch(c1, 0)
    with pytest.raises(FaultInjected):
        env.batch(c1, 1)
    assert batch_keys(env.dl) == [(X, 0), (X, 1)] and batch_keys(env.main) == [(X, 0)]
    c2 = env.driver()
    if replay == "new-query":
        env.run(c2, Y, 0, None, E[2], read_from=env.main.committed_offsets(PIPE))
    else:
        end = E[1]
        if replay == "replanned":
            end = PartitionOffsets({T0: 20, T1: 12})
        else:
            inst = env.timeline().pending()[0]
            assert inst.inflight is not None
            env.main.delete_files([inst.inflight.files_of("main")[0].path])
        env.run(c2, X, 1, E[0], end)
        env.run(c2, X, 2, end, E[2])
    assert env.dl.dangling() == []
    assert env.dl.rows() == env.kafka.dead(E[2])  # each dead letter once


def test_rollback_spares_files_of_another_pipeline_sharing_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # two pipelines (own journals, own topics) into one table, clocks in the same millisecond
    frozen = datetime(2030, 1, 1, tzinfo=UTC)
    monkeypatch.setattr(
        journal_module, "next_instant_time", lambda after: next_instant_time(after, frozen)
    )
    a0, b0 = TopicPartition("a", 0), TopicPartition("b", 0)
    kafka = FakeKafka({a0: list(range(10)), b0: list(range(10))})
    main, dl = MemTable("main"), MemTable("dead_letter")
    workers = FakeWorkers(kafka, main, dl)
    end_a, end_b = PartitionOffsets({a0: 10}), PartitionOffsets({b0: 10})

    def driver(pid: str, faults: str = "") -> Coordinator:
        store = LocalJournalStore(str(tmp_path / pid))
        c = Coordinator(
            pid, CommitTables(main, dl), timeline=InstantTimeline(store), faults=FaultPoints(faults)
        )
        c.acquire_epoch()
        return c

    q = driver("q")
    q.run_batch(X, 0, None, end_b, workers.for_batch(None, end_b))
    p = driver("p", "after-write:raise")
    with pytest.raises(FaultInjected):
        p.run_batch(X, 0, None, end_a, workers.for_batch(None, end_a))
    p2 = driver("p")
    p2.run_batch(X, 0, None, end_a, workers.for_batch(None, end_a))
    assert main.dangling() == []
