"""Sections derived from the throughput runs, with no run of their own:

* ``exactly_once_overhead`` — 1 - median(EO) / median(ALO) from interleaved runs, and
  the same overhead attributed from inside the EO runs: the protocol's own steps per batch
  (request, precommit, the extra commit time over ALO) over the median batch time.
* ``commit_latency`` — p50/p99 of the ``precommit`` and ``commit`` phases (batch log).
* ``cpu_per_record`` — CPU seconds per million records, raw consumer and pipeline runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from lab.bench import stats
from lab.bench.context import (
    Context,
)
from lab.bench.context import rounded as _round
from lab.bench.presets import EO


def _median_of(runs: list[dict[str, Any]], get: Callable[[dict[str, Any]], Any]) -> float:
    return stats.median([float(v) for r in runs if (v := get(r)) is not None])


def _attributed(eo: list[dict[str, Any]], alo: list[dict[str, Any]]) -> dict[str, Any]:
    """The exactly-once protocol's own time per batch over the batch time, from the batch
    log of the EO runs: request (dedupe + overlap checks, REQUESTED, begin) + precommit
    (INFLIGHT) + what its commit takes beyond an ALO commit (table checks, COMPLETED).
    Noise-resistant: it does not compare two processes' throughput."""

    def phase(runs: list[dict[str, Any]], name: str) -> float:
        return _median_of(runs, lambda r: r["phase_seconds_median"].get(name))

    request, precommit = phase(eo, "request"), phase(eo, "precommit")
    extra_commit = max(0.0, phase(eo, "commit") - phase(alo, "commit"))
    batch = _median_of(eo, lambda r: r.get("batch_seconds_median"))
    per_batch = request + precommit + extra_commit
    share = per_batch / batch if batch and batch > 0 else math.nan
    return {
        "request_s": _round(request),
        "precommit_s": _round(precommit),
        "extra_commit_s": _round(extra_commit),
        "protocol_s_per_batch": _round(per_batch),
        "batch_s": _round(batch),
        "overhead": _round(share, 4),
    }


def overhead(ctx: Context) -> dict[str, Any]:
    target = 0.05
    out: dict[str, Any] = {"target": target, "by_format": []}
    keys = {(r["format"], r["cores"]) for r in ctx.runs}
    for fmt, cores in sorted(keys):
        runs = [r for r in ctx.runs if (r["format"], r["cores"]) == (fmt, cores)]
        eo_runs = [r for r in runs if r["mode"] == EO]
        alo_runs = [r for r in runs if r["mode"] != EO]
        if not eo_runs or not alo_runs:
            continue
        eo = [r["records_per_s"] for r in eo_runs]
        alo = [r["records_per_s"] for r in alo_runs]
        eo_m, alo_m = stats.median(eo), stats.median(alo)
        ov = 1.0 - eo_m / alo_m
        attributed = _attributed(eo_runs, alo_runs)
        out["by_format"].append(
            {
                "format": fmt,
                "cores": cores,
                "order": "alternating A B B A (EO ALO, ALO EO, …)",
                "eo_records_per_s": eo,
                "alo_records_per_s": alo,
                "eo_median": _round(eo_m, 1),
                "alo_median": _round(alo_m, 1),
                "overhead": _round(ov, 4),
                # run-to-run spread of one mode: how much of `overhead` can be noise
                "eo_spread": _round((max(eo) - min(eo)) / eo_m, 4),
                "alo_spread": _round((max(alo) - min(alo)) / alo_m, 4),
                "attributed": attributed,
                "within_target": ov <= target,
                "attributed_within_target": bool(attributed["overhead"] is not None)
                and attributed["overhead"] <= target,
            }
        )
    return out


def commit_latency(ctx: Context) -> dict[str, Any]:
    out: dict[str, Any] = {
        "source": "pipeline.batches log lines of exactly-once runs "
        "(first batch of each process excluded)"
    }
    for fmt, batches in sorted(ctx.eo_batches.items()):
        row: dict[str, Any] = {"batches": len(batches)}
        for phase in ("precommit", "commit"):
            vals = stats.phase_values(batches, phase)
            row[phase] = {
                "p50_s": _round(stats.percentile(vals, 50)),
                "p99_s": _round(stats.percentile(vals, 99)),
                "max_s": _round(max(vals) if vals else math.nan),
            }
        out[fmt] = row
    return out


def cpu_per_record(ctx: Context) -> dict[str, Any]:
    return {
        "raw_consumer": ctx.raw["cpu_seconds_per_million"] if ctx.raw else None,
        "pipeline": {r["name"]: r["cpu_seconds_per_million"] for r in ctx.runs},
        "note": "CPU seconds (user+system) of the whole driver process tree (driver Python, "
        "JVM, Python workers) per million records, over the steady part of the run; "
        "the Kafka broker's CPU is not included (its own process; reported per run as "
        "broker_cpu_seconds).",
    }
