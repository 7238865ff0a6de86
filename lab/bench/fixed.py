"""``fixed_cost``: the pipeline's per-batch fixed cost and per-record marginal cost in the
steady state, per record size and partition count, against the raw consumer on the same
data.

Per record size and partition count (the preset's
:class:`~lab.bench.presets.FixedCostPlan`: 8 / 32 / 128 partitions in the full
preset): one zstd data set in the bench's Kafka broker, the raw ceiling over it, then per
batch size one ``ingest run`` (Iceberg, exactly-once, 2 cores, available-now,
``maxRecordsPerTrigger`` = the batch size) from the earliest offset into a fresh table.
The batches that commit within ``warmup_seconds`` of the first commit are skipped (JVM
JIT, cold Python workers); the next ``steady_seconds`` of batches are measured, then the
driver is stopped with SIGTERM (or ends when the topic is drained: ``steady_short`` if
the window fell short). Per measured batch: wall = its commit time - the previous commit
time, CPU = the process tree's CPU over the same span, records. Over all batches of one
record size and partition count, ordinary least squares of CPU and wall per batch against
records per batch: the intercept is the fixed cost per batch, the slope the marginal cost
per million records. Every batch reads every partition, so across partition counts the
intercepts are fitted again against the partition count (``partition_scaling``): the
fixed cost of a batch with no partitions and what each partition adds to it.
"""

from __future__ import annotations

import itertools
import math
import shutil
import time
from dataclasses import replace
from typing import Any

import psutil

from lab.bench import stats
from lab.bench.context import MB, Context, cpu_delta
from lab.bench.context import rounded as _round
from lab.bench.dataset import Dataset, produce_dataset
from lab.bench.driver import (
    BatchLine,
    BenchRunError,
    DriverRun,
    interpolate,
    write_config,
)
from lab.bench.presets import EO
from lab.bench.runs import RunSpec, pipeline_config

#: Acceptance: fixed CPU and wall per batch, marginal CPU against the raw consumer, and
#: records per CPU-second at ~1.2 KB against the Iceberg Kafka Connect sink's 56,500 per
#: vCPU (the anchor).
TARGETS = {
    "intercept_cpu_s": 0.15,
    "intercept_wall_s": 0.3,
    "marginal_ratio": 1.5,
    "records_per_cpu_s_at_1_2kb": 56_500.0,
}
POLL_S = 0.2


def _committed(batches: list[BatchLine]) -> list[BatchLine]:
    return sorted(
        (b for b in batches if b.outcome in ("committed", "recommitted")), key=lambda b: b.ts
    )


def steady_window(
    done: list[BatchLine], warmup_s: float, steady_s: float
) -> tuple[BatchLine, list[BatchLine]] | None:
    """(window start, measured batches) from commit-ordered batches, or None before the
    window holds anything: the start is the first commit ≥ ``warmup_s`` after the first
    one, the window every later batch up to the first whose commit is ≥ ``steady_s`` after
    the start (all of them while shorter)."""
    if not done:
        return None
    start = next((b for b in done if b.ts - done[0].ts >= warmup_s), None)
    if start is None:
        return None
    window: list[BatchLine] = []
    for b in done[done.index(start) + 1 :]:
        window.append(b)
        if b.ts - start.ts >= steady_s:
            break
    return (start, window) if window else None


def measured_window(
    done: list[BatchLine], warmup_s: float, steady_s: float
) -> tuple[BatchLine, list[BatchLine], bool] | None:
    """:func:`steady_window`, or — when the run drained its data set within the warm-up
    (a fast run with large batches) — the batches after the second commit (the first batch
    pays the cold workers); the flag says the warm-up was cut short. None with fewer than
    three batches."""
    found = steady_window(done, warmup_s, steady_s)
    if found is not None:
        return found[0], found[1], False
    if len(done) < 3:
        return None
    return done[1], done[2:], True


def fit(points: list[dict[str, Any]]) -> dict[str, Any]:
    """OLS of CPU and wall seconds per batch against records per batch (per million)."""
    xs = [float(p["records"]) for p in points]
    ic, sc, r2c = stats.linear_fit(xs, [float(p["cpu_s"]) for p in points])
    iw, sw, r2w = stats.linear_fit(xs, [float(p["wall_s"]) for p in points])
    return {
        "points": len(points),
        "batch_sizes": sorted({int(x) for x in xs}),
        "intercept_cpu_s": _round(ic),
        "slope_cpu_s_per_million": _round(sc * 1e6, 3),
        "r2_cpu": _round(r2c),
        "intercept_wall_s": _round(iw),
        "slope_wall_s_per_million": _round(sw * 1e6, 3),
        "r2_wall": _round(r2w),
    }


