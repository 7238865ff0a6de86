"""``ingest`` command line: run, demo, status, broker, produce.

Operator-facing errors (``PipelineError``, also when Spark wrapped them) print as one
line on stderr with exit status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from pipeline.errors import PipelineError, find_pipeline_error

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Exactly-once Kafka → Iceberg ingestion on PySpark.",
)
err = Console(stderr=True)
out = Console()

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="pipeline YAML file")]
SetOpt = Annotated[
    list[str] | None, typer.Option("--set", help="override a config key: a.b=value (repeatable)")
]


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("py4j", "pyiceberg", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@app.command()
def run(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
) -> None:
    """Run the pipeline described by --config until stopped (or until an
    available-now/once trigger has drained the source)."""
    from pipeline.app import Pipeline
    from pipeline.config import load_config

    _setup_logging(verbose)
    cfg = load_config(config, set_ or [])

    def on_sigterm(signum: int, frame: object) -> None:
        # Kubernetes stops pods with SIGTERM: stop the query between batches' steps; a batch
        # cut short is finished or rolled back by the next run's recovery.
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    pipeline = Pipeline(cfg)
    stats = pipeline.run()
    out.print(
        f"stopped: {stats.batches} batches committed, {stats.skipped} replays skipped, "
        f"{stats.records} records, {stats.dead_letters} dead letters"
    )


@app.command()
def demo(
    lake: Annotated[Path, typer.Option(help="where tables and checkpoints go")] = Path("./lake"),
    events: Annotated[int, typer.Option(help="events to generate")] = 50_000,
    partitions: Annotated[int, typer.Option(help="Kafka partitions")] = 8,
    rate: Annotated[float, typer.Option(help="events per second")] = 2_500.0,
    malformed: Annotated[float, typer.Option(help="fraction of malformed events")] = 0.01,
    timeout: Annotated[float, typer.Option(help="give up after this many seconds")] = 600.0,
) -> None:
    """Embedded broker + event generator + pipeline into LAKE, then verify exactly-once."""
    from pipeline.ops.demo import run_demo

    _setup_logging(False)
    logging.getLogger().setLevel(logging.WARNING)
    ok = run_demo(lake, events, partitions, rate, malformed, timeout, out)
    raise typer.Exit(0 if ok else 1)


@app.command()
def status(config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """Committed offsets, snapshots and lag per partition of a pipeline's table."""
    from pipeline.config import load_config
    from pipeline.ops.status import print_status

    cfg = load_config(config, set_ or [])
    print_status(cfg, out)


