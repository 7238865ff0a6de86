"""The two benchmark presets: ``quick`` (a smoke run, about a minute on a quiet 2-core
host; used by the test) and ``full`` (the published report, about 12 minutes).

The throughput matrix is run in list order; exactly-once / at-least-once runs of the same
format and cores alternate in A B B A order, so load that drifts during the runs hits both
modes alike, and the overhead is taken from the medians.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipeline.tools.bench.runs import RunSpec

EO, ALO = "exactly-once", "at-least-once"


@dataclass(frozen=True)
class Preset:
    name: str
    records: int
    batch: int  # maxRecordsPerTrigger of the throughput runs
    matrix: tuple[RunSpec, ...]
    memory_batches: tuple[int, ...]  # dedicated batch-size sweep (empty: throughput runs)
    freshness_rate: float  # records/s, below capacity
    freshness_seconds: float
    commits: int
    early_window: tuple[int, int]
    late_window: tuple[int, int]
    postgres: bool  # also time Iceberg commits on PostgreSQL when one answers
    timeout_s: float = 900.0  # per pipeline process

    def with_records(self, records: int) -> Preset:
        return replace(self, records=records, batch=max(1, min(self.batch, records // 3)))


def _pair(fmt: str, cores: int, times: int) -> tuple[RunSpec, ...]:
    """``times`` EO/ALO pairs in A B B A order (EO ALO, ALO EO, EO ALO, ...)."""
    order = [(EO, ALO) if i % 2 == 0 else (ALO, EO) for i in range(times)]
    return tuple(RunSpec(format=fmt, mode=mode, cores=cores) for pair in order for mode in pair)


QUICK = Preset(
    name="quick",
    records=30_000,
    batch=10_000,
    matrix=_pair("iceberg", 2, 1),
    memory_batches=(),
    freshness_rate=500.0,
    freshness_seconds=5.0,
    commits=100,
    early_window=(1, 10),
    late_window=(91, 100),
    postgres=False,
    timeout_s=300.0,
)

FULL = Preset(
    name="full",
    records=600_000,  # 12 partitions of 50k: inside the mock's 5 MB per partition
    batch=100_000,  # 6 batches: 5 after the first (steady state) per run
    matrix=(
        *_pair("iceberg", 2, 3),
        *_pair("hudi", 2, 3),
        RunSpec(format="iceberg", mode=EO, cores=1),
        RunSpec(format="hudi", mode=EO, cores=1),
    ),
    memory_batches=(20_000, 100_000, 400_000),
    freshness_rate=5_000.0,
    freshness_seconds=60.0,
    commits=1_010,
    early_window=(1, 20),
    late_window=(990, 1_010),
    postgres=True,
)

PRESETS = {p.name: p for p in (QUICK, FULL)}