def _table_records(cfg: dict[str, Any]) -> int | None:
    """Rows in the run's Iceberg table, from its current snapshot's summary."""
    from pipeline.app import Pipeline
    from pipeline.config import parse_config

    table: Any = Pipeline(parse_config(cfg)).tables.commit_tables().main
    loaded = table.table()
    snap = loaded.current_snapshot() if loaded is not None else None
    if snap is None or snap.summary is None:
        return None
    total = snap.summary.additional_properties.get("total-records")
    return int(total) if total is not None else None


def _measure(ctx: Context, ds: Dataset, batch: int, bpr: float) -> dict[str, Any]:
    plan = ctx.preset.fixed
    spec = RunSpec(format="iceberg", mode=EO, cores=2, max_records_per_trigger=batch)
    name = ctx.next_name(f"fixed-{ds.payload_bytes}p-{batch}")
    workdir = ctx.work / name
    cfg = pipeline_config(
        spec,
        name,
        workdir,
        ctx.broker.bootstrap_servers,
        ds.topic,
        payload=ds.payload_bytes > 0,
    )
    path = write_config(workdir / "pipeline.yaml", cfg)
    cpu0 = ctx.broker.cpu_seconds()  # the bench's Kafka node, cumulative (external: None)
    run = DriverRun(name, path, ctx.work / "logs")
    broker_series: list[tuple[float, float]] = [(time.time(), 0.0)]

    def sample_broker() -> None:
        used = cpu_delta(cpu0, ctx.broker.cpu_seconds())
        if used is not None:
            broker_series.append((time.time(), used))

    deadline = time.monotonic() + ctx.preset.timeout_s
    try:
        while run.alive():
            found = steady_window(_committed(list(run.batches)), plan.warmup_seconds, 1e9)
            if found and found[1][-1].ts - found[0].ts >= plan.steady_seconds:
                break
            if time.monotonic() > deadline:
                raise BenchRunError(f"fixed-cost run {name} timed out (log: {run.err_path})")
            time.sleep(POLL_S)
            sample_broker()
        sample_broker()
        stopped = run.alive()
        run.stop()
        result = run.finish()
    except BaseException:
        run.kill()
        run.finish()
        raise
    if not stopped and result.returncode != 0:
        raise BenchRunError(f"fixed-cost run {name} exited {result.returncode}: {run.tail(600)}")
    done = _committed(result.batches)
    measured = measured_window(done, plan.warmup_seconds, plan.steady_seconds)
    if measured is None:
        raise BenchRunError(
            f"fixed-cost run {name}: {len(done)} commits, too few to measure "
            f"(a larger data set is needed; log: {run.err_path})"
        )
    start, window, warmup_short = measured
    points = [
        {
            "run": name,
            "batch_id": b.batch_id,
            "records": b.records,
            "cpu_s": _round(result.cpu_at(b.ts) - result.cpu_at(a.ts), 4),
            "wall_s": _round(b.ts - a.ts, 4),
        }
        for a, b in itertools.pairwise([start, *window])
    ]
    t0, t1 = start.ts, window[-1].ts
    seconds = t1 - t0
    records = sum(b.records for b in window)
    cpu = result.cpu_at(t1) - result.cpu_at(t0)
    table_records = _table_records(cfg)
    shutil.rmtree(workdir, ignore_errors=True)
    per_m = cpu / records * 1e6 if records else math.nan
    t_first = broker_series[0][0]
    broker_cpu = (
        None
        if cpu0 is None
        else interpolate(t_first, broker_series, t1) - interpolate(t_first, broker_series, t0)
    )
    return {
        "name": name,
        "max_records_per_trigger": batch,
        "warmup_seconds": _round(t0 - done[0].ts, 2),
        "first_commit_after_s": _round(done[0].ts - result.started, 2),
        "batches": len(window),
        "records": records,
        "steady_seconds": _round(seconds, 2),
        "steady_short": seconds < plan.steady_seconds,
        "warmup_short": warmup_short,  # drained within the warm-up: measured from batch 2
        "stopped": "SIGTERM" if stopped else "drained",
        "records_per_s": _round(records / seconds, 1),
        "mb_per_s": _round(records * bpr / seconds / MB, 2),
        "cpu_seconds": _round(cpu, 2),
        "cpu_seconds_per_million": _round(per_m, 2),
        "cpu_seconds_per_million_by_role": {
            role: _round(v / records * 1e6, 2) for role, v in result.cpu_by_role(t0, t1).items()
        },
        "records_per_cpu_s": _round(1e6 / per_m, 0),
        "cpu_cores_used": _round(cpu / seconds, 2),
        "broker_cpu_seconds": None if broker_cpu is None else _round(broker_cpu, 2),
        "broker_cpu_per_s": None if broker_cpu is None else _round(broker_cpu / seconds, 3),
        "records_committed_by_log": result.records,
        "records_in_table": table_records,
        "peak_rss_bytes": result.peak_rss_bytes,
        "points": points,
    }


