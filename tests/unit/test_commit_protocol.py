"""The two-phase instant commit, Spark-free: timeline + coordinator against an in-memory
table (``memtable.MemTable``) and the real ``LocalJournalStore`` on real files (in
``tmp_path``; the interleaving enumeration uses a tmpfs directory when there is one).

Covers docs/design.md invariants 3-7: every driver crash point followed by a restart, rollback
interrupted by another crash, lost and restored checkpoints, damaged precommits and
journal entries, every two-step interleaving of a zombie writer with the writer that took
over, epoch uniqueness, the at-least-once baseline and instant-time monotonicity.

The tests named after a defect (dead letters kept on rollback, fencing a table that does
not exist yet, orphans of other pipelines, ranges of self-corrected commits, overlap
messages) were written against an earlier core and pin the fixes.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from memtable import FakeKafka, FakeWorkers, MemTable, Rec

from pipeline.commit import journal as journal_module
from pipeline.commit.at_least_once import AtLeastOnceCoordinator
from pipeline.commit.coordinator import Coordinator, make_coordinator
from pipeline.commit.faults import POINTS, FaultInjected, FaultPoints
from pipeline.commit.instant import (
    BatchIdentity,
    InstantState,
    Requested,
    format_instant_time,
    next_instant_time,
    parse_instant_time,
)
from pipeline.commit.journal import (
    InstantTimeline,
    JournalStore,
    decode_entry,
    encode_entry,
)
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.commit.protocol import BatchCoordinator
from pipeline.commit.types import BatchOutcome
from pipeline.errors import FencedError, OverlapError
from pipeline.storage.local import LocalJournalStore

PIPE = "p1"
X, Y = "query-x", "query-y"  # checkpoint incarnations (Spark query ids)
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)

# Planned end offsets of batches 0..4 (Spark's offset log).
E = [
    PartitionOffsets({T0: 10, T1: 8}),
    PartitionOffsets({T0: 25, T1: 16}),
    PartitionOffsets({T0: 40, T1: 24}),
    PartitionOffsets({T0: 50, T1: 32}),
    PartitionOffsets({T0: 60, T1: 40}),
]


def make_kafka(dead_letters: bool = True) -> FakeKafka:
    """Two partitions with gaps; some undecodable records in batches 0-3."""
    logs = {
        T0: [o for o in range(60) if o % 7 != 3],
        T1: [o for o in range(40) if o % 5 != 1],
    }
    bad: set[Rec] = set()
    if dead_letters:
        bad = {("t", 0, o) for o in logs[T0] if o % 11 == 5}
        bad |= {("t", 1, o) for o in logs[T1] if o % 9 == 4}
    return FakeKafka(logs, bad)


@dataclass
class Env:
    root: Path
    kafka: FakeKafka
    main: MemTable
    dl: MemTable
    workers: FakeWorkers

    @property
    def journal_dir(self) -> Path:
        return self.root / "journal"

    def timeline(self) -> InstantTimeline:
        return InstantTimeline(LocalJournalStore(str(self.journal_dir)))

    def driver(
        self, faults: str = "", on_overlap: str = "drop", on_gap: str = "fail"
    ) -> Coordinator:
        """A (re)started driver: fresh objects over the same journal and tables, a new
        writer epoch acquired (and the tables fenced with it)."""
        c = Coordinator(
            PIPE,
            self.main,
            self.dl,
            timeline=self.timeline(),
            on_overlap=on_overlap,
            faults=FaultPoints(faults),
            on_gap=on_gap,
        )
        c.acquire_epoch(owner="test")
        return c

    def run(
        self,
        c: BatchCoordinator,
        incarnation: str,
        batch_id: int,
        start: PartitionOffsets | None,
        end: PartitionOffsets,
        read_from: Mapping[TopicPartition, int] | None = None,
        earliest: bool = False,
    ) -> BatchOutcome:
        """One Spark batch: workers read ``[read_from or start, end)`` (earliest: 0)."""
        rf: Mapping[TopicPartition, int] | None = {} if earliest else (read_from or start)
        write = self.workers.for_batch(rf, end)
        # like the Spark runner: ranges can be re-read, the broker's records counted (the
        # at-least-once baseline never asks)
        return c.run_batch(
            incarnation,
            batch_id,
            start,
            end,
            write,
            reread=self.workers.for_batch,
            count=self.count,
        )

    def count(self, ranges: Mapping[TopicPartition, tuple[int, int]]) -> dict[TopicPartition, int]:
        """The coverage check's oracle: records the fake broker has in each range."""
        return {tp: len(self.kafka.read(tp, s, e)) for tp, (s, e) in ranges.items()}

    def batch(self, c: BatchCoordinator, k: int, incarnation: str = X) -> BatchOutcome:
        return self.run(c, incarnation, k, E[k - 1] if k else None, E[k])

    def instant_file(self, time: str, state: str) -> Path:
        return self.journal_dir / "instants" / f"{time}.{state}"


