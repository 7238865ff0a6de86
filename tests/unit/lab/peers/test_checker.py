"""The peers bench's one checker and its verdicts: pure functions over Arrow tables."""

from __future__ import annotations

import pyarrow as pa

from lab.peers.checker import Tally, tally
from lab.peers.faults import FaultResult, _outcome


def _rows(triples: list[tuple[str, int, int]]) -> pa.Table:
    topics, parts, offs = zip(*triples, strict=True) if triples else ((), (), ())
    return pa.table(
        {
            "topic": pa.array(topics, pa.string()),
            "partition": pa.array(parts, pa.int32()),
            "offset": pa.array(offs, pa.int64()),
        }
    )


def test_every_offset_once_is_exactly_once() -> None:
    rows = _rows([("t", 0, o) for o in range(5)] + [("t", 1, o) for o in range(2, 4)])
    t = tally(rows, "t", {0: (0, 5), 1: (2, 4)})
    assert t == Tally(expected=7, present=7, missing=0, duplicated=0, unexpected=0)
    assert t.exactly_once


def test_missing_duplicated_and_unexpected_are_counted_apart() -> None:
    rows = _rows(
        [
            *[("t", 0, 0)] * 3,  # offset 0 three times
            ("t", 0, 2),  # offset 1 missing
            ("t", 0, 9),  # beyond the high watermark
            ("other", 0, 1),  # another topic
        ]
    )
    t = tally(rows, "t", {0: (0, 3)})
    assert (t.expected, t.present, t.missing, t.duplicated, t.unexpected) == (3, 2, 1, 2, 2)
    assert not t.exactly_once


def test_an_empty_table_misses_everything() -> None:
    assert tally(_rows([]), "t", {0: (0, 4)}).missing == 4


def test_verdicts_name_what_the_system_did() -> None:
    def verdict(missing: int, dup: int, ended: str, lost_to_retention: int = 0) -> str:
        r = FaultResult("f", "s", lost_to_retention=lost_to_retention)
        r.tally = Tally(10, 10 - missing, missing, dup, 0)
        return _outcome(r, ended)

    assert verdict(0, 0, "") == "exactly once"
    assert verdict(0, 3, "") == "duplicated 3"
    assert verdict(2, 0, "") == "lost 2"
    assert verdict(4, 0, "exited 2", lost_to_retention=2) == "stopped with an error; 2 not ingested"
    assert verdict(2, 0, "", lost_to_retention=2) == "skipped 2 deleted records silently"
    assert verdict(3, 0, "timed out after 180 s").startswith("did not catch up")
