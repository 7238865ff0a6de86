"""The typed seams of the commit core: the coordinators' one Protocol, the
outcomes they produce, fault points as an enum with one encode/decode pair; the batch in
flight and its named predicates; the table set a batch commits to (commit order, the
roll-forward rule)."""

from __future__ import annotations

import base64
import threading
import time
from pathlib import Path

import pytest
from support.memtable import FakeKafka, FakeWorkers, MemTable

from pipeline.commit.at_least_once import AtLeastOnceCoordinator
from pipeline.commit.coordinator import Coordinator, make_coordinator
from pipeline.commit.faults import (
    POINTS,
    Fault,
    FaultAction,
    FaultInjected,
    FaultPoint,
    FaultPoints,
    format_faults,
    parse_faults,
)
from pipeline.commit.inflight_batch import InFlightBatch
from pipeline.commit.instant import BatchIdentity, Instant
from pipeline.commit.journal import InstantTimeline, decode_entry, encode_entry
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.commit.protocol import BatchCoordinator
from pipeline.commit.table_set import CommitTables
from pipeline.commit.types import DEAD_LETTER, MAIN, Outcome, StagedBatch, WriteFn
from pipeline.errors import ConfigError, TableSetChanged
from pipeline.storage.local import LocalJournalStore


def _timeline(tmp_path: Path) -> InstantTimeline:
    return InstantTimeline(LocalJournalStore(str(tmp_path / "journal")))


def test_both_coordinators_satisfy_the_batch_coordinator_protocol(tmp_path: Path) -> None:
    # typed assignments: mypy checks them against the Protocol; isinstance at run time
    exactly: BatchCoordinator = Coordinator(
        "p", CommitTables(MemTable("main")), timeline=_timeline(tmp_path)
    )
    plain: BatchCoordinator = AtLeastOnceCoordinator("p", CommitTables(MemTable("main")))
    for c in (exactly, plain):
        assert isinstance(c, BatchCoordinator)
    assert (exactly.exactly_once, plain.exactly_once) == (True, False)


def test_make_coordinator_takes_on_gap_and_the_baseline_takes_no_exactly_once_knob(
    tmp_path: Path,
) -> None:
    c = make_coordinator(
        "p", CommitTables(MemTable("main")), timeline=_timeline(tmp_path), on_gap="rewind"
    )
    assert isinstance(c, Coordinator) and c.on_gap == "rewind"
    with pytest.raises(TypeError):
        AtLeastOnceCoordinator("p", CommitTables(MemTable("main")), on_overlap="fail")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        AtLeastOnceCoordinator("p", CommitTables(MemTable("main")), data_loss=None)  # type: ignore[call-arg]


def test_outcomes_are_the_ones_the_coordinators_produce() -> None:
    assert {o.value for o in Outcome} == {"committed", "replay_skipped", "recommitted"}


def test_fault_points_keep_their_names_and_round_trip_through_the_syntax() -> None:
    assert tuple(p.value for p in FaultPoint) == POINTS
    assert "mid-write" in POINTS and FaultPoint("after-commit") is FaultPoint.AFTER_COMMIT
    armed = parse_faults("mid-write:raise, after-write:sleep=0.25@3, after-commit")
    assert armed == {
        FaultPoint.MID_WRITE: Fault(FaultPoint.MID_WRITE, FaultAction.RAISE),
        FaultPoint.AFTER_WRITE: Fault(FaultPoint.AFTER_WRITE, FaultAction.SLEEP, 3, 0.25),
        FaultPoint.AFTER_COMMIT: Fault(FaultPoint.AFTER_COMMIT, FaultAction.KILL),
    }
    assert parse_faults(format_faults(armed.values())) == armed
    assert format_faults([]) is None
    assert FaultPoints("mid-write:raise,after-write").at(FaultPoint.MID_WRITE) == [
        Fault(FaultPoint.MID_WRITE, FaultAction.RAISE)
    ]
    for bad in ("no-such-point", "after-write:explode", "after-write:kill@x"):
        with pytest.raises(ConfigError):
            parse_faults(bad)


# -- the batch in flight and the table set ----------------------------------------------

T0 = TopicPartition("t", 0)