@pytest.fixture
def env(tmp_path: Path) -> Env:
    kafka = make_kafka()
    main, dl = MemTable("main"), MemTable("dead_letter")
    return Env(tmp_path, kafka, main, dl, FakeWorkers(kafka, main, dl))


def assert_exactly_once(env: Env, end: PartitionOffsets) -> None:
    """Every record below ``end`` exactly once (main or dead letters), nothing dangling,
    no staged file the tables do not reference, nothing pending."""
    assert env.main.dangling() == [] and env.dl.dangling() == []
    assert env.main.rows() == env.kafka.good(end)
    assert env.dl.rows() == env.kafka.dead(end)
    assert env.main.orphans() == [] and env.dl.orphans() == []
    assert env.main.committed_offsets(PIPE) == end
    assert env.timeline().pending() == []


def assert_sizes(env: Env, out: BatchOutcome, staged: Sequence[str]) -> None:
    """The outcome's sizes are those of the staged files it committed."""
    main = [f for f in staged if f.startswith("mem://main/")]
    dead = [f for f in staged if f.startswith("mem://dead_letter/")]
    assert out.bytes == sum(env.main.physical[f].size for f in main) > 0
    assert out.dead_letter_files == len(dead)
    assert out.dead_letter_bytes == sum(env.dl.physical[f].size for f in dead)
    assert out.files == len(main) + len(dead)


def batch_keys(table: MemTable) -> list[tuple[str, int]]:
    return [(cp.incarnation, cp.batch_id) for cp in table.commits()]


def rolled_back_paths(env: Env, time: str) -> list[str]:
    data = env.instant_file(time, "rolled_back").read_bytes()
    return sorted(decode_entry("rb", data)["deleted"])


# ---------------------------------------------------------------------------------------
# Happy path
# ---------------------------------------------------------------------------------------


def test_happy_path_commits_each_batch_once_and_purges_the_journal(env: Env) -> None:
    c = env.driver()
    assert c.epoch == 1
    for k in range(4):
        out = env.batch(c, k)
        assert out.outcome == "committed" and out.recovered == []
        first = {T0: 0, T1: 0}
        assert out.ranges == {tp: ((E[k - 1] if k else first)[tp], E[k][tp]) for tp in E[k]}
        assert out.committed == E[k]
        assert env.main.committed_offsets(PIPE) == E[k]
        in_range = [
            r for r in env.kafka.records(E[k]) if k == 0 or r not in env.kafka.records(E[k - 1])
        ]
        assert out.records + out.dead_letter_records == len(in_range)
        assert out.overlap_dropped == 0
        # the commit references exactly the files this batch's workers staged
        assert env.main.snapshots[-1].files == tuple(
            f for f in env.workers.calls[-1].files if f.startswith("mem://main/")
        )
        assert_sizes(env, out, env.workers.calls[-1].files)
        assert (out.data_loss, out.epoch) == ({}, 1)
    assert batch_keys(env.main) == [(X, k) for k in range(4)]
    assert all(cp.epoch == 1 for cp in env.main.commits())
    assert all(cp.batch_end == E[cp.batch_id] for cp in env.main.commits())
    tl = env.timeline()
    instants = tl.instants()
    assert [i.state for i in instants] == [InstantState.COMPLETED] * 4
    assert [i.time for i in instants] == sorted({i.time for i in instants})  # strictly increasing
    assert [i.batch for i in instants] == [BatchIdentity(PIPE, X, k) for k in range(4)]

    # Spark replays the last batch (its commit log lagged): skipped, workers not run
    calls = len(env.workers.calls)
    assert env.batch(c, 3).outcome == "replay_skipped"
    assert len(env.workers.calls) == calls

    # purge keeps the newest finished instants; the protocol carries on
    newest = instants[-1].time
    assert tl.purge_finished(keep=2) == 2
    assert [i.time for i in tl.instants()] == [i.time for i in instants[2:]]
    assert not env.instant_file(instants[0].time, "requested").exists()
    assert not env.instant_file(instants[0].time, "completed").exists()
    out = env.batch(c, 4)
    assert out.outcome == "committed" and out.instant is not None and out.instant > newest
    assert tl.purge_finished(keep=0) == 3
    assert tl.instants() == []
    assert_exactly_once(env, E[4])


# ---------------------------------------------------------------------------------------
# Every driver crash point, then a restart
# ---------------------------------------------------------------------------------------

