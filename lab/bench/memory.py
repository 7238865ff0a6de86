"""The ``memory`` section: peak RSS of the driver process tree against
``maxRecordsPerTrigger`` (the preset's batch sizes; the throughput runs on the quick
preset), and whether it stays bounded as batches grow."""

from __future__ import annotations

import math
from typing import Any

from lab.bench.context import (
    Context,
)
from lab.bench.context import rounded as _round
from lab.bench.driver import (
    BenchRunError,
)
from lab.bench.presets import EO
from lab.bench.runs import RunSpec
from lab.bench.throughput import run_pipeline


def memory(ctx: Context) -> dict[str, Any]:
    points: list[dict[str, Any]] = []
    ds = ctx.dataset
    for batch in ctx.preset.memory_batches:
        take = min(ds.records, max(5 * batch, 200_000))
        per_part = -(-take // ds.partitions)
        ends = ctx.broker.watermarks(ds.topic, ds.partitions)
        starting = {ds.topic: {str(p): max(0, hi - per_part) for p, (_, hi) in ends.items()}}
        expected = sum(hi - max(0, hi - per_part) for _, hi in ends.values())
        spec = RunSpec(
            format="iceberg",
            mode=EO,
            cores=2,
            max_records_per_trigger=batch,
            starting_offsets=starting,
        )
        ctx.say(f"memory: iceberg, batches of {batch:,} records over {expected:,}")
        name, result = run_pipeline(ctx, spec)
        if result.records != expected:
            raise BenchRunError(f"memory run {name}: {result.records} of {expected} records")
        points.append(
            {
                "name": name,
                "max_records_per_trigger": batch,
                "records": expected,
                "peak_rss_bytes": result.peak_rss_bytes,
                "peak_rss_by_role": result.peak_rss_by_role,
            }
        )
    if not points:  # quick preset: the throughput runs are the points
        points = [
            {
                "name": r["name"],
                "max_records_per_trigger": r["max_records_per_trigger"],
                "records": r["records"],
                "peak_rss_bytes": r["peak_rss_bytes"],
                "peak_rss_by_role": r["peak_rss_by_role"],
            }
            for r in ctx.runs
        ]
    sizes = sorted({p["max_records_per_trigger"] for p in points})
    out: dict[str, Any] = {"points": points}
    if len(sizes) >= 2:
        lo = [p for p in points if p["max_records_per_trigger"] == sizes[0]]
        hi = [p for p in points if p["max_records_per_trigger"] == sizes[-1]]
        rss_ratio = max(p["peak_rss_bytes"] for p in hi) / max(p["peak_rss_bytes"] for p in lo)
        slope = math.log(rss_ratio) / math.log(sizes[-1] / sizes[0])
        out.update(
            {
                "batch_ratio": sizes[-1] / sizes[0],
                "rss_ratio": _round(rss_ratio, 3),
                "log_log_slope": _round(slope, 3),
                "bounded": slope < 0.5,
            }
        )
    else:
        out.update({"bounded": None, "note": "one batch size only (quick preset)"})
    return out
