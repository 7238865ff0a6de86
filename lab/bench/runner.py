"""``ingest bench``: run the selected sections against one broker and write the report.

Order: produce the data set once → raw ceiling → throughput matrix (which also yields the
exactly-once overhead, commit-phase latencies and CPU per record) → memory sweep → fixed
cost per batch (its own data sets and raw ceilings per record size) → freshness +
recovery → commit-cost growth → report (JSON, console table, PNG charts).
Sections not selected with ``--only`` are absent from ``report.json``; a section that
needs another's runs (overhead, latency, cpu need throughput) pulls it in.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console

from lab.bench.context import Context
from lab.bench.dataset import BenchBroker, produce_dataset
from lab.bench.derived import commit_latency, cpu_per_record, overhead
from lab.bench.memory import memory
from lab.bench.presets import PRESETS, Preset
from lab.bench.raw_ceiling import raw_ceiling
from lab.bench.report import print_summary, write_charts, write_json
from lab.bench.throughput import throughput
from pipeline.errors import PipelineError

SECTIONS = (
    "raw",
    "throughput",
    "overhead",
    "latency",
    "cpu",
    "memory",
    "freshness",
    "recovery",
    "growth",
    "catalogs",
    "fixed",
    "decode",
    "peers",
    "tables",
)
_NEEDS: dict[str, set[str]] = {
    "throughput": {"raw", "throughput"},
    "overhead": {"raw", "throughput"},
    "latency": {"raw", "throughput"},
    "cpu": {"raw", "throughput"},
    "recovery": {"freshness"},
    "freshness": {"freshness"},
    "raw": {"raw"},
    "memory": {"memory"},
    "growth": {"growth"},
    "catalogs": {"catalogs"},
    "fixed": {"fixed"},
    "decode": {"decode"},
    "peers": {"peers"},
    "tables": {"tables"},
}


@dataclass(frozen=True)
class BenchOptions:
    preset: str = "full"
    only: tuple[str, ...] = ()
    records: int | None = None
    out: Path = Path("docs/bench")
    bootstrap: str | None = None
    work: Path | None = None  # scratch space (default: a temporary directory)
    profile: bool = False
    reader: str = "auto"  # the measured pipelines' source.reader (INGEST_SOURCE_READER)
    peer: tuple[str, ...] = ()  # the peers section's systems (empty: all)
    peers_part: tuple[str, ...] = ()  # the peers section's tables (empty: all)


def selected(only: Iterable[str]) -> set[str]:
    names = list(only)
    bad = sorted(set(names) - set(SECTIONS))
    if bad:
        raise PipelineError(f"--only {', '.join(bad)}: allowed: {', '.join(SECTIONS)}")
    if not names:  # the peers section only when asked (--peers, --only peers) or --full,
        # the tables section only when asked (--only tables)
        return {g for s in SECTIONS for g in _NEEDS[s]} - {"peers", "tables"}
    return {g for s in names for g in _NEEDS[s]}


def _version(pkg: str) -> str:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def host_facts() -> dict[str, Any]:
    import confluent_kafka

    from pipeline.spark.session import check_java

    return {
        "hostname": platform.node(),
        "cpu_model": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_bytes": psutil.virtual_memory().total,
        "os": platform.platform(),
        "python": platform.python_version(),
        "java": check_java(),
        "versions": {
            p: _version(p)
            for p in (
                "pyspark",
                "pyiceberg",
                "pyarrow",
                "confluent-kafka",
                "hudi",
                "kafka-lakehouse-ingest",
            )
        }
        | {"librdkafka": confluent_kafka.libversion()[0]},
        "load_average_at_start": list(os.getloadavg()),
        "source_reader": _reader(),
    }


def _reader() -> str:
    """The measured pipelines' ``source.reader`` (their configs leave it ``auto``)."""
    from pipeline.source.choice import reader_name

    return reader_name("auto")


def reproduce_command(opts: BenchOptions) -> str:
    """The ``ingest bench`` command line that reruns what ``opts`` runs: the preset flag
    (``--full``, or ``--quick``, the default) and every option that changes what is
    measured or reported; ``--out`` and ``--work`` only say where things go."""
    flag = {"full": ["--full"], "quick": ["--quick"]}.get(opts.preset, ["--preset", opts.preset])
    args = ["ingest", "bench", *flag]
    if opts.only == ("peers",):
        args.append("--peers")  # what --peer and --peers-part go with
    else:
        for section in opts.only:
            args += ["--only", section]
    if opts.records is not None:
        args += ["--records", str(opts.records)]
    if opts.bootstrap is not None:
        args += ["--bootstrap", opts.bootstrap]
    if opts.profile:
        args.append("--profile")
    if opts.reader != "auto":
        args += ["--reader", opts.reader]
    for option, names in (("--peer", opts.peer), ("--peers-part", opts.peers_part)):
        for name in names:
            args += [option, name]
    return shlex.join(args)


def _postgres_uri() -> str | None:
    from lab.pgcluster import shared_server_uri

    return shared_server_uri()


@dataclass(frozen=True)
class ExtraSection:
    """A section another package provides (``peers``: :mod:`lab.peers`), handed
    in by the CLI so this package does not depend on it: ``run(broker, preset name,
    --records, work dir, say)`` returns its part of the report; ``publish(that part, out
    dir, console)`` draws its charts and prints its tables."""

    run: Callable[[BenchBroker, str, int | None, Path, Callable[[str], None]], dict[str, Any]]
    publish: Callable[[dict[str, Any], Path, Console], None]


