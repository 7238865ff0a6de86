"""The typed seams of the commit core: the coordinators' one Protocol, the
outcomes they produce, fault points as an enum with one encode/decode pair; the batch in
flight and its named predicates; the table set a batch commits to (commit order, the
roll-forward rule)."""

from __future__ import annotations

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
from pipeline.commit.journal import InstantTimeline
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.commit.protocol import BatchCoordinator
from pipeline.commit.table_set import CommitTables
from pipeline.commit.types import DEAD_LETTER, MAIN, Outcome
from pipeline.errors import ConfigError
from pipeline.storage.local import LocalJournalStore


def _timeline(tmp_path: Path) -> InstantTimeline:
    return InstantTimeline(LocalJournalStore(str(tmp_path / "journal")))


def test_both_coordinators_satisfy_the_batch_coordinator_protocol(tmp_path: Path) -> None:
    # typed assignments: mypy checks them against the Protocol; isinstance at run time
    exactly: BatchCoordinator = Coordinator("p", MemTable("main"), timeline=_timeline(tmp_path))
    plain: BatchCoordinator = AtLeastOnceCoordinator("p", MemTable("main"))
    for c in (exactly, plain):
        assert isinstance(c, BatchCoordinator)
    assert (exactly.exactly_once, plain.exactly_once) == (True, False)


def test_make_coordinator_takes_on_gap_and_the_baseline_takes_no_exactly_once_knob(
    tmp_path: Path,
) -> None:
    c = make_coordinator("p", MemTable("main"), timeline=_timeline(tmp_path), on_gap="rewind")
    assert isinstance(c, Coordinator) and c.on_gap == "rewind"
    with pytest.raises(TypeError):
        AtLeastOnceCoordinator("p", MemTable("main"), on_overlap="fail")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        AtLeastOnceCoordinator("p", MemTable("main"), data_loss=None)  # type: ignore[call-arg]


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
        "p", main, dl, timeline=timeline, faults=FaultPoints("after-dead-letter-commit:raise")
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
