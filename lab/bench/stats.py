"""Pure arithmetic over measurements: percentiles, window medians, steady throughput.

No I/O, no clocks: everything takes plain numbers or parsed batch lines, so each rule is
unit-testable and the report's numbers can be recomputed from ``report.json``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from lab.bench.driver import BatchLine


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile ``q`` in [0, 100] (numpy's default); NaN when empty."""
    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def window_median(values: Sequence[float], first: int, last: int) -> float:
    """Median of ``values[first-1 : last]``: items numbered from 1, both ends included."""
    return median(values[max(first - 1, 0) : last])


def steady_throughput(batches: Sequence[BatchLine]) -> tuple[float, int, float]:
    """(records/s, records counted, seconds) over the committed batches after the first.

    Each batch line is logged when its commit finished; with back-to-back batches
    (available-now, or a backlog) the span from the first batch's commit to the last one's
    covers exactly the batches after the first, whose Python workers are warm.
    """
    done = sorted(
        (b for b in batches if b.outcome in ("committed", "recommitted")), key=lambda b: b.ts
    )
    if len(done) < 2:
        raise ValueError("steady throughput needs at least two committed batches")
    records = sum(b.records for b in done[1:])
    seconds = done[-1].ts - done[0].ts
    if seconds <= 0:
        raise ValueError("batch commit times do not advance")
    return records / seconds, records, seconds


def phase_values(batches: Sequence[BatchLine], phase: str) -> list[float]:
    return [
        b.phases[phase]
        for b in batches
        if b.outcome in ("committed", "recommitted") and phase in b.phases
    ]


def growth_ratio(early: float, late: float) -> float:
    return late / early if early > 0 else math.inf


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    """Ordinary least squares ``y = intercept + slope * x``: (intercept, slope, r²).

    NaN throughout with fewer than two distinct ``x``; r² is NaN when ``y`` is constant.
    """
    n = len(xs)
    if n != len(ys):
        raise ValueError("xs and ys differ in length")
    if n < 2:
        return math.nan, math.nan, math.nan
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return math.nan, math.nan, math.nan
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = my - slope * mx
    syy = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    r2 = 1.0 - ss_res / syy if syy > 0 else math.nan
    return intercept, slope, r2
