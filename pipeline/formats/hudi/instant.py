"""A Hudi instant -- a time, an :class:`Action` and a :class:`State` -- and the file name
that stands for it on the timeline: the one place instant file names are built and parsed.

Names, as Hudi writes them (``<time>``: 14 or 17 digits; ``<completion>``: 17)::

    <time>.<action>.requested           requested
    <time>.<action>.inflight            inflight; a commit's is <time>.inflight
    <time>.<action>                     completed (timeline layout 1: table version 6,
                                        in .hoodie; the native writer's tables)
    <time>_<completion>.<action>        completed (timeline layout 2: table version 8 and
                                        later, in .hoodie/timeline; Hudi's own writer)

Invariants (tests/unit/formats/hudi/test_instant.py): ``Instant.parse(i.file_name) == i`` for
every instant; ``Instant.parse(name).file_name == name`` for every name above;
:meth:`Instant.parse` answers None for any other name (``hoodie.properties``, directories,
a temporary ``<name>.<uuid>``, an action Hudi does not have), so a listing of the
timeline directory is read without a filter. One name more is read, never written:
``<time>.commit.inflight`` is the commit's inflight too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "HOUSEKEEPING",
    "Action",
    "Instant",
    "State",
    "commit_name",
    "inflight_name",
    "instant_files",
    "requested_name",
]


class Action(StrEnum):
    """The actions of a Hudi timeline (table versions 6 to 9)."""

    COMMIT = "commit"
    DELTA_COMMIT = "deltacommit"
    REPLACE_COMMIT = "replacecommit"
    CLEAN = "clean"
    ROLLBACK = "rollback"
    SAVEPOINT = "savepoint"
    RESTORE = "restore"
    COMPACTION = "compaction"
    LOG_COMPACTION = "logcompaction"
    CLUSTERING = "clustering"
    INDEXING = "indexing"
    SCHEMA_COMMIT = "schemacommit"


class State(StrEnum):
    REQUESTED = "requested"
    INFLIGHT = "inflight"
    COMPLETED = "completed"


# Hudi's own housekeeping, run by hand with Hudi's tools: a completed one records what was
# done (its Avro metadata feeds only Hudi's next run of it), so it may leave the active
# timeline with a trim, as Hudi's archiver would move it; a pending one stops the trim.
HOUSEKEEPING = frozenset({Action.CLEAN, Action.ROLLBACK})

_ACTIONS = "|".join(a.value for a in Action)
_NAME = re.compile(
    r"^(?P<time>[0-9]{14}(?:[0-9]{3})?)"
    r"(?:_(?P<completion>[0-9]{17}))?"
    rf"\.(?:(?P<action>{_ACTIONS})(?:\.(?P<state>requested|inflight))?|(?P<inflight>inflight))$"
)


@dataclass(frozen=True)
class Instant:
    """One instant; ``completion_time`` only for a completed instant of layout 2."""

    time: str
    action: Action
    state: State
    completion_time: str | None = None

    def __post_init__(self) -> None:
        if self.completion_time is not None and self.state is not State.COMPLETED:
            raise ValueError(f"a {self.state} instant has no completion time: {self}")

    @property
    def file_name(self) -> str:
        if self.state is State.COMPLETED:
            if self.completion_time is not None:
                return f"{self.time}_{self.completion_time}.{self.action}"
            return f"{self.time}.{self.action}"
        if self.action is Action.COMMIT and self.state is State.INFLIGHT:
            return f"{self.time}.inflight"
        return f"{self.time}.{self.action}.{self.state}"

    @classmethod
    def parse(cls, name: str) -> Instant | None:
        """The instant ``name`` stands for; None when it is not an instant file."""
        m = _NAME.match(name)
        if m is None:
            return None
        completion = m.group("completion")
        if m.group("inflight") is not None:  # <time>.inflight: a commit's
            action, state = Action.COMMIT, State.INFLIGHT
        else:
            action = Action(m.group("action"))
            state = State(m.group("state")) if m.group("state") else State.COMPLETED
        if completion is not None and (state is not State.COMPLETED or len(m.group("time")) != 17):
            return None  # layout 2 names both times in 17 digits, and only when completed
        return cls(m.group("time"), action, state, completion)


def instant_files(time: str, action: Action = Action.COMMIT) -> tuple[str, str, str]:
    """``(requested, inflight, completed)`` file names (layout 1) of instant ``time``."""
    return (
        Instant(time, action, State.REQUESTED).file_name,
        Instant(time, action, State.INFLIGHT).file_name,
        Instant(time, action, State.COMPLETED).file_name,
    )


def requested_name(time: str) -> str:
    """``<time>.commit.requested``."""
    return Instant(time, Action.COMMIT, State.REQUESTED).file_name


def inflight_name(time: str) -> str:
    """``<time>.inflight``."""
    return Instant(time, Action.COMMIT, State.INFLIGHT).file_name


def commit_name(time: str) -> str:
    """``<time>.commit`` (layout 1)."""
    return Instant(time, Action.COMMIT, State.COMPLETED).file_name