def run_bench(
    opts: BenchOptions, console: Console, extra: Mapping[str, ExtraSection] | None = None
) -> dict[str, Any]:
    preset: Preset = PRESETS[opts.preset]
    if opts.records is not None:
        if opts.records < 3:
            raise PipelineError("--records must be at least 3")
        preset = preset.with_records(opts.records)
    groups = selected(opts.only)
    if not opts.only and preset.name == "full":
        groups.add("peers")
    if opts.reader != "auto":  # every pipeline process of the bench inherits it
        os.environ["INGEST_SOURCE_READER"] = opts.reader
    t_start = time.time()
    work = opts.work or Path(tempfile.mkdtemp(prefix="ingest-bench-"))
    work.mkdir(parents=True, exist_ok=True)

    def say(msg: str) -> None:
        console.print(f"[dim]{time.time() - t_start:6.0f}s[/dim] {msg}", highlight=False)

    report: dict[str, Any] = {
        "meta": {
            "generated": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": reproduce_command(opts),
            "preset": preset.name,
            "records": preset.records,
            "host": host_facts(),
        }
    }
    say(
        "starting Apache Kafka (one KRaft node, its own JVM)"
        if opts.bootstrap is None
        else f"external Kafka at {opts.bootstrap}"
    )
    broker = BenchBroker(opts.bootstrap)
    failed = True
    try:
        report["meta"]["broker"] = broker.describe()
        report["meta"]["notes"] = [
            "One Apache Kafka node (KRaft, its own JVM process) runs on the pipeline's host "
            "and shares its cores; the raw ceiling reads from the same broker, so ratios are "
            "fair but absolute figures are below what a separate broker host gives. The "
            "broker's CPU is sampled from its process and reported per run (broker_cpu_*)."
            if broker.cluster is not None
            else "External broker: its CPU is not measured (broker_cpu_* are null).",
            "Producer: zstd-compressed batches; records ~270 B (JSON events of "
            "lab/generator.py), no malformed records; bench topics keep every "
            "record (retention.ms / retention.bytes -1).",
            "Tables unpartitioned; Iceberg on the SQLite catalog unless stated.",
        ]
        needs_data = bool(groups & {"raw", "throughput", "memory"})
        ctx = None
        if needs_data:
            parts = preset.partitions
            say(f"producing {preset.records:,} records into {parts} partitions")
            ds = produce_dataset(broker, preset.records, parts, payload_bytes=preset.payload_bytes)
            report["meta"]["dataset"] = {
                "topic": ds.topic,
                "partitions": ds.partitions,
                "records": ds.records,
                "payload_bytes": ds.payload_bytes,
                "produce_seconds": round(ds.produce_seconds, 2),
            }
            ctx = Context(broker, ds, preset, work, say)
        else:
            from lab.bench.dataset import Dataset

            ctx = Context(broker, Dataset("", 0, 0, 0.0), preset, work, say)
        if "raw" in groups:
            say("raw ceiling: one consumer process → Arrow → zstd Parquet")
            raw = raw_ceiling(ctx)
            say(f"  {raw['records_per_s']:,.0f} records/s, {raw['mb_per_s']} MB/s")
            report["raw_ceiling"] = raw
        if "throughput" in groups:
            report["throughput"] = throughput(ctx)
            report["exactly_once_overhead"] = overhead(ctx)
            report["cpu_per_record"] = cpu_per_record(ctx)
        if "memory" in groups:
            report["memory"] = memory(ctx)
        if "fixed" in groups:
            from lab.bench.fixed import fixed_cost

            report["fixed_cost"] = fixed_cost(ctx)
        if "decode" in groups:
            from lab.bench.decode_cost import decode_cost

            report["decode_cost"] = decode_cost(preset.decode_records, say)
            from lab.bench.avro_cost import avro_cost

            report["decode_cost"]["avro"] = avro_cost(preset.decode_records, work, say)
        for name, section in (extra or {}).items():
            if name in groups:
                report[name] = section.run(broker, preset.name, opts.records, work / name, say)
        if "freshness" in groups:
            from lab.bench.freshness import freshness_and_recovery

            fresh, recovery = freshness_and_recovery(ctx)
            report["freshness"] = fresh
            report["recovery"] = recovery
        if ctx.eo_batches:
            report["commit_latency"] = commit_latency(ctx)
        if "growth" in groups:
            from lab.bench import commits  # pyarrow and the app: only when asked

            report["commit_growth"] = commits.commit_growth(
                ctx, _postgres_uri() if preset.postgres else None
            )
        if "catalogs" in groups:
            from lab.bench.catalogs import catalog_commits

            report["catalogs"] = catalog_commits(ctx)
        if opts.profile and needs_data:
            from lab.bench.profile import profile_hot_path

            report["profile"] = profile_hot_path(ctx, opts.out)
        failed = False
    finally:
        broker.stop()
        if failed:
            console.print(f"bench failed; logs and work files kept under {work}")
        elif opts.work is None:
            shutil.rmtree(work, ignore_errors=True)
    report["meta"]["seconds"] = round(time.time() - t_start, 1)
    report["meta"]["load_average_at_end"] = list(os.getloadavg())
    write_json(report, opts.out)
    write_charts(report, opts.out)
    print_summary(report, console)
    for name, section in (extra or {}).items():
        if name in report:
            section.publish(report[name], opts.out, console)
    console.print(f"report: {opts.out / 'report.json'} (+ charts) in {report['meta']['seconds']}s")
    return report
