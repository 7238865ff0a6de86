"""What every benchmark section shares: the run context and number rounding."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.bench.dataset import BenchBroker, Dataset
from lab.bench.presets import Preset

MB = 1_000_000
WARMUP_COMMITS = 3
WINDOW_COMMITS = 3  # at least this many commits inside the freshness window


@dataclass
class Context:
    broker: BenchBroker
    dataset: Dataset
    preset: Preset
    work: Path
    say: Callable[[str], None]
    raw: dict[str, Any] | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)  # summaries of pipeline runs
    eo_batches: dict[str, list[Any]] = field(default_factory=dict)  # format -> BatchLines
    seq: int = 0

    def next_name(self, label: str) -> str:
        self.seq += 1
        return f"{self.seq:02d}-{label}"


def cpu_delta(before: float | None, after: float | None) -> float | None:
    """``after - before`` of two :meth:`BenchBroker.cpu_seconds` readings (None: the
    broker's CPU is not measurable, an external cluster)."""
    return None if before is None or after is None else after - before


def rounded(x: float, digits: int = 4) -> float | None:
    return None if x is None or math.isnan(x) or math.isinf(x) else round(x, digits)