def test_the_in_flight_batch_says_how_far_its_sequence_got() -> None:
    ticks = iter([0.0, 1.5, 4.0])
    batch = InFlightBatch(
        BatchIdentity("p", "q", 3), None, PartitionOffsets({T0: 10}), clock=lambda: next(ticks)
    )
    assert batch.batch_id == 3
    assert not (batch.is_requested() or batch.is_precommitted() or batch.is_partly_committed())
    batch.lap("recovery")
    batch.lap("request")
    assert batch.timings == {"recovery": 1.5, "request": 2.5}
    batch.instant = "20260101000000000"
    assert batch.is_requested() and not batch.is_precommitted()
    batch.committed_to.append(DEAD_LETTER)
    assert batch.is_committed_to(DEAD_LETTER) and not batch.is_committed_to(MAIN)
    assert batch.is_partly_committed() and not batch.is_committed()
    batch.committed_to.append(MAIN)
    assert batch.is_committed() and not batch.is_partly_committed()


def _crashed_between_the_tables(tmp_path: Path) -> tuple[MemTable, MemTable, Instant]:
    """A batch whose dead letters are committed and whose main commit never ran."""
    kafka = FakeKafka({T0: list(range(20))}, {("t", 0, 4)})
    main, dl = MemTable("main"), MemTable("dead_letter")
    timeline = _timeline(tmp_path)
    c = Coordinator(
        "p",
        CommitTables(main, dl),
        timeline=timeline,
        faults=FaultPoints("after-dead-letter-commit:raise"),
    )
    c.acquire_epoch()
    end = PartitionOffsets({T0: 20})
    with pytest.raises(FaultInjected):
        c.run_batch("q", 0, None, end, FakeWorkers(kafka, main, dl).for_batch({}, end))
    (pending,) = timeline.pending()
    return main, dl, pending


def test_a_batch_committed_to_any_table_of_the_set_is_finished(tmp_path: Path) -> None:
    main, dl, inst = _crashed_between_the_tables(tmp_path)
    assert inst.batch is not None and inst.inflight is not None
    tables = CommitTables(main, dl)
    assert [name for name, _ in tables] == [DEAD_LETTER, MAIN]  # commit order
    assert [name for name, _ in tables.main_first()] == [MAIN, DEAD_LETTER]
    assert tables.holds(DEAD_LETTER, inst.batch, inst.end, inst.inflight)
    assert not tables.holds(MAIN, inst.batch, inst.end, inst.inflight)
    assert tables.holds_any(inst.batch, inst.end, inst.inflight)  # roll forward
    assert tables.needs_commit(inst.inflight, MAIN)
    assert not tables.needs_commit(inst.inflight, DEAD_LETTER)  # already there
    # the set without its dead-letter table: only the main table decides
    alone = CommitTables(main)
    assert not alone.holds_any(inst.batch, inst.end, inst.inflight)
    assert alone.get(DEAD_LETTER) is None and alone.main is main


# -- a set of several main tables (``both``: Iceberg then Hudi) -------------------------

MIRROR = "mirror"
T1 = TopicPartition("t", 1)
TWO_BATCHES = (PartitionOffsets({T0: 20, T1: 10}), PartitionOffsets({T0: 40, T1: 30}))


def _mirror_route(descriptor: bytes) -> tuple[str, bytes]:
    """Workers tag the mirror's descriptors ``2``; anything else is the first table's."""
    if descriptor[:1] == b"2":
        return MIRROR, descriptor[1:]
    return MAIN, descriptor