def _one_size(ctx: Context, payload_bytes: int, records: int, parts: int) -> dict[str, Any]:
    """One record size at one partition count: data set, raw ceiling, runs, fit."""
    from lab.bench.raw_ceiling import raw_ceiling  # the section, on this data set

    plan = ctx.preset.fixed
    ctx.say(
        f"fixed cost: producing {records:,} records (payload {payload_bytes} B) "
        f"into {parts} partitions"
    )
    ds = produce_dataset(ctx.broker, records, parts, payload_bytes=payload_bytes)
    try:
        raw = raw_ceiling(replace(ctx, dataset=ds, raw=None))
        bpr = float(raw["bytes_per_record"])
        ctx.say(
            f"  {bpr:,.0f} B/record, {ds.partitions} partitions; raw ceiling "
            f"{raw['records_per_s']:,.0f}/s, {raw['cpu_seconds_per_million']} CPU-s/M"
        )
        runs = []
        for batch in plan.batches:
            ctx.say(f"fixed cost: batches of {batch:,} ({bpr:,.0f} B records, {parts} partitions)")
            r = _measure(ctx, ds, batch, bpr)
            ctx.say(
                f"  {r['batches']} batches in {r['steady_seconds']}s: "
                f"{r['records_per_s']:,.0f}/s, {r['cpu_seconds_per_million']} CPU-s/M"
            )
            runs.append(r)
    finally:
        ctx.broker.delete_topic(ds.topic)
    points = [p for r in runs for p in r.pop("points")]
    f = fit(points)
    raw_per_m = raw["cpu_seconds_per_million"]
    slope = f["slope_cpu_s_per_million"]
    ratio = slope / raw_per_m if slope is not None and raw_per_m else math.nan
    steady = max(runs, key=lambda r: r["max_records_per_trigger"])
    kb12 = bpr >= 1_000
    within: dict[str, bool | None] = {
        "intercept_cpu_s": _le(f["intercept_cpu_s"], TARGETS["intercept_cpu_s"]),
        "intercept_wall_s": _le(f["intercept_wall_s"], TARGETS["intercept_wall_s"]),
        "marginal_ratio": _le(_round(ratio, 3), TARGETS["marginal_ratio"]),
    }
    bound = cpu_bound(raw, steady)
    if kb12:
        within["records_per_cpu_s_at_1_2kb"] = (steady["records_per_cpu_s"] or 0) >= TARGETS[
            "records_per_cpu_s_at_1_2kb"
        ]
    return {
        "payload_bytes": payload_bytes,
        "partitions": ds.partitions,
        "bytes_per_record": _round(bpr, 1),
        "label": f"{_size_label(bpr)}, {ds.partitions} partitions",
        "dataset": {
            "topic": ds.topic,
            "partitions": ds.partitions,
            "records": ds.records,
            "produce_seconds": _round(ds.produce_seconds, 2),
        },
        "raw_ceiling": raw,
        "runs": runs,
        "points": points,
        "fit": f,
        "marginal_ratio": _round(ratio, 3),
        # steady-state efficiency: the largest batches, where the fixed cost is amortized
        "records_per_cpu_s": steady["records_per_cpu_s"],
        "records_per_cpu_s_anchor": TARGETS["records_per_cpu_s_at_1_2kb"] if kb12 else None,
        "steady_ratio_to_raw": _round(steady["records_per_s"] / raw["records_per_s"], 3),
        "cpu_bound": bound,
        "within_target": within,
        "broker_bound": any((r["broker_cpu_per_s"] or 0) >= 0.8 for r in runs),
    }


