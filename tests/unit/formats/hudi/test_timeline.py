"""The indexed Hudi timeline (``pipeline.formats.hudi.timeline.Timeline``) answers exactly what a
full parse of the same ``.hoodie`` listing answers, across random additions and
deletions of instant files (and non-instant entries)."""

from __future__ import annotations

import random

from pipeline.formats.hudi.instant import Action, Instant, State
from pipeline.formats.hudi.timeline import Timeline, sort_key


def _states(instants: list[Instant], action: Action) -> tuple[list[str], list[str]]:
    """(completed times ascending, pending times ascending) of ``action``."""
    of_action = [i for i in instants if i.action == action]
    completed = {i.time for i in of_action if i.state is State.COMPLETED}
    return sorted(completed), sorted({i.time for i in of_action} - completed)


def _full_parse(names: list[str]) -> tuple[list[Instant], list[str], list[str], str | None]:
    instants = sorted((i for i in map(Instant.parse, names) if i is not None), key=sort_key)
    completed, pending = _states(instants, Action.COMMIT)
    latest = max((i.time for i in instants), default=None)
    return instants, completed[::-1], pending, latest


def test_incremental_index_matches_a_full_parse() -> None:
    rng = random.Random(7)
    timeline, present = Timeline(), set[str]()
    for _ in range(2000):
        ts = f"20240101{rng.randrange(24):02d}{rng.randrange(60):02d}00"
        name = rng.choice(
            [
                f"{ts}.commit",
                f"{ts}.inflight",
                f"{ts}.commit.requested",
                f"{ts}.clean",
                f"{ts}.clean.requested",
                f"{ts}.replacecommit",
                f"{ts}.replacecommit.inflight",
                f"{ts}.replacecommit.requested",
                "hoodie.properties",
                "archived",
            ]
        )
        if rng.random() < 0.6:
            present.add(name)
        else:
            present.discard(name)
        listing = list(present)
        rng.shuffle(listing)
        timeline.update(listing)
        instants, completed_desc, pending, latest = _full_parse(listing)
        assert timeline.instants() == instants
        assert timeline.completed[::-1] == completed_desc
        assert sorted(timeline.pending) == pending
        assert timeline.latest() == latest
        assert (timeline.replaced, sorted(timeline.pending_replace)) == _states(
            instants, Action.REPLACE_COMMIT
        )
    assert present  # the walk ended with a non-trivial timeline