class _TwoMains:
    """A pipeline whose workers write every good row to two main tables."""

    def __init__(self, tmp_path: Path, commit_threads: int = 1) -> None:
        self.kafka = FakeKafka({T0: list(range(40)), T1: list(range(30))}, {("t", 0, 4)})
        self.main, self.mirror, self.dl = MemTable("main"), MemTable(MIRROR), MemTable("dl")
        self.journal = tmp_path / "journal"
        self.commit_threads = commit_threads  # 1: one after the other, as ``both`` commits

    def tables(self) -> CommitTables:
        return CommitTables(
            self.main,
            self.dl,
            more_mains=[(MIRROR, self.mirror)],
            route=_mirror_route,
            commit_threads=self.commit_threads,
        )

    def driver(self, faults: str = "") -> Coordinator:
        timeline = InstantTimeline(LocalJournalStore(str(self.journal)))
        c = Coordinator("p", self.tables(), timeline=timeline, faults=FaultPoints(faults))
        c.acquire_epoch()
        return c

    def write(self, start: PartitionOffsets | None, end: PartitionOffsets) -> WriteFn:
        both = FakeWorkers(self.kafka, self.main, self.dl).for_batch(start or {}, end)

        def write(write_id: str, drop_below: PartitionOffsets) -> StagedBatch:
            staged = both(write_id, drop_below)
            copies = [self.main.physical[self.main.describe(d)[0]] for d in staged.data_files]
            staged.data_files += [b"2" + self.mirror.stage(write_id, f.records) for f in copies]
            return staged

        return write

    def run(self, c: Coordinator, batch_id: int) -> Outcome:
        start = TWO_BATCHES[batch_id - 1] if batch_id else None
        end = TWO_BATCHES[batch_id]
        return c.run_batch("q", batch_id, start, end, self.write(start, end)).outcome

    def assert_exactly_once(self) -> None:
        good = sorted(self.kafka.good(TWO_BATCHES[-1]))
        assert sorted(self.main.rows()) == good and sorted(self.mirror.rows()) == good
        assert sorted(self.dl.rows()) == sorted(self.kafka.dead(TWO_BATCHES[-1]))
        assert not self.main.dangling() and not self.mirror.dangling()


def test_a_set_of_two_main_tables_commits_each_and_journals_each_tables_files(
    tmp_path: Path,
) -> None:
    env = _TwoMains(tmp_path)
    c = env.driver()
    assert [env.run(c, b) for b in (0, 1)] == [Outcome.COMMITTED, Outcome.COMMITTED]
    env.assert_exactly_once()
    tables = env.tables()
    assert [name for name, _ in tables] == [DEAD_LETTER, MAIN, MIRROR]
    assert tables.last() == MIRROR and tables.is_main(MIRROR) and not tables.is_main(DEAD_LETTER)
    (done, _) = c.timeline.instants()[-2:]
    assert done.inflight is not None
    names = {f.table for f in done.inflight.files}
    assert names == {DEAD_LETTER, MAIN, MIRROR}
    assert all(f.descriptor[:1] == b"{" for f in done.inflight.files)  # routed: untagged
    assert tables.committed_offsets("p") == TWO_BATCHES[-1]


def test_a_crash_between_two_main_tables_is_rolled_forward(tmp_path: Path) -> None:
    env = _TwoMains(tmp_path)
    env.run(env.driver(), 0)
    with pytest.raises(FaultInjected):
        env.run(env.driver("between-table-commits:raise"), 1)
    batch = BatchIdentity("p", "q", 1)
    assert env.main.is_committed(batch) and not env.mirror.is_committed(batch)
    tables = env.tables()
    assert not tables.is_committed(batch)  # done only when every main table holds it
    # where the pipeline stands: the table furthest behind
    assert tables.committed_offsets("p") == TWO_BATCHES[0]
    (pending,) = env.driver().timeline.pending()
    assert tables.holds_any(batch, pending.end, pending.inflight)  # roll forward
    # a restart replays batch 1: recovery finishes it in the mirror, nothing twice
    assert env.run(env.driver(), 1) is Outcome.RECOMMITTED
    env.assert_exactly_once()
    assert tables.is_committed(batch)


def test_an_inflight_journaled_with_every_main_file_under_main_is_routed_on_recovery(
    tmp_path: Path,
) -> None:
    """An older release journaled a set of two as one main table: both tables' files
    under ``main`` in the workers' tagged form. Recovery routes them and recommits."""
    env = _TwoMains(tmp_path)
    env.run(env.driver(), 0)
    with pytest.raises(FaultInjected):
        env.run(env.driver("after-precommit:raise"), 1)
    store = LocalJournalStore(str(env.journal))
    (pending,) = env.driver().timeline.pending()
    name = f"instants/{pending.time}.inflight"
    payload = decode_entry(name, store.read(name) or b"")
    for f in payload["files"]:
        if f["table"] == MIRROR:  # the old form: under main, tagged
            f["table"] = MAIN
            f["descriptor"] = base64.b64encode(b"2" + base64.b64decode(f["descriptor"])).decode()
    store.delete(name)
    store.create(name, encode_entry(payload))
    (legacy,) = env.driver().timeline.pending()
    assert legacy.inflight is not None
    assert {f.table for f in legacy.inflight.files} == {MAIN}
    routed = env.tables().upgraded(legacy)
    assert routed.inflight is not None
    assert {f.table for f in routed.inflight.files} == {MAIN, MIRROR}
    assert all(f.descriptor[:1] == b"{" for f in routed.inflight.files)
    assert env.run(env.driver(), 1) is Outcome.RECOMMITTED  # intact: no recompute
    env.assert_exactly_once()


