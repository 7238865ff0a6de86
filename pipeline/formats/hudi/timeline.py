"""The instant files of a Hudi table's ``.hoodie`` directory: :class:`HudiInstant`, file
name parsing, and the indexed listing :class:`HudiTable <pipeline.formats.hudi.table.HudiTable>`
answers timeline queries from."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from pipeline.formats.hudi.layout import (
    INSTANT_FILE,
)

__all__ = ["HudiInstant"]


@dataclass(frozen=True, order=True)
class HudiInstant:
    time: str
    action: str
    state: str  # requested | inflight | completed


def _parse_instant(name: str) -> HudiInstant | None:
    """The instant a ``.hoodie`` file name stands for (None: not an instant file)."""
    m = INSTANT_FILE.match(name)
    if m is None:
        return None
    action, state = m.group("action"), m.group("state")
    if action == "inflight" and state is None:  # <ts>.inflight of a commit
        action, state = "commit", "inflight"
    return HudiInstant(m.group("ts"), action, state or "completed")


class _Timeline:
    """The instant files of ``.hoodie`` as last listed, kept indexed: a new listing is
    applied as the difference to the previous one (a few files per commit), so a query
    costs one directory listing, not a parse and sort of the whole history."""

    def __init__(self) -> None:
        self.names: list[str] = []  # the listing as returned (unchanged dir: same list)
        self._present: set[str] = set()
        self._instants: dict[str, HudiInstant] = {}  # file name -> instant
        self._time_refs: dict[str, int] = {}  # instant time -> its instant files
        self._times: list[str] = []  # distinct instant times, ascending
        self._commit_states: dict[str, set[str]] = {}  # commit time -> file states
        self.completed: list[str] = []  # completed commit times, ascending
        self.pending: set[str] = set()  # commit times without a completed file

    def update(self, names: list[str]) -> None:
        if names == self.names:
            return
        now = set(names)
        for name in self._present - now:
            self._remove(name)
        for name in now - self._present:
            self._add(name)
        self._present, self.names = now, names

    def instants(self) -> list[HudiInstant]:
        return sorted(self._instants.values(), key=lambda i: (i.time, i.action, i.state))

    def latest(self) -> str | None:
        return self._times[-1] if self._times else None

    def _add(self, name: str) -> None:
        instant = _parse_instant(name)
        if instant is None:
            return
        self._instants[name] = instant
        t = instant.time
        self._time_refs[t] = self._time_refs.get(t, 0) + 1
        if self._time_refs[t] == 1:
            bisect.insort(self._times, t)
        if instant.action == "commit":
            self._commit_states.setdefault(t, set()).add(instant.state)
            if instant.state == "completed":
                bisect.insort(self.completed, t)
            self._classify(t)

    def _remove(self, name: str) -> None:
        instant = self._instants.pop(name, None)
        if instant is None:
            return
        t = instant.time
        self._time_refs[t] -= 1
        if not self._time_refs[t]:
            del self._time_refs[t]
            del self._times[bisect.bisect_left(self._times, t)]
        if instant.action == "commit":
            states = self._commit_states[t]
            states.discard(instant.state)
            if not states:
                del self._commit_states[t]
            if instant.state == "completed":
                del self.completed[bisect.bisect_left(self.completed, t)]
            self._classify(t)

    def _classify(self, t: str) -> None:
        states = self._commit_states.get(t)
        if states and "completed" not in states:
            self.pending.add(t)
        else:
            self.pending.discard(t)
