"""The instant files of a Hudi table's ``.hoodie`` directory as an indexed listing
(:class:`Timeline`), which :class:`HudiTable <pipeline.formats.hudi.cow_table.HudiTable>`
answers timeline queries from. The instants and their file names:
:mod:`pipeline.formats.hudi.instant`.

Two actions are tracked by state: ``commit`` (ingest; ``completed`` / ``pending``) and
``replacecommit`` (compaction, :mod:`pipeline.formats.hudi.compaction`; ``replaced`` /
``pending_replace``). Everything that reads checkpoints looks at ``commit`` only, so a
compaction never hides or shadows a pipeline's checkpoint."""

from __future__ import annotations

import bisect

from pipeline.formats.hudi.instant import HOUSEKEEPING, Action, Instant, State

__all__ = ["Timeline", "sort_key"]


def sort_key(instant: Instant) -> tuple[str, str, str]:
    """Instants in time order, then by action and state names."""
    return instant.time, instant.action, instant.state


class Timeline:
    """The instant files of ``.hoodie`` as last listed, kept indexed: a new listing is
    applied as the difference to the previous one (a few files per commit), so a query
    costs one directory listing, not a parse and sort of the whole history."""

    def __init__(self) -> None:
        self.names: list[str] = []  # the listing as returned (unchanged dir: same list)
        self._present: set[str] = set()
        self._instants: dict[str, Instant] = {}  # file name -> instant
        self._time_refs: dict[str, int] = {}  # instant time -> its instant files
        self._times: list[str] = []  # distinct instant times, ascending
        # (action, time) -> file states, for the tracked actions
        self._states: dict[tuple[Action, str], set[State]] = {}
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

    def instants(self) -> list[Instant]:
        return sorted(self._instants.values(), key=sort_key)

    def completed_housekeeping(self) -> list[tuple[str, Action]]:
        """``(time, action)`` of the completed ``clean`` / ``rollback`` instants (Hudi's own
        tools' housekeeping)."""
        return [
            (i.time, i.action)
            for i in self._instants.values()
            if i.action in HOUSEKEEPING and i.state is State.COMPLETED
        ]

    def latest(self) -> str | None:
        return self._times[-1] if self._times else None

    def _add(self, name: str) -> None:
        instant = Instant.parse(name)
        if instant is None or instant.completion_time is not None:
            return  # not an instant file of layout 1 (the only layout in a v6 ``.hoodie``)
        self._instants[name] = instant
        t = instant.time
        self._time_refs[t] = self._time_refs.get(t, 0) + 1
        if self._time_refs[t] == 1:
            bisect.insort(self._times, t)
        lists = self._lists(instant.action)
        if lists is not None:
            self._states.setdefault((instant.action, t), set()).add(instant.state)
            if instant.state is State.COMPLETED:
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
            if instant.state is State.COMPLETED:
                del lists[0][bisect.bisect_left(lists[0], t)]
            self._classify(instant.action, t)

    def _lists(self, action: Action) -> tuple[list[str], set[str]] | None:
        """(completed times, pending times) of a tracked action; None: not tracked."""
        if action is Action.COMMIT:
            return self.completed, self.pending
        if action is Action.REPLACE_COMMIT:
            return self.replaced, self.pending_replace
        return None

    def _classify(self, action: Action, t: str) -> None:
        lists = self._lists(action)
        assert lists is not None
        states = self._states.get((action, t))
        if states and State.COMPLETED not in states:
            lists[1].add(t)
        else:
            lists[1].discard(t)
