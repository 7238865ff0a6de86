"""``ingest demo``: Kafka, a generator and both table formats end to end, then verify."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli.common import UsageError, out, setup_logging


def demo(
    lake: Annotated[
        Path,
        typer.Option(
            help="the demo's own directory for tables and checkpoints: a new one, or one an "
            "earlier demo made (it refuses any other)"
        ),
    ] = Path("./demo-lake"),
    events: Annotated[int, typer.Option(help="events to generate", min=1)] = 50_000,
    partitions: Annotated[int, typer.Option(help="Kafka partitions", min=1)] = 8,
    rate: Annotated[float, typer.Option(help="events per second", min=0.001)] = 2_500.0,
    malformed: Annotated[
        float, typer.Option(help="fraction of malformed events", min=0.0, max=1.0)
    ] = 0.01,
    timeout: Annotated[
        float, typer.Option(help="give up after this many seconds", min=1.0)
    ] = 600.0,
    value_format: Annotated[
        str,
        typer.Option(
            "--format",
            help="json, or avro: Avro events in the Confluent wire format, their schema in a "
            "Schema Registry the demo starts (Apicurio, its own JVM)",
        ),
    ] = "json",
    reader: Annotated[
        str,
        typer.Option(
            help="source.reader: auto, python (the pipeline's own Kafka source, PySpark >= 4.2) "
            "or spark (Spark's own Kafka source)"
        ),
    ] = "auto",
    tables: Annotated[
        int,
        typer.Option(
            help="N > 1: N topics (events-1 … events-N) into N Iceberg tables (demo.events_1 "
            "…) through one pipeline (sink.routes by topic), each table checked; no Hudi copy",
            min=1,
        ),
    ] = 1,
) -> None:
    """Apache Kafka (one KRaft node, its own JVM; its log under LAKE/kafka) + event generator
    + pipelines into LAKE (Iceberg, then Hudi), then verify exactly-once."""
    from lab.demo import run_demo

    if value_format not in ("json", "avro"):
        raise UsageError(f"--format must be json or avro (got {value_format!r})")
    if reader not in ("auto", "python", "spark"):
        raise UsageError(f"--reader must be auto, python or spark (got {reader!r})")
    if tables > 1 and value_format != "json":
        raise UsageError("--tables takes JSON events (--format json)")
    setup_logging("demo", screen=logging.WARNING)
    ok = run_demo(
        lake,
        events,
        partitions,
        rate,
        malformed,
        timeout,
        out,
        value_format=value_format,
        reader=reader,
        tables=tables,
    )
    raise typer.Exit(0 if ok else 1)