def _size_label(bytes_per_record: float) -> str:
    return "~1.2 KB" if bytes_per_record >= 1_000 else f"~{bytes_per_record:,.0f} B"


def cpu_bound(raw: dict[str, Any], steady: dict[str, Any]) -> dict[str, Any]:
    """What this host's cores allow if every one of them were busy: the raw consumer and
    the pipeline's steady run, each with the broker CPU it caused (the bench's Kafka node,
    on the same host; an external broker's is unknown and counted as 0), as records/s =
    cores * 10^6 / (CPU-s per million, both included)."""
    cores = psutil.cpu_count() or 1
    raw_total = raw["cpu_seconds_per_million"] + (raw["broker_cpu_seconds_per_million"] or 0)
    broker = (steady["broker_cpu_seconds"] or 0) / steady["records"] * 1e6
    run_total = steady["cpu_seconds_per_million"] + broker
    return {
        "cores": cores,
        "broker_measured": steady["broker_cpu_seconds"] is not None,
        "raw_cpu_s_per_million_with_broker": _round(raw_total, 2),
        "pipeline_cpu_s_per_million_with_broker": _round(run_total, 2),
        "raw_records_per_s_all_cores": _round(cores * 1e6 / raw_total, 0),
        "pipeline_records_per_s_all_cores": _round(cores * 1e6 / run_total, 0),
        # the best throughput ratio to the raw ceiling this host can show
        "max_ratio_to_raw": _round(cores * 1e6 / run_total / raw["records_per_s"], 3),
    }


def _le(value: float | None, limit: float) -> bool | None:
    return None if value is None else value <= limit


def partition_scaling(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """One record size's fits across partition counts: OLS of the fixed cost per batch
    (the fits' intercepts) against the partition count, so ``*_per_partition`` is what
    one more partition adds to every batch and ``*_at_zero`` the rest of the fixed cost."""
    cells = sorted(cells, key=lambda c: c["partitions"])
    parts = [float(c["partitions"]) for c in cells]
    out: dict[str, Any] = {
        "payload_bytes": cells[0]["payload_bytes"],
        "label": _size_label(float(cells[0]["bytes_per_record"])),
        "partitions": [c["partitions"] for c in cells],
    }
    for key, name in (("intercept_cpu_s", "cpu"), ("intercept_wall_s", "wall")):
        values = [c["fit"][key] for c in cells]
        out[key] = values
        pts = [(x, float(y)) for x, y in zip(parts, values, strict=True) if y is not None]
        if len({x for x, _ in pts}) >= 2:
            at_zero, per_part, r2 = stats.linear_fit([x for x, _ in pts], [y for _, y in pts])
        else:
            at_zero = per_part = r2 = math.nan
        out[f"{name}_s_at_zero_partitions"] = _round(at_zero)
        out[f"{name}_s_per_partition"] = _round(per_part, 6)
        out[f"r2_{name}"] = _round(r2)
    out["slope_cpu_s_per_million"] = [c["fit"]["slope_cpu_s_per_million"] for c in cells]
    out["marginal_ratio"] = [c["marginal_ratio"] for c in cells]
    return out


def fixed_cost(ctx: Context) -> dict[str, Any]:
    plan = ctx.preset.fixed
    sizes = [
        _one_size(ctx, pb, n, parts)
        for pb, n in zip(plan.payload_bytes, plan.records, strict=True)
        for parts in plan.partitions
    ]
    return {
        "method": "per record size and partition count: Iceberg exactly-once, 2 cores, "
        "available-now, one run per maxRecordsPerTrigger; batches within warmup_seconds of "
        "the first commit skipped, then steady_seconds of batches; per batch CPU (process "
        "tree) and wall (commit to commit) against records, OLS over all batches of the "
        "size and partition count; partition_scaling: OLS of those intercepts against the "
        "partition count, per record size",
        "warmup_seconds": plan.warmup_seconds,
        "steady_seconds": plan.steady_seconds,
        "batch_sizes": list(plan.batches),
        "partitions": list(plan.partitions),
        "targets": TARGETS,
        "sizes": sizes,
        "partition_scaling": [
            partition_scaling([s for s in sizes if s["payload_bytes"] == pb])
            for pb in plan.payload_bytes
        ],
        "note": "broker_cpu_* is the bench's Kafka node (its own JVM on this host) over the "
        "window, null for an external broker; about 1 core or more means the broker may be "
        "the bound",
    }
