"""Hudi instants (``pipeline.formats.hudi.instant``): every instant's file name parses back to
it, the names Hudi writes parse to the instants they stand for and are built byte for
byte, and any other name in a timeline directory is no instant."""

from __future__ import annotations

import itertools

import pytest

from pipeline.formats.hudi.instant import (
    Action,
    Instant,
    State,
    commit_name,
    inflight_name,
    instant_files,
    requested_name,
)

T = "20240102030405678"  # 17 digits: Hudi 0.10 and later
T14 = "20240102030405"  # 14 digits: older tables
DONE = "20240102030406789"


@pytest.mark.parametrize(("action", "state"), list(itertools.product(Action, State)))
def test_every_action_and_state_round_trips(action: Action, state: State) -> None:
    for time in (T, T14):
        instant = Instant(time, action, state)
        assert Instant.parse(instant.file_name) == instant
    if state is State.COMPLETED:  # layout 2 names the completion time too
        instant = Instant(T, action, state, DONE)
        assert instant.file_name == f"{T}_{DONE}.{action.value}"
        assert Instant.parse(instant.file_name) == instant


@pytest.mark.parametrize(
    ("name", "instant"),
    [
        # timeline layout 1 (table version 6): what the native writer writes
        (f"{T}.commit.requested", Instant(T, Action.COMMIT, State.REQUESTED)),
        (f"{T}.inflight", Instant(T, Action.COMMIT, State.INFLIGHT)),
        (f"{T}.commit", Instant(T, Action.COMMIT, State.COMPLETED)),
        (f"{T}.replacecommit.requested", Instant(T, Action.REPLACE_COMMIT, State.REQUESTED)),
        (f"{T}.replacecommit.inflight", Instant(T, Action.REPLACE_COMMIT, State.INFLIGHT)),
        (f"{T}.replacecommit", Instant(T, Action.REPLACE_COMMIT, State.COMPLETED)),
        # Hudi's own tools on such a table
        (f"{T}.rollback.requested", Instant(T, Action.ROLLBACK, State.REQUESTED)),
        (f"{T}.rollback.inflight", Instant(T, Action.ROLLBACK, State.INFLIGHT)),
        (f"{T}.rollback", Instant(T, Action.ROLLBACK, State.COMPLETED)),
        (f"{T}.clean.requested", Instant(T, Action.CLEAN, State.REQUESTED)),
        (f"{T}.clean.inflight", Instant(T, Action.CLEAN, State.INFLIGHT)),
        (f"{T}.clean", Instant(T, Action.CLEAN, State.COMPLETED)),
        (f"{T}.deltacommit.inflight", Instant(T, Action.DELTA_COMMIT, State.INFLIGHT)),
        (f"{T14}.commit", Instant(T14, Action.COMMIT, State.COMPLETED)),
        # timeline layout 2 (table version 8 and later, Hudi 1.x): completed instants
        (f"{T}_{DONE}.commit", Instant(T, Action.COMMIT, State.COMPLETED, DONE)),
        (f"{T}_{DONE}.replacecommit", Instant(T, Action.REPLACE_COMMIT, State.COMPLETED, DONE)),
        (f"{T}_{DONE}.clean", Instant(T, Action.CLEAN, State.COMPLETED, DONE)),
        (f"{T}_{DONE}.rollback", Instant(T, Action.ROLLBACK, State.COMPLETED, DONE)),
    ],
)
def test_the_names_hudi_writes(name: str, instant: Instant) -> None:
    assert Instant.parse(name) == instant
    assert instant.file_name == name


def test_a_commits_inflight_is_also_read_in_the_long_form() -> None:
    """``<time>.commit.inflight`` is written by no Hudi but was always read as the
    commit's inflight; it is built in the short form."""
    instant = Instant.parse(f"{T}.commit.inflight")
    assert instant == Instant(T, Action.COMMIT, State.INFLIGHT)
    assert instant is not None and instant.file_name == f"{T}.inflight"


@pytest.mark.parametrize(
    "name",
    [
        "hoodie.properties",
        "archived",
        ".aux",
        ".temp",
        ".ingest",
        "timeline",
        f"{T}.commit.{'0' * 8}-1234",  # a temporary file of Hudi's writer
        f"{T}.requested",
        f"{T}.foo",  # no such action
        f"{T}.commit.completed",
        f"{T}.Commit",
        f"{T}.commit.requested.crc",
        f"{T}_{DONE}.commit.requested",  # a pending instant has no completion time
        f"{T14}_{DONE}.commit",  # layout 2 names 17-digit times
        f"{T}_{T14}.commit",
        f"{T[:-1]}.commit",  # 16 digits
        f"x{T}.commit",
        f"{T}.commit ",
    ],
)
def test_other_names_are_no_instant(name: str) -> None:
    assert Instant.parse(name) is None


def test_a_pending_instant_has_no_completion_time() -> None:
    with pytest.raises(ValueError, match="no completion time"):
        Instant(T, Action.COMMIT, State.INFLIGHT, DONE)


def test_the_writers_names_are_the_ones_hudi_writes() -> None:
    assert requested_name(T) == f"{T}.commit.requested"
    assert inflight_name(T) == f"{T}.inflight"
    assert commit_name(T) == f"{T}.commit"
    assert instant_files(T) == (f"{T}.commit.requested", f"{T}.inflight", f"{T}.commit")
    assert instant_files(T, Action.REPLACE_COMMIT) == (
        f"{T}.replacecommit.requested",
        f"{T}.replacecommit.inflight",
        f"{T}.replacecommit",
    )
    assert instant_files(T, Action.CLEAN) == (
        f"{T}.clean.requested",
        f"{T}.clean.inflight",
        f"{T}.clean",
    )
