"""The two benchmark presets: ``quick`` (a smoke run, about a minute on a quiet 2-core
host, plus ~3 min for the fixed-cost section's four driver processes; used by the test)
and ``full`` (the published report, about 20 minutes, plus ~35 for the fixed-cost
section's eighteen driver processes).

The throughput matrix is run in list order; exactly-once / at-least-once runs of the same
format and cores alternate in A B B A order, so load that drifts during the runs hits both
modes alike, and the overhead is taken from the medians.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from lab.bench.runs import RunSpec

EO, ALO = "exactly-once", "at-least-once"


@dataclass(frozen=True)
class FixedCostPlan:
    """The ``fixed_cost`` section: per record size (``payload_bytes`` of the generator: 0 =
    ~270 B events, 940 = ~1.2 KB) and per partition count, one data set of ``records[i]``
    records, read from the earliest offset by one ``ingest run`` per batch size; the first
    ``warmup_seconds`` after the first commit are skipped, then ``steady_seconds`` of
    batches are measured. Every batch reads every partition, so the fixed cost of a batch
    is measured at each partition count and its growth per partition fitted across them."""

    payload_bytes: tuple[int, ...]
    records: tuple[int, ...]  # per record size: enough for the fastest run's whole window
    batches: tuple[int, ...]  # maxRecordsPerTrigger, one run each
    partitions: tuple[int, ...]  # topic partitions, one data set each
    warmup_seconds: float
    steady_seconds: float


@dataclass(frozen=True)
class Preset:
    name: str
    records: int
    partitions: int  # of the throughput / memory data set and the freshness topic
    batch: int  # maxRecordsPerTrigger of the throughput runs
    matrix: tuple[RunSpec, ...]
    memory_batches: tuple[int, ...]  # dedicated batch-size sweep (empty: throughput runs)
    freshness_rate: float  # records/s, below capacity
    freshness_seconds: float
    commits: int
    early_window: tuple[int, int]
    late_window: tuple[int, int]
    postgres: bool  # also time Iceberg commits on PostgreSQL when one answers
    fixed: FixedCostPlan
    timeout_s: float = 900.0  # per pipeline process
    payload_bytes: int = 0  # of the throughput data set: 0 = ~270 B events, 940 = ~1.2 KB
    decode_records: int = 20_000  # per data set of the decode section (in-process)

    def with_records(self, records: int) -> Preset:
        return replace(self, records=records, batch=max(1, min(self.batch, records // 3)))


def _pair(fmt: str, cores: int, times: int) -> tuple[RunSpec, ...]:
    """``times`` EO/ALO pairs in A B B A order (EO ALO, ALO EO, EO ALO, ...)."""
    order = [(EO, ALO) if i % 2 == 0 else (ALO, EO) for i in range(times)]
    return tuple(RunSpec(format=fmt, mode=mode, cores=cores) for pair in order for mode in pair)


QUICK = Preset(
    name="quick",
    records=30_000,
    partitions=8,
    batch=10_000,
    matrix=_pair("iceberg", 2, 1),
    memory_batches=(),
    freshness_rate=500.0,
    freshness_seconds=5.0,
    commits=100,
    early_window=(1, 10),
    late_window=(91, 100),
    postgres=False,
    # one record size (~1.2 KB), two partition counts and two batch sizes: the fits, the
    # growth per partition, the raw ratio and the anchor comparison end to end in ~3 min;
    # the full preset adds ~270 B, 128 partitions and a third batch size
    fixed=FixedCostPlan(
        payload_bytes=(940,),
        records=(100_000,),
        batches=(500, 5_000),
        partitions=(8, 32),
        warmup_seconds=2.0,
        steady_seconds=5.0,
    ),
    timeout_s=300.0,
)

FULL = Preset(
    name="full",
    records=600_000,
    partitions=8,
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
    # realistic partition counts 8 / 32 / 128, each its own data set; the records hold
    # 20 s warm-up + 60 s of the 2k and 20k batches (measured 2026-11-24: ~7k and ~40k
    # records/s at ~270 B); the 200k-record runs (~70k/s) may drain a data set early and
    # report the shorter window (steady_short)
    fixed=FixedCostPlan(
        payload_bytes=(0, 940),
        records=(4_000_000, 1_600_000),
        batches=(2_000, 20_000, 200_000),
        partitions=(8, 32, 128),
        warmup_seconds=20.0,
        steady_seconds=60.0,
    ),
    decode_records=100_000,
)

# The two source readers side by side (``ingest bench --preset readers --reader R``, once
# per reader): whole runs and steady state at both record sizes (~270 B and ~1.2 KB),
# 8 and 32 partitions, in ~10 minutes a reader.
READERS = Preset(
    name="readers",
    records=300_000,
    partitions=8,
    batch=50_000,
    matrix=(RunSpec(format="iceberg", mode=EO, cores=2),) * 2,
    memory_batches=(),
    freshness_rate=2_000.0,
    freshness_seconds=15.0,
    commits=100,
    early_window=(1, 10),
    late_window=(91, 100),
    postgres=False,
    fixed=FixedCostPlan(
        payload_bytes=(0, 940),
        records=(600_000, 300_000),
        batches=(5_000, 50_000),
        partitions=(8, 32),
        warmup_seconds=5.0,
        steady_seconds=20.0,
    ),
    timeout_s=600.0,
)

# The two Hudi writers side by side (``ingest bench --preset hudi-writers --only throughput
# --reader spark``, on PySpark 3.5, where Hudi's Spark bundle runs): whole runs of the same
# data into a Hudi table -- native, Hudi's writer with insert, with bulk insert -- in
# A B C C B A order, ten batches a run.
_WRITERS = (("native", "insert"), ("spark", "insert"), ("spark", "bulk_insert"))
HUDI_WRITERS = replace(
    READERS,
    name="hudi-writers",
    records=200_000,
    batch=20_000,
    matrix=tuple(
        RunSpec(format="hudi", mode=EO, cores=2, hudi_writer=w, hudi_operation=op)
        for w, op in (*_WRITERS, *reversed(_WRITERS))
    ),
)

# ... and at ~1.2 KB (the generator's events with a 940-byte payload)
HUDI_WRITERS_1K = replace(
    HUDI_WRITERS, name="hudi-writers-1k", records=100_000, batch=10_000, payload_bytes=940
)

# The fixed cost at ~270 B alone (``ingest bench --preset fixed-cost --only fixed``): the
# full preset's partition counts and batch sizes, shorter windows (a re-measure in ~15 min)
FIXED_COST = replace(
    FULL,
    name="fixed-cost",
    fixed=FixedCostPlan(
        payload_bytes=(0,),
        records=(4_000_000,),
        batches=(2_000, 20_000, 200_000),
        partitions=(8, 32, 128),
        warmup_seconds=10.0,
        steady_seconds=30.0,
    ),
)

# ... and at 128 partitions alone, where a reader's per-partition cost shows (~8 min): the
# steady windows fit in 2M records
FIXED_COST_128 = replace(
    FIXED_COST,
    name="fixed-cost-128",
    fixed=replace(FIXED_COST.fixed, records=(2_000_000,), partitions=(128,)),
)

PRESETS = {
    p.name: p
    for p in (QUICK, FULL, READERS, HUDI_WRITERS, HUDI_WRITERS_1K, FIXED_COST, FIXED_COST_128)
}