# mid-write is worker-side, during-rollback has its own tests, between-table-commits only
# exists with two main tables (tests/test_dual_pipeline.py)
OTHER_POINTS = {
    "mid-write",
    "during-rollback",
    "between-table-commits",
    "compaction-after-write",  # background maintenance: tests/test_*_maintenance.py
    "compaction-after-commit",
    "after-schema-change",  # at start, before any batch: tests/test_schema_evolution.py
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


# ---------------------------------------------------------------------------------------
# Damaged journal entries are "not written"
# ---------------------------------------------------------------------------------------


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(b"\x00\xff\xfe garbage \x13\x37" * 7)
    elif how == "bad-checksum":
        doc = json.loads(data)
        doc["payload"]["batch_id"] = doc["payload"]["batch_id"] + 1
        path.write_bytes(json.dumps(doc).encode())
    elif how == "not-an-object":
        body = json.dumps([1, 2], sort_keys=True, separators=(",", ":")).encode()
        path.write_bytes(
            json.dumps({"sha256": hashlib.sha256(body).hexdigest(), "payload": [1, 2]}).encode()
        )
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["truncated", "empty", "garbage", "bad-checksum", "not-an-object"])
def test_damaged_inflight_is_not_a_precommit(env: Env, how: str) -> None:
    c1 = env.driver("after-precommit:raise@1")
    env.batch(c1, 0)
    with pytest.raises(FaultInjected):
        env.batch(c1, 1)
    inst = env.timeline().pending()[0]
    staged = set(env.workers.written_by([inst.time]))
    _damage(env.instant_file(inst.time, "inflight"), how)
    seen = env.timeline().instant(inst.time)
    assert seen.state is InstantState.REQUESTED and seen.inflight is None

    c2 = env.driver()
    calls = len(env.workers.calls)
    out = env.batch(c2, 1)
    assert out.outcome == "committed"
    assert out.recovered == [(inst.time, "rolled_back")]
    assert len(env.workers.calls) - calls == 1  # recomputed, not recommitted
    assert set(rolled_back_paths(env, inst.time)) == staged  # found by name
    env.batch(c2, 2)
    assert_exactly_once(env, E[2])


@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_damaged_requested_without_inflight_is_rolled_back(env: Env, how: str) -> None:
    c1 = env.driver("after-write:raise@1")
    env.batch(c1, 0)
    with pytest.raises(FaultInjected):
        env.batch(c1, 1)
    inst = env.timeline().pending()[0]
    _damage(env.instant_file(inst.time, "requested"), how)
    seen = env.timeline().instant(inst.time)
    assert seen.state is InstantState.REQUESTED and seen.batch is None
    c2 = env.driver()
    out = env.batch(c2, 1)
    assert out.recovered == [(inst.time, "rolled_back")]
    env.batch(c2, 2)
    assert_exactly_once(env, E[2])


def test_damaged_inflight_of_a_committed_batch_is_completed_not_rolled_back(env: Env) -> None:
    """The table commit happened; only the marker is missing and the precommit is damaged:
    the instant is identified by its REQUESTED entry and its files are left alone."""
    c1 = env.driver("after-commit:raise@1")
    env.batch(c1, 0)
    with pytest.raises(FaultInjected):
        env.batch(c1, 1)
    inst = env.timeline().pending()[0]
    _damage(env.instant_file(inst.time, "inflight"), "garbage")
    c2 = env.driver()
    out = env.batch(c2, 1)
    assert (out.outcome, out.recovered) == ("replay_skipped", [(inst.time, "completed")])
    env.batch(c2, 2)
    assert_exactly_once(env, E[2])


def test_journal_ignores_temp_files_and_foreign_names(env: Env) -> None:
    c1 = env.driver()
    env.batch(c1, 0)
    instants = env.journal_dir / "instants"
    (instants / ".tmp-deadbeef").write_bytes(b"half a crash")
    (instants / "20990101000000000.unknown").write_bytes(b"x")
    (instants / "notatime.requested").write_bytes(b"x")
    (env.journal_dir / "epochs" / "junk").write_bytes(b"x")
    tl = env.timeline()
    assert [i.state for i in tl.instants()] == [InstantState.COMPLETED]
    assert tl.pending() == []
    assert tl.epochs() == [1]
    c2 = env.driver()
    assert c2.epoch == 2
    env.batch(c2, 1)
    assert_exactly_once(env, E[1])


def test_journal_entries_are_create_once(tmp_path: Path) -> None:
    store = LocalJournalStore(str(tmp_path))
    store.create("instants/a.requested", encode_entry({"x": 1}))
    with pytest.raises(journal_module.AlreadyExists):
        store.create("instants/a.requested", encode_entry({"x": 2}))
    data = store.read("instants/a.requested")
    assert data is not None and decode_entry("a", data) == {"x": 1}
    assert store.list("instants") == ["instants/a.requested"]  # no temp file left behind


