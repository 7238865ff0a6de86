#!/usr/bin/env python3
"""Where a pipeline's start-up goes, phase by phase, on each source reader.

    python scripts/startup-breakdown.py [--reader python --reader spark] [--records 200000]
        [--partitions 8] [--batch 50000] [--class-archive on|off|both]
        [--worker-daemon pyspark|preload|both] [--out docs/bench/startup.json]

Starts the bench's one-node Apache Kafka, produces the bench's JSON events, then for each
reader launches a fresh process that runs the pipeline (Iceberg, exactly-once, local[2],
available-now, ``--batch`` records per trigger) and marks, from its own launch:

    imports      Python imports of the pipeline and its libraries, the config parsed
    tables       Pipeline(cfg): table format, tables and journal opened (no Spark yet)
    spark        the Spark session (JVM launch, session, the reader's jars)
    query        the query started (epoch, recovery, Spark's query start)
    first plan   the first batch handed to foreachBatch (Spark's first planning)
    batch N      each committed batch, with its phases as the coordinator logs them

with the CPU-seconds of the process tree (the JVM included) at each mark, also by role
(driver, JVM, Python workers), and peak RSS.
Single runs on a shared host: read them as +-20 %.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent


def _tree_cpu_by_role(proc: psutil.Process) -> dict[str, float]:
    """CPU-seconds of the tree by role: this driver process, the JVM, the Python workers
    (the JVM's reaped children, the daemons and their workers, live or reaped)."""
    roles = {"driver": 0.0, "jvm": 0.0, "workers": 0.0}
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            own, reaped = t.user + t.system, t.children_user + t.children_system
            if p.pid == proc.pid:
                roles["driver"] += own + reaped  # reaped: e.g. its `java -version` check
            elif "java" in p.name():
                roles["jvm"] += own
                roles["workers"] += reaped
            else:
                roles["workers"] += own + reaped
    return {k: round(v, 3) for k, v in roles.items()}


def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


def child(config_path: str, batches: int) -> int:
    """The measured process: runs the pipeline, prints one JSON document of marks."""
    launched = psutil.Process().create_time()
    me = psutil.Process()
    marks: list[dict[str, Any]] = []
    peak = [0]

    def mark(what: str, **extra: Any) -> None:
        peak[0] = max(peak[0], _tree_rss(me))
        roles = _tree_cpu_by_role(me)
        marks.append({"phase": what, "t": round(time.time() - launched, 3),
                      "cpu": round(sum(roles.values()), 3), "roles": roles,
                      **extra})  # fmt: skip

    from pipeline.app import Pipeline
    from pipeline.config import load_config
    from pipeline.observe.base import OutcomeCallback

    cfg = load_config(config_path)
    mark("imports")
    p = Pipeline(cfg)
    mark("tables")
    _ = p.spark
    mark("spark")
    original = p.process_batch
    seen: list[int] = []

    def process_batch(df: Any, batch_id: int) -> None:
        if not seen:
            mark("first plan")
        seen.append(batch_id)
        original(df, batch_id)

    p.process_batch = process_batch  # type: ignore[method-assign]
    start = p.start

    def started() -> Any:
        q = start()
        mark("query")
        return q

    p.start = started  # type: ignore[method-assign]

    def committed(o: Any) -> None:
        timings = {k: round(v, 3) for k, v in o.timings.items()}
        mark(f"batch {o.batch_id}", outcome=str(o.outcome), records=o.records, timings=timings)

    p.add_observer(OutcomeCallback(committed))
    done = lambda stats: sum(m["phase"].startswith("batch") for m in marks) >= batches  # noqa: E731
    p.run(until=done, timeout_s=600)
    print(json.dumps({"marks": marks, "peak_rss_gib": round(peak[0] / 2**30, 2)}))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reader", action="append", choices=("python", "spark"))
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--batch", type=int, default=50_000)
    ap.add_argument(
        "--class-archive",
        choices=("on", "off", "both"),
        default="both",
        help="spark.classArchive of the runs (both: each reader twice, off first)",
    )
    ap.add_argument(
        "--worker-daemon",
        choices=("pyspark", "preload", "both"),
        default="preload",
        help="spark.python.daemon.module of the runs: PySpark's own daemon, or "
        "pipeline.spark.worker_daemon (the task path imported before workers fork); "
        "both: each run twice, PySpark's first",
    )
    ap.add_argument(
        "--jit",
        default="c1",
        choices=("tiered", "c1", "both"),
        help="spark.driverJit of the runs: c1 (-XX:TieredStopAtLevel=1, the pipeline's "
        "default) or tiered (C1 then C2, the JVM's own); both: each run twice, tiered first",
    )
    ap.add_argument(
        "--jfr", type=Path, help="a directory: each run's driver JVM records a JFR profile there"
    )
    ap.add_argument("--out", type=Path)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.child:
        return child(ns.child[0], int(ns.child[1]))

    import yaml

    from lab.bench.dataset import BenchBroker, produce_dataset
    from lab.bench.runs import RunSpec, pipeline_config

    readers = ns.reader or ["python", "spark"]
    broker = BenchBroker()
    report: dict[str, Any] = {"records": ns.records, "partitions": ns.partitions,
                              "batch": ns.batch, "runs": {}}  # fmt: skip
    try:
        ds = produce_dataset(broker, ns.records, ns.partitions)
        archives = ["off", "on"] if ns.class_archive == "both" else [ns.class_archive]
        daemons = ["pyspark", "preload"] if ns.worker_daemon == "both" else [ns.worker_daemon]
        jits = ["tiered", "c1"] if ns.jit == "both" else [ns.jit]
        runs = [(r, a, d, j) for r in readers for a in archives for d in daemons for j in jits]
        for reader, archive, daemon, jit in runs:
            label = f"{reader} (class archive {archive}, worker daemon {daemon}, JIT {jit})"
            work = Path(tempfile.mkdtemp(prefix=f"startup-{reader}-"))
            spec = RunSpec(max_records_per_trigger=ns.batch)
            doc = pipeline_config(spec, reader, work, broker.bootstrap_servers, ds.topic)
            doc["source"]["reader"] = reader
            doc["metrics"] = {"enabled": False}
            doc["spark"]["classArchive"] = archive == "on"
            doc["spark"]["driverJit"] = jit
            doc["spark"]["conf"]["spark.python.daemon.module"] = (
                "pipeline.spark.worker_daemon" if daemon == "preload" else "pyspark.daemon"
            )
            # with the session's own log4j option, which a given one replaces
            log4j = ROOT / "pipeline" / "resources" / "log4j2.properties"
            java = [f"-Dlog4j2.configurationFile=file:{log4j}"]
            if ns.jfr:
                ns.jfr.mkdir(parents=True, exist_ok=True)
                name = f"{reader}-{archive}-{daemon}-{jit}.jfr"
                java.append(
                    f"-XX:StartFlightRecording=filename={ns.jfr.resolve() / name},"
                    "settings=profile,dumponexit=true"
                )
            if len(java) > 1:
                doc["spark"]["conf"]["spark.driver.extraJavaOptions"] = " ".join(java)
            path = work / "pipeline.yaml"
            path.write_text(yaml.safe_dump(doc))
            batches = -(-ns.records // ns.batch)
            r = subprocess.run(
                [sys.executable, __file__, "--child", str(path), str(batches)],
                capture_output=True, text=True, cwd=ROOT, timeout=900,
                env={**os.environ, "INGEST_LOG_LEVEL": "WARNING"},
            )  # fmt: skip
            if r.returncode != 0:
                print(r.stderr[-3000:], file=sys.stderr)
                return 1
            run = json.loads(r.stdout.strip().splitlines()[-1])
            report["runs"][label] = run
            print(f"== {label}, peak RSS {run['peak_rss_gib']} GiB")
            prev_t = prev_cpu = 0.0
            prev_roles: dict[str, float] = {}
            for m in run["marks"]:
                added = {k: round(v - prev_roles.get(k, 0.0), 2) for k, v in m["roles"].items()}
                print(f"  {m['phase']:<12} at {m['t']:7.2f} s (+{m['t'] - prev_t:5.2f} s), "
                      f"CPU {m['cpu']:6.2f} s (+{m['cpu'] - prev_cpu:5.2f} {added})"
                      + (f"  {m.get('timings')}" if m.get("timings") else ""))  # fmt: skip
                prev_t, prev_cpu, prev_roles = m["t"], m["cpu"], m["roles"]
    finally:
        broker.stop()
    if ns.out:
        ns.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
