"""The instant files of a Hudi table's ``.hoodie`` directory: :class:`HudiInstant`, file
name parsing, and the indexed listing :class:`HudiTable <pipeline.formats.hudi.cow_table.HudiTable>`
answers timeline queries from.

Two actions are tracked by state: ``commit`` (ingest; ``completed`` / ``pending``) and
``replacecommit`` (compaction, :mod:`pipeline.formats.hudi.compaction`; ``replaced`` /
``pending_replace``). Everything that reads checkpoints looks at ``commit`` only, so a
compaction never hides or shadows a pipeline's checkpoint."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from pipeline.formats.hudi.layout import HOUSEKEEPING_ACTIONS, INSTANT_FILE

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
        # (action, time) -> file states, for the tracked actions
        self._states: dict[tuple[str, str], set[str]] = {}
        self.completed: list[str] = []  # completed commit times, ascending
        self.pending: set[str] = set()  # commit times without a completed file
        self.replaced: list[str] = []  # completed replacecommit times, ascending
        self.pending_replace: set[str] = set()  # replacecommit times without a completed file

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

    def completed_housekeeping(self) -> list[tuple[str, str]]:
        """``(time, action)`` of the completed ``clean`` / ``rollback`` instants (Hudi's own
        tools' housekeeping)."""
        return [
            (i.time, i.action)
            for i in self._instants.values()
            if i.action in HOUSEKEEPING_ACTIONS and i.state == "completed"
        ]

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
        lists = self._lists(instant.action)
        if lists is not None:
            self._states.setdefault((instant.action, t), set()).add(instant.state)
            if instant.state == "completed":
                bisect.insort(lists[0], t)
            self._classify(instant.action, t)

    def _remove(self, name: str) -> None:
        instant = self._instants.pop(name, None)
        if instant is None:
            return
        t = instant.time
        self._time_refs[t] -= 1
        if not self._time_refs[t]:
            del self._time_refs[t]
            del self._times[bisect.bisect_left(self._times, t)]
        lists = self._lists(instant.action)
        if lists is not None:
            states = self._states[(instant.action, t)]
            states.discard(instant.state)
            if not states:
                del self._states[(instant.action, t)]
            if instant.state == "completed":
                del lists[0][bisect.bisect_left(lists[0], t)]
            self._classify(instant.action, t)

    def _lists(self, action: str) -> tuple[list[str], set[str]] | None:
        """(completed times, pending times) of a tracked action; None: not tracked."""
        if action == "commit":
            return self.completed, self.pending
        if action == "replacecommit":
            return self.replaced, self.pending_replace
        return None

    def _classify(self, action: str, t: str) -> None:
        lists = self._lists(action)
        assert lists is not None
        states = self._states.get((action, t))
        if states and "completed" not in states:
            lists[1].add(t)
        else:
            lists[1].discard(t)