# ---------------------------------------------------------------------------------------
# Fencing (invariant 7)
# ---------------------------------------------------------------------------------------


def test_zombie_that_loaded_before_the_fence_is_refused_not_rebased(env: Env) -> None:
    """A (old epoch) loads the table head and passes its fence check; B takes over
    (acquire_epoch + fence) before A's compare-and-set; A's retry must see B's epoch."""
    a = env.driver()
    env.batch(a, 0)
    taken: list[Coordinator] = []
    env.main.on("commit-cas", lambda: taken.append(env.driver()))
    with pytest.raises(FencedError):
        env.batch(a, 1)
    b = taken[0]
    assert (a.epoch, b.epoch) == (1, 2)
    assert batch_keys(env.main) == [(X, 0)]
    assert [r.result for r in env.main.attempts if r.batch_id == 1] == ["fenced"]
    # B replays batch 1 (same query): A's precommit is recommitted at B's epoch
    out = env.batch(b, 1)
    assert out.outcome == "recommitted"
    assert env.main.commits()[-1].epoch == 2
    env.batch(b, 2)
    calls = len(env.workers.calls)
    with pytest.raises(FencedError):  # the zombie's next batch stops before writing
        env.batch(a, 3)
    assert len(env.workers.calls) == calls
    assert_exactly_once(env, E[2])


def test_rebasing_commit_retry_would_let_the_zombie_in(env: Env) -> None:
    """The same race against pyiceberg's own retry (rebase without checks, docs/design.md
    invariant 7): the zombie's append lands after the fence. Shows the test above bites."""
    env.main.rebase_on_conflict = True
    a = env.driver()
    env.batch(a, 0)
    env.main.on("commit-cas", lambda: env.driver() and None)
    env.batch(a, 1)
    epochs = [s.checkpoint.epoch for s in env.main.snapshots]
    assert epochs[-2:] == [2, 1]  # B's fence, then the zombie's commit


def test_fence_semantics_of_the_memtable_match_the_adapter() -> None:
    t = MemTable()
    t.fence(PIPE, 1)
    cp = t.snapshots[-1].checkpoint
    assert (cp.epoch, cp.batch_id, dict(cp.committed_offsets)) == (1, -1, {})
    t.fence(PIPE, 1)  # same epoch: no-op
    assert len(t.snapshots) == 1
    t.fence(PIPE, 3)
    with pytest.raises(FencedError):
        t.fence(PIPE, 2)
    assert t.latest_epoch(PIPE) == 3 and t.latest_epoch("other") is None
    missing = MemTable(exists=False)
    missing.fence(PIPE, 5)
    assert missing.snapshots == [] and missing.latest_epoch(PIPE) is None


def test_acquire_epoch_is_unique_across_racing_timelines(tmp_path: Path) -> None:
    root = str(tmp_path / "journal")
    racers, per = 4, 8
    barrier = threading.Barrier(racers)
    got: list[int] = []
    lock = threading.Lock()

    def racer(n: int) -> None:
        tl = InstantTimeline(LocalJournalStore(root))
        barrier.wait()
        for _ in range(per):
            e = tl.acquire_epoch(owner=f"r{n}")
            with lock:
                got.append(e)

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(got) == list(range(1, racers * per + 1))
    assert InstantTimeline(LocalJournalStore(root)).epochs() == sorted(got)


