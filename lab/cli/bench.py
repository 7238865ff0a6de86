"""``ingest bench``: the benchmark (docs/bench.md). Without flags the quick preset (a few
minutes); the published report's full preset (about an hour) only with ``--full``."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from pipeline.cli.common import UsageError, out, require_broker, setup_logging


def bench(
    full: Annotated[
        bool,
        typer.Option(
            "--full/--quick",
            help="--full: the published report's preset (~20 min, plus ~35 for the "
            "fixed-cost section); default --quick: the smoke preset (~1-2 min, plus ~3)",
        ),
    ] = False,
    only: Annotated[
        list[str] | None,
        typer.Option(
            help="section (repeatable): raw, throughput, overhead, latency, cpu, "
            "memory, freshness, recovery, growth, catalogs, fixed, decode, peers, tables "
            "(many tables from one pipeline against one table and against Iceberg's Kafka "
            "Connect sink; only when named)"
        ),
    ] = None,
    records: Annotated[
        int | None, typer.Option(help="records in the throughput data set", min=1)
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="report.json and PNG charts; default: a new ./bench-<time> directory "
            "(--full --out docs/bench refreshes the committed report)",
        ),
    ] = None,
    bootstrap: Annotated[
        str | None, typer.Option(help="external Kafka; default: its own one-node Apache Kafka")
    ] = None,
    work: Annotated[Path | None, typer.Option(help="keep run dirs and logs here")] = None,
    profile: Annotated[
        bool, typer.Option(help="also profile the worker hot path (pyinstrument) into --out")
    ] = False,
    preset_name: Annotated[
        str | None,
        typer.Option(
            "--preset",
            help="a named preset instead of --full/--quick: readers (both record sizes, "
            "8 and 32 partitions; run once per --reader); hudi-writers, hudi-writers-1k (the "
            "native and Hudi's own Spark writer at ~270 B and ~1.2 KB, on PySpark 3.5); "
            "fixed-cost (with --only fixed: the fixed cost per batch at ~270 B, 8 / 32 / 128 "
            "partitions, ~15 min); fixed-cost-128 (the same at 128 partitions alone, ~8 min)",
        ),
    ] = None,
    peers: Annotated[
        bool,
        typer.Option(
            "--peers",
            help="only the peers section: this pipeline beside Spark's Kafka source into "
            "Iceberg's and Hudi's streaming sinks, Iceberg's Kafka Connect sink and the raw "
            "consumer, with the correctness table (quick ~20 min; with --full ~1 h)",
        ),
    ] = False,
    reader: Annotated[
        str,
        typer.Option(
            help="source.reader of the measured pipelines: auto, python or spark (Spark's "
            "Kafka source); recorded in the report"
        ),
    ] = "auto",
    peer: Annotated[
        list[str] | None,
        typer.Option(help="with --peers: only this system (repeatable; default: all)"),
    ] = None,
    peers_part: Annotated[
        list[str] | None,
        typer.Option(
            help="with --peers: only this table (repeatable): throughput, freshness, "
            "correctness; merge it into a report with python -m lab.peers.merge"
        ),
    ] = None,
) -> None:
    """Benchmark: raw ceiling, throughput, exactly-once overhead, commit latency and growth,
    recovery, memory, freshness, CPU per record (docs/bench.md)."""
    from lab.bench.presets import PRESETS
    from lab.bench.runner import BenchOptions, run_bench, selected

    if peers:
        if only:
            raise UsageError("--peers is the peers section alone: leave out --only")
        only = ["peers"]
    elif peer or peers_part:
        raise UsageError("--peer and --peers-part narrow the peers section: add --peers")
    from lab.peers.section import bench_section, check_choice

    if peer or peers_part:  # the systems' registry is imported only to check names given
        try:
            check_choice(peer or (), peers_part or ())
        except ValueError as e:
            raise UsageError(str(e)) from None
    selected(only or ())  # an unknown --only section: refused before anything starts
    preset = preset_name or ("full" if full else "quick")
    if preset not in PRESETS:
        raise UsageError(f"--preset {preset!r}: allowed: {', '.join(sorted(PRESETS))}")
    if reader not in ("auto", "python", "spark"):
        raise UsageError(f"--reader {reader!r}: allowed: auto, python, spark")
    if bootstrap is not None:
        require_broker(bootstrap)
    setup_logging("bench", screen=logging.WARNING)
    out.print(
        f"preset {preset}"
        + ("" if full else escape(" (smoke run; --full for the published report's preset)")),
        highlight=False,
    )
    opts = BenchOptions(
        preset=preset,
        only=tuple(only or ()),
        records=records,
        out=out_dir or Path(f"bench-{time.strftime('%Y%m%d-%H%M%S')}"),
        bootstrap=bootstrap,
        work=work.resolve() if work else None,
        profile=profile,
        reader=reader,
        peer=tuple(peer or ()),
        peers_part=tuple(peers_part or ()),
    )
    from lab.peers import tables

    extra = {"peers": bench_section(opts.peer, opts.peers_part), "tables": tables.bench_section()}
    run_bench(opts, out, extra=extra)
