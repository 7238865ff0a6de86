"""Duration values of the configuration (``'500 ms'``, ``'5 minutes'``): parsed without
the configuration models, so the source's planner process (a new Python process at every
query start) imports no pydantic for them."""

from __future__ import annotations

import re
from typing import Any

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|seconds?|minutes?|min)")
_MS_PER_UNIT = {"mil": 1, "sec": 1_000, "min": 60_000}


def normalize_duration(key: str, v: str) -> str:
    """``'500 ms'`` -> ``'500 milliseconds'``: the spelling Spark's interval parser reads.

    Accepts a number (fractions allowed) and ms / milliseconds / s / seconds / min /
    minutes; raises ``ValueError`` naming ``key`` otherwise.
    """
    m = _DURATION.fullmatch(v.strip())
    if not m:
        raise ValueError(f"{key} must look like '10 seconds', '500 ms' or '1 minute'")
    # Spark's interval parser knows only the long unit names ("500 ms" fails there).
    unit = {"ms": "milliseconds", "s": "seconds", "min": "minutes"}.get(m[2], m[2])
    if "." in m[1]:  # nor fractions of a unit: say it in whole milliseconds
        return f"{round(float(m[1]) * _MS_PER_UNIT[unit[:3]])} milliseconds"
    return f"{m[1]} {unit}"


def spark_duration_seconds(key: str, v: str) -> float:
    """Seconds of a duration written as ``normalize_duration`` accepts it."""
    return seconds_of(normalize_duration(key, v))


_SECONDS = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")
_SECONDS_PER_UNIT = {
    **dict.fromkeys(("ms", "millisecond", "milliseconds"), 0.001),
    **dict.fromkeys(("", "s", "second", "seconds"), 1.0),
    **dict.fromkeys(("min", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hour", "hours"), 3600.0),
}


def seconds_of(v: Any) -> float:
    """Seconds of ``300``, ``"300"``, ``"500 ms"``, ``"5 minutes"`` or ``"1 hour"``."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        return float(v)
    m = _SECONDS.fullmatch(str(v).strip())
    if not m or m[2] not in _SECONDS_PER_UNIT:
        raise ValueError(
            "must be seconds or look like '500 ms', '30 seconds', '5 minutes', '1 hour'"
        )
    return float(m[1]) * _SECONDS_PER_UNIT[m[2]]
