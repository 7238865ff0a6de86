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