def test_racing_drivers_get_distinct_epochs_and_the_older_is_fenced(env: Env) -> None:
    a = env.driver()
    env.batch(a, 0)
    barrier = threading.Barrier(3)
    result: dict[str, int | BaseException] = {}

    def start(name: str) -> None:
        c = Coordinator(PIPE, env.main, env.dl, timeline=env.timeline())
        barrier.wait()
        try:
            result[name] = c.acquire_epoch(owner=name)
        except FencedError as e:  # lost the fence race to a newer epoch
            result[name] = e

    threads = [threading.Thread(target=start, args=(n,)) for n in ("b", "c", "d")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    epochs = [v for v in result.values() if isinstance(v, int)]
    assert len(epochs) == len(set(epochs)) and epochs
    assert env.main.latest_epoch(PIPE) == max(epochs) == max(env.timeline().epochs())
    with pytest.raises(FencedError):
        env.batch(a, 1)


# ---------------------------------------------------------------------------------------
# Two writers, every interleaving of a zombie (A) and the writer that took over (B)
# ---------------------------------------------------------------------------------------


class TwoStep:
    """One interleaving of two writers with two context switches: ``A^i B^j A* B*``.

    Scheduling points are every journal write or listing, every table operation and every
    staged file. Writer A runs in the test's thread; at the point where ``pause_a(i, label)``
    holds (A has done ``i`` operations; ``label`` is the one it is about to do) writer B, a
    thread, runs until ``pause_b(j, label)`` holds and stops there; then A runs to its end
    and B after it. Only one writer runs at any time, so the interleaving is exact."""

    def __init__(
        self,
        pause_a: Callable[[int, str], bool],
        pause_b: Callable[[int, str], bool],
        timeout: float = 10.0,
    ) -> None:
        self.pause_a, self.pause_b, self.timeout = pause_a, pause_b, timeout
        self.trace: list[tuple[str, str]] = []
        self.errors: dict[str, BaseException] = {}
        self.switched = False  # B got its turn while A was still running
        self.b_finished_in_turn = False
        self._a_ident: int | None = None
        self._b_ident: int | None = None
        self._b_may_pause = True
        self._a_steps = self._b_steps = 0
        self._b: Callable[[], object] = lambda: None
        self._b_done = False
        self._b_stopped = threading.Event()
        self._b_resume = threading.Event()
        self._b_thread: threading.Thread | None = None

    def point(self, label: str) -> None:
        ident = threading.get_ident()
        if ident == self._a_ident:
            self.trace.append(("A", label))
            self._a_steps += 1
            if self._b_thread is None and self.pause_a(self._a_steps - 1, label):
                self.switched = True
                self._start_b()
                self.b_finished_in_turn = self._b_done
        elif ident == self._b_ident:
            self.trace.append(("B", label))
            self._b_steps += 1
            if self._b_may_pause and self.pause_b(self._b_steps - 1, label):
                self._b_may_pause = False
                self._b_stopped.set()
                if not self._b_resume.wait(self.timeout):
                    raise RuntimeError(f"B was never resumed at {label}")

    def _start_b(self) -> None:
        def body() -> None:
            self._b_ident = threading.get_ident()
            try:
                self._b()
            except BaseException as e:
                self.errors["B"] = e
            finally:
                self._b_done = True
                self._b_stopped.set()

        self._b_thread = threading.Thread(target=body, name="writer-B", daemon=True)
        self._b_thread.start()
        if not self._b_stopped.wait(self.timeout):
            raise RuntimeError("B stalled")

    def run(self, a: Callable[[], object], b: Callable[[], object]) -> None:
        self._b = b
        self._a_ident = threading.get_ident()
        try:
            a()
        except BaseException as e:
            self.errors["A"] = e
        finally:
            self._a_ident = None  # the test's own checks are not scheduled
        if self._b_thread is None:  # A ended first: B runs alone
            self._b_may_pause = False
            self._start_b()
        self._b_resume.set()
        assert self._b_thread is not None
        self._b_thread.join(self.timeout)
        if self._b_thread.is_alive():
            raise RuntimeError("B did not finish")


def at_step(n: int) -> Callable[[int, str], bool]:
    """A pause condition: after ``n`` operations."""
    return lambda steps, _label: steps == n


def nth_label(predicate: Callable[[str], bool], nth: int = 1) -> Callable[[int, str], bool]:
    """A pause condition: the ``nth`` point whose label satisfies ``predicate``."""
    seen = 0

    def check(_steps: int, label: str) -> bool:
        nonlocal seen
        if not predicate(label):
            return False
        seen += 1
        return seen == nth

    return check


class SteppedStore:
    """A journal store whose writes and listings are scheduling points."""

    def __init__(self, inner: JournalStore, point: Callable[[str], None]) -> None:
        self.inner = inner
        self.point = point

    def create(self, name: str, data: bytes) -> None:
        self.point(f"create {name}")
        self.inner.create(name, data)

    def read(self, name: str) -> bytes | None:
        return self.inner.read(name)  # entries are immutable once created

    def list(self, prefix: str) -> list[str]:
        self.point(f"list {prefix}")
        return self.inner.list(prefix)

    def delete(self, name: str) -> None:
        self.point(f"delete {name}")
        self.inner.delete(name)


@pytest.fixture
def fast_journal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """For hundreds of interleavings: a journal root on tmpfs when there is one (file
    creation on a disk filesystem costs ~10x more), no fsync (durability is not what they
    test), and a deterministic clock that moves forward 1 ms per minted instant."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    ticks = itertools.count()
    base = datetime(2030, 1, 1, tzinfo=UTC)
    lock = threading.Lock()

    def mint_time(after: str | None, now: datetime | None = None) -> str:
        with lock:
            tick = next(ticks)
        return next_instant_time(after, now or base + timedelta(milliseconds=tick))

    monkeypatch.setattr(journal_module, "next_instant_time", mint_time)
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        root = Path(tempfile.mkdtemp(prefix="commit-protocol-", dir=shm))
        try:
            yield root
        finally:
            shutil.rmtree(root, ignore_errors=True)
    else:
        yield tmp_path


class TwoWriters:
    """Writer A (epoch 1, a zombie: nothing tells it to stop but fencing) runs batch
    ``first``; writer B takes over with a new epoch (acquire_epoch + fence) and runs its
    first batch: after a driver failover Spark replays A's batch (same checkpoint), with a
    lost checkpoint B's query starts from the table's offsets (new query id,
    startingOffsets=table). With ``table_exists`` A committed batch 0 before; otherwise
    A's commit creates the table. The checks then let B's pipeline run on to ``E[final]``
    unscheduled, after a restart that recovers what the zombie left behind."""

    def __init__(
        self,
        root: Path,
        sched: TwoStep,
        *,
        b_incarnation: str,
        dead_letters: bool = False,
        table_exists: bool = True,
        files_per_partition: int = 1,
    ) -> None:
        self.root = root
        self.sched = sched
        self.kafka = make_kafka(dead_letters)
        self.main = MemTable("main", exists=table_exists)
        self.dl = MemTable("dead_letter", exists=table_exists)
        for t in (self.main, self.dl):
            t.point = sched.point
        self.wa = FakeWorkers(self.kafka, self.main, self.dl, files_per_partition)
        self.wb = FakeWorkers(self.kafka, self.main, self.dl, files_per_partition)
        self.b_incarnation = b_incarnation
        self.a = Coordinator(PIPE, self.main, self.dl, timeline=self.timeline())
        self.a.acquire_epoch(owner="A")
        self.first = 0
        if table_exists:
            self._batch(self.a, self.wa, X, 0)
            self.first = 1
        self.final = self.first + 1 if b_incarnation == X else 3
        self.b: Coordinator | None = None

    def timeline(self) -> InstantTimeline:
        store = LocalJournalStore(str(self.root / "journal"))
        return InstantTimeline(SteppedStore(store, self.sched.point))

    @staticmethod
    def _batch(c: Coordinator, w: FakeWorkers, inc: str, k: int) -> BatchOutcome:
        start = E[k - 1] if k else None
        return c.run_batch(inc, k, start, E[k], w.for_batch(start, E[k]))

    def actor_a(self) -> None:
        self._batch(self.a, self.wa, X, self.first)

    def actor_b(self) -> None:
        self.b = b = Coordinator(PIPE, self.main, self.dl, timeline=self.timeline())
        b.acquire_epoch(owner="B")
        if self.b_incarnation == X:  # driver failover: same checkpoint, Spark replays
            self._batch(b, self.wb, X, self.first)
        else:  # checkpoint lost: new query from the table's offsets (startingOffsets=table)
            s0 = self.main.committed_offsets(PIPE)
            b.run_batch(Y, 0, None, E[2], self.wb.for_batch(s0, E[2]))

    def rest_of_b(self) -> None:
        """B's pipeline goes on (unscheduled) to ``E[final]``."""
        assert self.b is not None
        if self.b_incarnation == X:
            self._batch(self.b, self.wb, X, self.final)
        else:
            self.b.run_batch(Y, 1, E[2], E[3], self.wb.for_batch(E[2], E[3]))

    def run(self) -> TwoWriters:
        self.sched.run(self.actor_a, self.actor_b)
        return self

    def violations(self) -> list[str]:
        """What is wrong with the final state (empty: all invariants hold)."""
        out: list[str] = []
        end = E[self.final]
        if "B" in self.sched.errors:
            return [f"B (the owner) failed: {self.sched.errors['B']!r}"]
        self.rest_of_b()
        a_err = self.sched.errors.get("A")
        if a_err is not None and not isinstance(a_err, FencedError):
            out.append(f"A failed with something else than FencedError: {a_err!r}")
        for t in (self.main, self.dl):
            if t.dangling():
                out.append(f"{t.name} references deleted files {t.dangling()}")
        if out:
            return out
        for t, want in ((self.main, self.kafka.good(end)), (self.dl, self.kafka.dead(end))):
            rows = t.rows()
            dups = sorted(r for r, n in Counter(rows).items() if n > 1)
            if dups:
                out.append(f"{t.name}: records committed twice {dups[:5]}")
            missing = sorted(set(want) - set(rows))
            if missing:
                out.append(f"{t.name}: records missing {missing[:5]}")
        for t in (self.main, self.dl):  # nothing of epoch 1 after anything of epoch 2
            epochs = [s.checkpoint.epoch for s in t.snapshots]
            if 2 in epochs and 1 in epochs[epochs.index(2) :]:
                out.append(f"{t.name}: a zombie commit after the takeover ({epochs})")
        if self.main.committed_offsets(PIPE) != end:
            out.append(f"committed offsets {self.main.committed_offsets(PIPE)} != {end}")
        referenced = set(self.main.referenced()) | set(self.dl.referenced())
        b_files = self.wb.written_by(c.write_id for c in self.wb.calls)
        if b_files - referenced:
            out.append(f"B's staged files not committed: {sorted(b_files - referenced)}")
        # the zombie's next batch is refused before it writes anything
        calls = len(self.wa.calls)
        try:
            self._batch(self.a, self.wa, X, 3)
            out.append("the zombie's next batch was not fenced")
        except FencedError:
            if len(self.wa.calls) != calls:
                out.append("the zombie's next batch ran its workers")
        # a later restart recovers whatever the zombie left pending
        c = Coordinator(PIPE, self.main, self.dl, timeline=self.timeline())
        c.acquire_epoch(owner="C")
        inc, k = (X, self.final) if self.b_incarnation == X else (Y, 1)
        start = E[self.final - 1]
        r = c.run_batch(inc, k, start, end, self.wb.for_batch(start, end))
        if r.outcome != "replay_skipped":
            out.append(f"restart replay: {r.outcome}")
        if self.timeline().pending():
            out.append("instants still pending after a restart")
        a_files = self.wa.written_by(c.write_id for c in self.wa.calls)
        stray = set(self.main.orphans() + self.dl.orphans()) - a_files
        if stray:
            out.append(f"orphan files not written by the zombie: {sorted(stray)}")
        return out

    def leaked(self) -> int:
        """Zombie files nobody will delete (staged after its instant was rolled back)."""
        return len(self.main.orphans()) + len(self.dl.orphans())


def two_step_schedules(
    make: Callable[[Path, TwoStep], TwoWriters], root: Path
) -> Iterator[tuple[int, int, TwoWriters]]:
    """Every ``A^i B^j A* B*``: B takes over after A's i-th operation and makes j
    operations of progress (acquire_epoch with its fences, recovery, its batches), then A
    runs on (fenced or not) and B completes. i runs until A ends before B's turn; j until
    B ends within its turn."""
    n = 0
    for i in itertools.count():
        for j in itertools.count(1):
            sched = TwoStep(at_step(i), at_step(j))
            n += 1
            w = make(root / f"s{n}", sched).run()
            yield i, j, w
            if not sched.switched or sched.b_finished_in_turn:
                break
        if not sched.switched:
            return


@pytest.mark.parametrize(
    ("b_incarnation", "dead_letters"),
    [(X, True), (Y, True)],
    ids=["failover", "lost-checkpoint"],
)
def test_every_interleaving_of_a_zombie_and_the_new_owner(
    fast_journal: Path, b_incarnation: str, dead_letters: bool
) -> None:
    """No record twice or lost, no dangling file, the zombie's commits after the takeover
    refused (also when it loaded the head before the fence), the owner never fenced."""

    def make(root: Path, sched: TwoStep) -> TwoWriters:
        return TwoWriters(root, sched, b_incarnation=b_incarnation, dead_letters=dead_letters)

    bad: list[str] = []
    schedules = fenced = leaks = 0
    for i, j, w in two_step_schedules(make, fast_journal):
        schedules += 1
        fenced += isinstance(w.sched.errors.get("A"), FencedError)
        problems = w.violations()
        leaks += w.leaked() > 0
        if problems:
            bad.append(f"A^{i} B^{j}: {problems[0]} -- {w.sched.trace}")
    assert schedules > 100 and fenced > 0
    assert bad == [], f"{len(bad)}/{schedules} interleavings broke an invariant: {bad[:2]}"


def test_zombie_dead_letter_commit_before_the_takeover_survives_recovery(
    fast_journal: Path,
) -> None:
    """A committed the dead letters of its batch; B takes over (fences) with a new query
    (lost checkpoint). Rolling A's instant back would delete files the dead-letter table
    references, so B's recovery finishes it (main files at B's epoch); A's own main commit
    then finds the batch committed and appends nothing. Nothing lost, nothing twice."""
    sched = TwoStep(nth_label(lambda label: label == "commit-load", 2), lambda _, __: False)
    w = TwoWriters(fast_journal, sched, b_incarnation=Y, dead_letters=True).run()
    assert [s.checkpoint.epoch for s in w.dl.snapshots][:4] == [1, 1, 1, 2]
    assert w.violations() == []


def test_zombie_first_commit_after_takeover_on_a_table_not_yet_created(fast_journal: Path) -> None:
    # A: REQUESTED written, one file staged, about to stage the next.
    # B: acquire_epoch: an earlier run is on record, so the fence creates the missing table
    #    (empty, at B's epoch); recovery rolls A's instant back, deleting the staged file.
    # A: stages the rest, precommits, tries to create the table with its first commit:
    #    the table exists, its retry sees epoch 2 and A is fenced.
    sched = TwoStep(
        nth_label(lambda label: label == "stage", 2),
        nth_label(lambda label: label.endswith(".requested")),
    )
    w = TwoWriters(
        fast_journal, sched, b_incarnation=X, table_exists=False, files_per_partition=2
    ).run()
    assert isinstance(sched.errors.get("A"), FencedError)
    assert w.main.snapshots[0].checkpoint.epoch == 2  # the fence created the table
    assert w.violations() == []


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
        c = Coordinator(pid, main, dl, timeline=InstantTimeline(store), faults=FaultPoints(faults))
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


def test_instant_time_collision_between_writers_of_one_journal_fails_the_loser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writers minting in the same millisecond from the same listing: create-if-absent
    lets exactly one REQUESTED exist; the other batch fails (and Spark retries it)."""
    frozen = datetime(2030, 1, 1, tzinfo=UTC)
    monkeypatch.setattr(
        journal_module, "next_instant_time", lambda after: next_instant_time(after, frozen)
    )
    tl1 = InstantTimeline(LocalJournalStore(str(tmp_path)))
    tl2 = InstantTimeline(LocalJournalStore(str(tmp_path)))
    t1, t2 = tl1.mint(), tl2.mint()
    assert t1 == t2
    req = Requested(t1, BatchIdentity(PIPE, X, 0), 1, PartitionOffsets(), E[0])
    tl1.request(req)
    with pytest.raises(journal_module.AlreadyExists):
        tl2.request(req)
    assert tl2.mint() > t1


# ---------------------------------------------------------------------------------------
# At-least-once baseline and instant times
# ---------------------------------------------------------------------------------------


def test_at_least_once_mode_appends_without_journal_or_fencing(env: Env) -> None:
    c = make_coordinator(PIPE, env.main, env.dl, timeline=None)
    assert isinstance(c, AtLeastOnceCoordinator) and not c.exactly_once
    for k in range(3):
        out = env.batch(c, k)
        assert (out.outcome, out.instant) == ("committed", None)
        assert_sizes(env, out, env.workers.calls[-1].files)
        assert (out.data_loss, out.epoch) == ({}, None)
    assert not env.journal_dir.exists()
    assert all(cp.epoch == 0 for cp in env.main.commits())
    assert all(call.write_id.startswith("alo-") for call in env.workers.calls)
    assert all(len(call.drop_below) == 0 for call in env.workers.calls)
    assert env.main.rows() == env.kafka.good(E[2])
    assert env.main.committed_offsets(PIPE) == E[2]
    # a new checkpoint from earliest: plain appends, no self-correction -> duplicates
    env.run(c, Y, 0, None, E[2], earliest=True)
    assert env.main.rows() == sorted(env.kafka.good(E[2]) * 2)
    # with a journal: the exactly-once coordinator
    assert isinstance(make_coordinator(PIPE, env.main, timeline=env.timeline()), Coordinator)


def test_next_instant_time_is_strictly_increasing_when_the_clock_goes_backwards() -> None:
    base = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
    ms = timedelta(milliseconds=1)
    clock = [base, base + 5 * ms, base - timedelta(seconds=1), base + 5 * ms, base, base + 6 * ms]
    clock += [base - timedelta(hours=3), base + timedelta(seconds=1), base + timedelta(seconds=1)]
    times: list[str] = []
    last: str | None = None
    for now in clock:
        last = next_instant_time(last, now)
        assert len(last) == 17 and last.isdigit()
        assert format_instant_time(parse_instant_time(last)) == last
        times.append(last)
    assert times == sorted(set(times))
    assert times[:4] == [
        "20240501120000000",
        "20240501120000005",
        "20240501120000006",
        "20240501120000007",
    ]
    assert times[-2:] == ["20240501120001000", "20240501120001001"]
    assert next_instant_time("20241231235959999", base) == "20250101000000000"
    with pytest.raises(ValueError):
        parse_instant_time("2024")


def test_minted_instants_stay_after_a_journal_from_the_future(env: Env) -> None:
    """The clock went back across a restart: instants still increase, and so do the
    batches' instants."""
    tl = env.timeline()
    future = "29990101000000000"
    tl.request(Requested(future, BatchIdentity(PIPE, "old", 7), 1, PartitionOffsets(), E[0]))
    tl.complete(future)
    assert tl.mint() == "29990101000000001"
    c = env.driver()
    out = env.batch(c, 0)
    assert out.instant == "29990101000000001"
    out = env.batch(c, 1)
    assert out.instant == "29990101000000002"
    assert_exactly_once(env, E[1])
