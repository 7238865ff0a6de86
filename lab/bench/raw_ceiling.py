"""The ``raw_ceiling`` section: :mod:`lab.bench.raw` as its own process, the single
consumer -> Arrow -> Parquet rate every pipeline run is compared with (docs/bench.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from typing import Any

from lab.bench.context import (
    MB,
    Context,
    cpu_delta,
)
from lab.bench.context import rounded as _round
from lab.bench.driver import (
    ROOT,
    BenchRunError,
)


def raw_ceiling(ctx: Context) -> dict[str, Any]:
    ds = ctx.dataset
    out = ctx.work / "raw" / "raw.parquet"
    out.parent.mkdir(parents=True, exist_ok=True)
    broker_cpu0 = ctx.broker.cpu_seconds()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lab.bench.raw",
            "--bootstrap",
            ctx.broker.bootstrap_servers,
            "--topic",
            ds.topic,
            "--partitions",
            str(ds.partitions),
            "--out",
            str(out),
            *(["--payload"] if ds.payload_bytes else []),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=ctx.preset.timeout_s,
    )
    if proc.returncode != 0:
        raise BenchRunError(f"raw ceiling failed: {' '.join(proc.stderr[-600:].split())}")
    broker_cpu = cpu_delta(broker_cpu0, ctx.broker.cpu_seconds())  # serving this read
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    shutil.rmtree(out.parent, ignore_errors=True)
    rate = r["records"] / r["seconds"]
    ctx.raw = {
        "records": r["records"],
        "produced": ds.records,
        "bytes": r["bytes"],
        "seconds": _round(r["seconds"]),
        "records_per_s": _round(rate, 1),
        "mb_per_s": _round(r["bytes"] / r["seconds"] / MB, 2),
        "cpu_seconds": _round(r["cpu_seconds"], 3),
        "cpu_seconds_per_million": _round(r["cpu_seconds"] / r["records"] * 1e6, 2),
        "peak_rss_bytes": r["peak_rss_bytes"],
        "parquet_bytes": r["parquet_bytes"],
        "bytes_per_record": _round(r["bytes"] / r["records"], 1),
        "cpu_cores_used": _round(r["cpu_seconds"] / r["seconds"], 2),
        "broker_cpu_seconds_per_million": (
            None if broker_cpu is None else _round(broker_cpu / r["records"] * 1e6, 2)
        ),
    }
    return ctx.raw
