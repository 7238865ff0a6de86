"""The typed seams of the commit core: the coordinators' one Protocol, the
outcomes they produce, fault points as an enum with one encode/decode pair."""

from __future__ import annotations

from pathlib import Path

import pytest
from memtable import MemTable

from pipeline.commit.at_least_once import AtLeastOnceCoordinator
from pipeline.commit.coordinator import Coordinator, make_coordinator
from pipeline.commit.faults import (
    POINTS,
    Fault,
    FaultAction,
    FaultPoint,
    FaultPoints,
    format_faults,
    parse_faults,
)
from pipeline.commit.journal import InstantTimeline
from pipeline.commit.protocol import BatchCoordinator
from pipeline.commit.types import Outcome
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
