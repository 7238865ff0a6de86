"""Instant times (pipeline/commit/instant.py): strictly increasing when the clock goes
backwards.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pipeline.commit.instant import (
    format_instant_time,
    next_instant_time,
    parse_instant_time,
)


def test_next_instant_time_is_strictly_increasing_when_the_clock_goes_backwards() -> None:
    base = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
    ms = timedelta(milliseconds=1)
    clock = [base, base + 5 * ms, base - timedelta(seconds=1), base + 5 * ms, base, base + 6 * ms]
    clock += [base - timedelta(hours=3), base + timedelta(seconds=1), base + timedelta(seconds=1)]
    times: list[str] = []
    last: str | None = None
    for now in clock:
        last = next_instant_time(last, now)
        assert len(last) == 17 and last.isdigit()
        assert format_instant_time(parse_instant_time(last)) == last
        times.append(last)
    assert times == sorted(set(times))
    assert times[:4] == [
        "20240501120000000",
        "20240501120000005",
        "20240501120000006",
        "20240501120000007",
    ]
    assert times[-2:] == ["20240501120001000", "20240501120001001"]
    assert next_instant_time("20241231235959999", base) == "20250101000000000"
    with pytest.raises(ValueError):
        parse_instant_time("2024")