def test_one_main_table_routes_every_main_file_to_itself(tmp_path: Path) -> None:
    main = MemTable("main")
    tables = CommitTables(main)
    assert tables.route(b"2{}") == (MAIN, b"2{}")
    with pytest.raises(ValueError, match="distinct names"):
        CommitTables(main, more_mains=[(MAIN, MemTable("x"))])
    with pytest.raises(ValueError, match="distinct names"):
        CommitTables(main, more_mains=[(DEAD_LETTER, MemTable("x"))])


def test_the_main_tables_of_a_set_commit_at_once_on_a_bounded_pool() -> None:
    """Three main tables, two threads: two commits are in flight together (each waits
    at a barrier of two, which one-after-the-other commits never pass), never three."""
    barrier = threading.Barrier(2, timeout=10)
    running, most = 0, 0
    lock = threading.Lock()

    def commit(name: str, table: object) -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        if name != "c":
            barrier.wait()
        with lock:
            running -= 1

    tables = CommitTables(
        MemTable("a"), more_mains=[("b", MemTable("b")), ("c", MemTable("c"))], commit_threads=2
    )
    tables.commit_mains(commit)
    assert most == 2


def test_a_failing_table_commit_lets_the_others_finish_then_raises() -> None:
    done: list[str] = []

    def commit(name: str, table: object) -> None:
        if name == MAIN:
            raise RuntimeError("catalog down")
        time.sleep(0.05)
        done.append(name)

    tables = CommitTables(
        MemTable("a"), more_mains=[("b", MemTable("b")), ("c", MemTable("c"))], commit_threads=3
    )
    with pytest.raises(RuntimeError, match="catalog down"):
        tables.commit_mains(commit)
    assert sorted(done) == ["b", "c"]


def test_a_crash_while_main_tables_commit_at_once_is_rolled_forward(tmp_path: Path) -> None:
    env = _TwoMains(tmp_path, commit_threads=2)
    env.run(env.driver(), 0)
    with pytest.raises(FaultInjected):
        env.run(env.driver("between-table-commits:raise"), 1)
    batch = BatchIdentity("p", "q", 1)
    assert env.main.is_committed(batch)  # the point is hit after it; the mirror's may run
    (pending,) = env.driver().timeline.pending()
    assert env.tables().holds_any(batch, pending.end, pending.inflight)
    assert env.run(env.driver(), 1) in (Outcome.RECOMMITTED, Outcome.REPLAY_SKIPPED)
    env.assert_exactly_once()
    assert env.tables().is_committed(batch)
    assert not env.driver().timeline.pending()


def test_a_pending_instant_for_a_table_the_set_no_longer_holds_stops_recovery(
    tmp_path: Path,
) -> None:
    """A route removed while an instant that staged files for its table is pending:
    recovering it into the remaining tables would lose those records, rolling it back
    would delete files a committed table may reference. Recovery stops, naming both."""
    env = _TwoMains(tmp_path)
    env.run(env.driver(), 0)
    with pytest.raises(FaultInjected):
        env.run(env.driver("after-precommit:raise"), 1)
    timeline = InstantTimeline(LocalJournalStore(str(env.journal)))
    fewer = Coordinator("p", CommitTables(env.main, env.dl), timeline=timeline)
    fewer.acquire_epoch()
    end = TWO_BATCHES[1]
    write = env.write(TWO_BATCHES[0], end)
    with pytest.raises(TableSetChanged, match=rf"lists files for table\(s\) {MIRROR}"):
        fewer.run_batch("q", 1, TWO_BATCHES[0], end, write)
    assert not env.main.is_committed(BatchIdentity("p", "q", 1))
    assert len(timeline.pending()) == 1  # nothing finished, nothing rolled back