@app.command()
def verify(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    format_: Annotated[
        str | None, typer.Option("--format", help="iceberg | hudi; default: sink.format")
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the report here")] = None,
    no_payload: Annotated[
        bool, typer.Option("--no-payload", help="count coordinates only, skip payload checks")
    ] = False,
    window: Annotated[int, typer.Option(help="offsets per partition held in memory")] = 100_000,
) -> None:
    """Independent exactly-once check of the pipeline's table(s) against Kafka."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from pipeline.config import load_config
    from pipeline.ops.verify import verify_pipeline
    from pipeline.ops.verify.render import print_report, write_json

    cfg = load_config(config, set_ or [])
    if format_ not in (None, "iceberg", "hudi"):
        raise PipelineError(f"--format {format_!r}: allowed: iceberg, hudi")
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TextColumn("{task.completed:,.0f} offsets checked"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as progress:
        task = progress.add_task("verifying", total=None)

        def on_progress(label: str, checked: int) -> None:
            progress.update(task, description=label, completed=checked)

        reports = verify_pipeline(
            cfg,
            format_,  # type: ignore[arg-type]
            payload=not no_payload,
            window=window,
            on_progress=on_progress,
        )
    for report in reports:
        print_report(out, report)
    if json_out is not None:
        write_json(json_out, reports)
    raise typer.Exit(0 if all(r.ok for r in reports) else 1)


@app.command()
def broker(
    topic: Annotated[list[str] | None, typer.Option(help="TOPIC[:PARTITIONS], repeatable")] = None,
    brokers: Annotated[int, typer.Option(help="number of mock brokers")] = 1,
) -> None:
    """Start the embedded Kafka broker (librdkafka mock cluster) until Ctrl-C."""
    from pipeline.kafka.mock import run_broker_forever

    topics: dict[str, int] = {}
    for spec in topic or ["events:8"]:
        name, _, n = spec.partition(":")
        try:
            topics[name] = int(n) if n else 8
        except ValueError:
            raise PipelineError(f"--topic {spec!r}: expected NAME or NAME:PARTITIONS") from None

    def ready(bootstrap: str) -> None:
        out.print(f"bootstrap servers: {bootstrap}")
        out.print(f"topics: {', '.join(f'{t} ({n} partitions)' for t, n in topics.items())}")
        out.print("press Ctrl-C to stop")
        sys.stdout.flush()

    run_broker_forever(brokers, topics, on_ready=ready)


@app.command()
def produce(
    bootstrap: Annotated[str, typer.Option(help="bootstrap servers")],
    topic: Annotated[str, typer.Option()] = "events",
    count: Annotated[int, typer.Option()] = 10_000,
    rate: Annotated[
        float | None, typer.Option(help="events/s; default: as fast as possible")
    ] = None,
    keys: Annotated[int, typer.Option(help="distinct keys (users)")] = 1_000,
    partitions: Annotated[int | None, typer.Option(help="round-robin over 0..N-1")] = None,
    malformed: Annotated[float, typer.Option(help="fraction of malformed records")] = 0.0,
    seed: Annotated[int, typer.Option()] = 42,
) -> None:
    """Produce generated JSON events (idempotent producer)."""
    from pipeline.kafka.generator import GeneratorSpec
    from pipeline.kafka.generator import produce as do_produce

    spec = GeneratorSpec(
        count=count, rate=rate, key_cardinality=keys, malformed_fraction=malformed, seed=seed
    )
    result = do_produce(bootstrap, topic, spec, partitions=partitions)
    out.print(f"produced {result.produced} events ({result.malformed} malformed) to {topic}")


@app.command()
def drill(
    scenario: Annotated[
        list[str] | None, typer.Option(help="scenario to run (repeatable); default: the matrix")
    ] = None,
    matrix: Annotated[str, typer.Option(help="fast | full")] = "full",
    format_: Annotated[
        list[str] | None, typer.Option("--format", help="iceberg | hudi | both (repeatable)")
    ] = None,
    kills: Annotated[int, typer.Option(help="SIGKILL restarts per format")] = 20,
    rate: Annotated[float, typer.Option(help="records/s the producer writes")] = 100.0,
    out_dir: Annotated[
        Path, typer.Option("--out", help="report.json, timeline.png, work dirs")
    ] = Path("./drills"),
    bootstrap: Annotated[
        str | None, typer.Option(help="external Kafka; default: embedded 3-broker cluster")
    ] = None,
    keep_work: Annotated[bool, typer.Option(help="keep work dirs of passing drills")] = False,
    work: Annotated[
        Path | None, typer.Option(help="drivers' work dirs (default: OUT/work)")
    ] = None,
) -> None:
    """Failover drills: live producer, the pipeline as a process, injected faults, verify."""
    from pipeline.ops.drill.runner import DrillOptions, run_drills, select

    _setup_logging(False)
    logging.getLogger().setLevel(logging.WARNING)
    if matrix not in ("fast", "full"):
        raise PipelineError(f"--matrix {matrix!r}: allowed: fast, full")
    specs = select(matrix, scenario or [], format_ or [], kills, rate)
    opts = DrillOptions(
        out=out_dir.resolve(),
        kills=kills,
        rate=rate,
        bootstrap=bootstrap,
        keep_work=keep_work,
        work=work.resolve() if work else None,
    )
    results = run_drills(specs, opts, out)
    raise typer.Exit(0 if all(r.ok for r in results) else 1)


@app.command()
def bench(
    quick: Annotated[
        bool, typer.Option(help="smoke preset (~1 min); default: full (~12 min)")
    ] = False,
    only: Annotated[
        list[str] | None,
        typer.Option(
            help="section (repeatable): raw, throughput, overhead, latency, cpu, "
            "memory, freshness, recovery, growth"
        ),
    ] = None,
    records: Annotated[int | None, typer.Option(help="records in the throughput data set")] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="report.json and PNG charts")] = Path(
        "docs/bench"
    ),
    bootstrap: Annotated[
        str | None, typer.Option(help="external Kafka; default: embedded broker")
    ] = None,
    work: Annotated[Path | None, typer.Option(help="keep run dirs and logs here")] = None,
    profile: Annotated[
        bool, typer.Option(help="also profile the worker hot path (pyinstrument) into --out")
    ] = False,
) -> None:
    """Benchmark: raw ceiling, throughput, exactly-once overhead, commit latency and growth,
    recovery, memory, freshness, CPU per record (docs/bench.md)."""
    from pipeline.ops.bench.runner import BenchOptions, run_bench

    _setup_logging(False)
    logging.getLogger().setLevel(logging.WARNING)
    opts = BenchOptions(
        preset="quick" if quick else "full",
        only=tuple(only or ()),
        records=records,
        out=out_dir,
        bootstrap=bootstrap,
        work=work.resolve() if work else None,
        profile=profile,
    )
    run_bench(opts, out)


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    try:
        rc = app(args=argv, standalone_mode=False)
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except PipelineError as e:
        err.print(f"error: {e.message}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except Exception as e:  # Spark wraps our errors: show the tagged line only
        import click

        if isinstance(e, click.exceptions.ClickException):
            e.show()
            sys.exit(e.exit_code)
        if isinstance(e, click.exceptions.Abort):
            sys.exit(1)
        msg = find_pipeline_error(e)
        if msg is not None:
            err.print(f"error: {msg}", markup=False, highlight=False, soft_wrap=True)
            sys.exit(2)
        raise


if __name__ == "__main__":
    main()
