"""``ingest`` command line: run, demo, status, compact, verify, broker, produce, drill, bench.

Operator-facing errors (``PipelineError``, also when Spark wrapped them) print as one
line on stderr with exit status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, NoReturn

import typer
from rich.console import Console

from pipeline.errors import ConfigError, PipelineError, find_pipeline_error

if TYPE_CHECKING:
    from pipeline.config import PipelineConfig
    from pipeline.tools.drill.runner import DrillOptions

app = typer.Typer(
    add_completion=False,
    help="Exactly-once Kafka → Apache Iceberg and Apache Hudi ingestion on PySpark.",
)


def _console(stderr: bool = False) -> Console:
    """Rich output; in a pipe or a CI log (no terminal) wide enough that no table is cut
    to 80 columns."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 250)


err = _console(stderr=True)
out = _console()

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="pipeline YAML file")]
SetOpt = Annotated[
    list[str] | None, typer.Option("--set", help="override a config key: a.b=value (repeatable)")
]


_log_file: Path | None = None  # the run's log file, named in error lines
_verbose = False


def _setup_logging(verbose: bool, log_file: Path | None = None) -> None:
    """Default verbosity: log lines on stdout (the operator's log stream) and, for ``run``,
    in ``log_file`` together with Spark's JVM log and any traceback; stderr is kept for the
    one-line error. ``--verbose``: everything on stderr, at DEBUG."""
    global _log_file, _verbose
    _verbose = verbose
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr if verbose else sys.stdout)]
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file, encoding="utf-8"))
        _log_file = log_file
        if not verbose:
            os.environ["INGEST_LOG_FILE"] = str(log_file)  # Spark's log4j follows (session.py)
    root = logging.getLogger()
    for h in handlers:
        h.setFormatter(fmt)
        root.addHandler(h)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.captureWarnings(True)  # library warnings are log lines, not stderr noise
    for noisy in ("py4j", "pyiceberg", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if not verbose:
        # py4j logs "KeyboardInterrupt while sending command" at ERROR with a traceback
        logging.getLogger("py4j").setLevel(logging.CRITICAL)


def _run_log_file(given: Path | None, pipeline_id: str) -> Path:
    if given is not None:
        return given.resolve()
    env = os.environ.get("INGEST_LOG_FILE")
    if env:
        return Path(env).resolve()
    import tempfile

    return Path(tempfile.gettempdir()) / f"ingest-{pipeline_id}.log"


def _load_config(config: Path | None, set_: list[str] | None) -> PipelineConfig:
    from pipeline.config import load_config

    if config is None:
        raise ConfigError("--config is required: a pipeline YAML file (conf/pipeline.example.yaml)")
    return load_config(config, set_ or [])


class _NoCommand(PipelineError):
    code = "usage"


@app.callback(invoke_without_command=True)
def _root(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:  # bare `ingest`: the help, then a usage error
        out.print(ctx.get_help(), markup=False, highlight=False)
        raise _NoCommand("no command given; see 'ingest --help'")


@app.command()
def run(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="debug logs and Spark's log on stderr")
    ] = False,
    log_file: Annotated[
        Path | None,
        typer.Option(
            help="the run's log (ours, Spark's, traces); default: $INGEST_LOG_FILE, "
            "else <tmp>/ingest-<id>.log"
        ),
    ] = None,
    standby: Annotated[
        bool,
        typer.Option(
            "--standby",
            help="ha.mode standby: start warm, then take over when the active replica's "
            "lease expires",
        ),
    ] = False,
) -> None:
    """Run the pipeline described by --config until stopped (or until an
    available-now/once trigger has drained the source). Log lines go to stdout and the
    log file; stderr gets one line when the run stops on an error (exit 2)."""
    from pipeline.app import Pipeline

    cfg = _load_config(config, [*(set_ or []), *(["ha.mode=standby"] if standby else [])])
    _setup_logging(verbose, _run_log_file(log_file, cfg.id))
    logging.getLogger("pipeline").info("log file: %s", _log_file)

    # SIGTERM (Kubernetes) / SIGINT (Ctrl-C): a graceful stop (docs/deploy.md#stopping).
    # The handler only records the request -- it never raises into a py4j call; the driver
    # loop lets the batch in progress commit (at most run.stopTimeoutSeconds), stops the
    # query between batches, and we print the summary and exit 0. A second signal exits at
    # once (130), like a kill: the next run recovers the batch in progress.
    pipeline: Pipeline | None = None
    signals: list[int] = []

    def on_stop_signal() -> None:
        signals.append(1)
        if len(signals) > 1:
            os.write(2, b"ingest: second stop signal: exiting now (the next run recovers)\n")
            os._exit(130)
        if pipeline is not None:
            pipeline.request_stop()

    _watch_stop_signals(on_stop_signal)
    pipeline = Pipeline(cfg)
    if signals:
        pipeline.request_stop()
    stats = pipeline.run()
    line = (
        f"stopped: {stats.batches} batches committed, {stats.skipped} replays skipped, "
        f"{stats.records} records, {stats.dead_letters} dead letters"
    )
    if stats.stop_cut_short:
        line += (
            f" (cut short: a batch was still running after run.stopTimeoutSeconds="
            f"{cfg.run.stop_timeout_seconds:g}; the next run recovers it)"
        )
    out.print(line, markup=False, highlight=False, soft_wrap=True)
    if stats.stop_cut_short:
        # that batch's thread is still inside the commit: end the process here, as the
        # grace period's SIGKILL would, rather than wait for it
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(0)


def _watch_stop_signals(on_signal: Callable[[], None]) -> None:
    """Call ``on_signal`` once per SIGTERM/SIGINT received, from a watcher thread.

    A Python handler runs only when the main thread is back in the interpreter: while it
    waits inside a py4j call, two signals collapse into one run of the handler (CPython
    keeps one pending flag per signal), so a second Ctrl-C could be lost or come late.
    The wakeup fd gets one byte per signal from the C-level handler, whatever the main
    thread does; the Python-level handlers only keep that C handler installed."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: None)
    wanted = {int(signal.SIGTERM), int(signal.SIGINT)}

    def watch() -> None:
        while True:
            for signum in os.read(read_fd, 64):
                if signum in wanted:
                    on_signal()

    threading.Thread(target=watch, name="ingest-stop-signals", daemon=True).start()


@app.command()
def demo(
    lake: Annotated[
        Path,
        typer.Option(
            help="the demo's own directory for tables and checkpoints: a new one, or one an "
            "earlier demo made (it refuses any other)"
        ),
    ] = Path("./demo-lake"),
    events: Annotated[int, typer.Option(help="events to generate")] = 50_000,
    partitions: Annotated[int, typer.Option(help="Kafka partitions")] = 8,
    rate: Annotated[float, typer.Option(help="events per second")] = 2_500.0,
    malformed: Annotated[float, typer.Option(help="fraction of malformed events")] = 0.01,
    timeout: Annotated[float, typer.Option(help="give up after this many seconds")] = 600.0,
) -> None:
    """Apache Kafka (one KRaft node, its own JVM; its log under LAKE/kafka) + event generator
    + pipelines into LAKE (Iceberg, then Hudi), then verify exactly-once."""
    from pipeline.tools.demo import run_demo

    _setup_logging(False)
    logging.getLogger().setLevel(logging.WARNING)
    ok = run_demo(lake, events, partitions, rate, malformed, timeout, out)
    raise typer.Exit(0 if ok else 1)


@app.command()
def status(config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """Running or stopped (and the last error), the instant journal, the table(s)' last
    batch, and per partition: log start, high watermark, committed offset, lag and the
    records already deleted below the log start."""
    from pipeline.tools.status import print_status
    from pipeline.tools.verify.render import untruncated

    cfg = _load_config(config, set_)
    print_status(cfg, untruncated(out))


@app.command()
def compact(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    orphans: Annotated[
        bool,
        typer.Option(
            "--orphans",
            help="remove data files no commit or pending instant references, older than "
            "--older-than, instead of compacting",
        ),
    ] = False,
    older_than: Annotated[
        str | None,
        typer.Option(help="orphan safety interval, e.g. '2 hours' (maintenance.orphans.olderThan)"),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="--orphans: list what would go, delete nothing")
    ] = False,
    target_file_size: Annotated[
        int | None,
        typer.Option(help="bytes (maintenance.compaction.targetFileSizeBytes)", min=1024),
    ] = None,
    min_input_files: Annotated[
        int | None,
        typer.Option(help="per partition (maintenance.compaction.minInputFiles)", min=2),
    ] = None,
) -> None:
    """Compact the pipeline's tables once: small data files rewritten into target-size ones
    in one replace commit each, the ingest checkpoint unchanged. Safe beside a running
    pipeline. With --orphans: remove unreferenced data files instead."""
    from pipeline.config import seconds_of
    from pipeline.tools.compact import run_compact

    cfg = _load_config(config, set_)
    try:
        older = seconds_of(older_than) if older_than is not None else None
    except ValueError as e:
        raise ConfigError(f"--older-than {older_than!r}: {e}") from None
    run_compact(
        cfg,
        out,
        orphans=orphans,
        older_than_s=older,
        dry_run=dry_run,
        target_file_size_bytes=target_file_size,
        min_input_files=min_input_files,
    )


@app.command()
def verify(
    config: ConfigOpt = None,
    set_: SetOpt = None,
    format_: Annotated[
        str | None,
        typer.Option("--format", help="iceberg | hudi; default: the configured table format"),
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the report here")] = None,
    no_payload: Annotated[
        bool, typer.Option("--no-payload", help="count coordinates only, skip payload checks")
    ] = False,
    window: Annotated[int, typer.Option(help="offsets per partition held in memory")] = 100_000,
    require_full: Annotated[
        bool,
        typer.Option(
            "--require-full",
            help="exit 1 when any committed record could not be checked (e.g. deleted by "
            "retention before verify); default: such records are reported, exit 0",
        ),
    ] = False,
) -> None:
    """Independent exactly-once check of the pipeline's table(s) against Kafka. The
    verdict states its coverage: records checked, unverifiable, and why."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from pipeline.tools.verify import verify_pipeline
    from pipeline.tools.verify.render import print_report, untruncated, write_json

    cfg = _load_config(config, set_)
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
    console = untruncated(out)
    for report in reports:
        print_report(console, report)
    if json_out is not None:
        write_json(json_out, reports)
    partial = [r for r in reports if not r.complete]
    if require_full and partial:
        for r in partial:
            console.print(
                f"--require-full: {r.table_format} {r.table}: {r.coverage_text()}",
                style="bold red",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
    ok = all(r.ok for r in reports) and not (require_full and partial)
    raise typer.Exit(0 if ok else 1)


@app.command()
def broker(
    topic: Annotated[list[str] | None, typer.Option(help="TOPIC[:PARTITIONS], repeatable")] = None,
    brokers: Annotated[int, typer.Option(help="number of Kafka nodes (KRaft)")] = 1,
    data_dir: Annotated[
        Path | None, typer.Option(help="keep the log here (default: a temporary directory)")
    ] = None,
) -> None:
    """Start real Apache Kafka (KRaft, broker+controller per node) on loopback until Ctrl-C.

    N nodes replicate topics min(N, 3) times (min.insync.replicas 2 from 3 nodes on);
    transactions are enabled. The jars come from the project's JVM manifest (fetched once)."""
    from pipeline.tools.broker import KAFKA_VERSION, KafkaCluster, run_broker_forever

    if brokers < 1:
        raise PipelineError(f"--brokers {brokers}: at least 1")
    topics: dict[str, int] = {}
    for spec in topic or ["events:8"]:
        name, _, n = spec.partition(":")
        try:
            topics[name] = int(n) if n else 8
        except ValueError:
            raise PipelineError(f"--topic {spec!r}: expected NAME or NAME:PARTITIONS") from None

    def ready(cluster: KafkaCluster) -> None:
        out.print(
            f"Apache Kafka {KAFKA_VERSION}: {cluster.num_brokers} node(s), "
            f"replication factor {cluster.replication_factor}, data in {cluster.data_dir}"
        )
        out.print(f"bootstrap servers: {cluster.bootstrap_servers}")
        out.print(f"SASL/SCRAM bootstrap servers: {cluster.sasl_bootstrap_servers}")
        out.print(f"topics: {', '.join(f'{t} ({n} partitions)' for t, n in topics.items())}")
        out.print("press Ctrl-C to stop")
        sys.stdout.flush()

    run_broker_forever(brokers, topics, on_ready=ready, data_dir=data_dir)


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
    from pipeline.tools.generator import GeneratorSpec
    from pipeline.tools.generator import produce as do_produce

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
    matrix: Annotated[
        str, typer.Option(help="fast (2 drills, ~2 min) | full (every scenario, ~25 min)")
    ] = "fast",
    format_: Annotated[
        list[str] | None, typer.Option("--format", help="iceberg | hudi | both (repeatable)")
    ] = None,
    kills: Annotated[int, typer.Option(help="SIGKILL restarts per format")] = 20,
    standby_kills: Annotated[
        int | None,
        typer.Option(help="SIGKILLs of the active in the standby drill (default: --kills)"),
    ] = None,
    executor_kills: Annotated[
        int | None,
        typer.Option(help="worker+executor SIGKILLs in the executor-loss drill (default: --kills)"),
    ] = None,
    cluster: Annotated[
        bool,
        typer.Option(
            help="run every drill's pipeline on a Spark standalone cluster (master + 2 "
            "workers started per drill) instead of local[2,4]; executor-loss always does"
        ),
    ] = False,
    storage: Annotated[
        str,
        typer.Option(
            help="local | s3: the tables (and journal) on an S3 server (SeaweedFS) started "
            "per drill; the full matrix runs Hudi's kill and zombie drills on s3 anyway"
        ),
    ] = "local",
    rate: Annotated[float, typer.Option(help="records/s the producer writes")] = 100.0,
    out_dir: Annotated[
        Path, typer.Option("--out", help="report.json, timeline.png, work dirs")
    ] = Path("./drills"),
    bootstrap: Annotated[
        str | None, typer.Option(help="external Kafka; default: 3 Apache Kafka nodes (KRaft)")
    ] = None,
    keep_work: Annotated[bool, typer.Option(help="keep work dirs of passing drills")] = False,
    work: Annotated[
        Path | None, typer.Option(help="drivers' work dirs (default: OUT/work)")
    ] = None,
    soak: Annotated[
        float | None,
        typer.Option(
            metavar="MINUTES",
            help="one soak drill instead: random SIGKILLs of active, standby and solo "
            "drivers and checkpoint deletions for MINUTES (ignores --matrix/--scenario)",
        ),
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="--soak: seed of the random faults (default: random)")
    ] = None,
    files: Annotated[
        float | None,
        typer.Option(
            metavar="MINUTES",
            help="the file-economy run instead: 1,000 records/s, 1 s trigger, MINUTES with "
            "background compaction and MINUTES without; live data files, average size and "
            "ingest verify over time (files-<format>.json / .png)",
        ),
    ] = None,
) -> None:
    """Failover drills: live producer, the pipeline as a process, injected faults, verify."""
    from pipeline.tools.drill.runner import DrillOptions, run_drills, select

    _setup_logging(False)
    logging.getLogger().setLevel(logging.WARNING)
    if soak is not None:
        _soak(soak, format_ or [], seed, rate, out_dir, bootstrap, keep_work, work)
    if files is not None:
        _files(files, format_ or [], out_dir, bootstrap, keep_work, work)
    if matrix not in ("fast", "full"):
        raise PipelineError(f"--matrix {matrix!r}: allowed: fast, full")
    if storage not in ("local", "s3"):
        raise ConfigError(f"--storage {storage!r}: allowed: local, s3")
    specs = select(
        matrix,
        scenario or [],
        format_ or [],
        kills,
        rate,
        standby_kills,
        executor_kills,
        cluster,
        "s3" if storage == "s3" else "local",
    )
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


def _long_run(
    flag: str,
    minutes: float,
    formats: list[str],
    rate: float,
    out_dir: Path,
    bootstrap: str | None,
    keep_work: bool,
    work: Path | None,
) -> tuple[Literal["iceberg", "hudi"], DrillOptions]:
    """The format and ``DrillOptions`` of a one-format run of ``flag`` (``--soak``,
    ``--files``) for ``minutes``."""
    from pipeline.tools.drill.runner import DrillOptions

    if minutes <= 0:
        raise ConfigError(f"{flag} {minutes:g}: minutes must be positive")
    if len(formats) > 1 or formats[:1] not in ([], ["iceberg"], ["hudi"]):
        raise ConfigError(f"{flag} runs on one format: --format iceberg or hudi, not {formats}")
    opts = DrillOptions(
        out=out_dir.resolve(),
        kills=0,
        rate=rate,
        bootstrap=bootstrap,
        keep_work=keep_work,
        work=work.resolve() if work else None,
    )
    return ("hudi" if formats == ["hudi"] else "iceberg"), opts


def _files(
    minutes: float,
    formats: list[str],
    out_dir: Path,
    bootstrap: str | None,
    keep_work: bool,
    work: Path | None,
) -> NoReturn:
    """``ingest drill --files MINUTES``: pipeline/tools/drill/files.py; exit 0 only if ok."""
    from pipeline.tools.drill.files import RATE, run_files

    fmt, opts = _long_run("--files", minutes, formats, RATE, out_dir, bootstrap, keep_work, work)
    report = run_files(minutes, fmt, opts, out)
    raise typer.Exit(0 if report["ok"] else 1)


def _soak(
    minutes: float,
    formats: list[str],
    seed: int | None,
    rate: float,
    out_dir: Path,
    bootstrap: str | None,
    keep_work: bool,
    work: Path | None,
) -> NoReturn:
    """``ingest drill --soak MINUTES``: pipeline/tools/drill/soak.py; exit 0 only if ok."""
    import random

    from pipeline.tools.drill.soak import run_soak

    fmt, opts = _long_run("--soak", minutes, formats, rate, out_dir, bootstrap, keep_work, work)
    seed = random.SystemRandom().randrange(1_000_000) if seed is None else seed
    result, _ = run_soak(minutes, fmt, seed, opts, out)
    raise typer.Exit(0 if result.ok else 1)


@app.command()
def bench(
    quick: Annotated[bool, typer.Option(help="smoke preset; default: full (~60 min)")] = False,
    only: Annotated[
        list[str] | None,
        typer.Option(
            help="section (repeatable): raw, throughput, overhead, latency, cpu, "
            "memory, freshness, recovery, growth, fixed"
        ),
    ] = None,
    records: Annotated[int | None, typer.Option(help="records in the throughput data set")] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="report.json and PNG charts; default: a new ./bench-<time> directory "
            "(--out docs/bench refreshes the committed report)",
        ),
    ] = None,
    bootstrap: Annotated[
        str | None, typer.Option(help="external Kafka; default: its own one-node Apache Kafka")
    ] = None,
    work: Annotated[Path | None, typer.Option(help="keep run dirs and logs here")] = None,
    profile: Annotated[
        bool, typer.Option(help="also profile the worker hot path (pyinstrument) into --out")
    ] = False,
) -> None:
    """Benchmark: raw ceiling, throughput, exactly-once overhead, commit latency and growth,
    recovery, memory, freshness, CPU per record (docs/bench.md)."""
    from pipeline.tools.bench.runner import BenchOptions, run_bench

    _setup_logging(False)
    logging.getLogger().setLevel(logging.WARNING)
    opts = BenchOptions(
        preset="quick" if quick else "full",
        only=tuple(only or ()),
        records=records,
        out=out_dir or _new_bench_dir(),
        bootstrap=bootstrap,
        work=work.resolve() if work else None,
        profile=profile,
    )
    run_bench(opts, out)


def _new_bench_dir() -> Path:
    import time

    return Path(f"bench-{time.strftime('%Y%m%d-%H%M%S')}")


def _fail(line: str, code: int = 2, hint: str | None = None) -> NoReturn:
    """The CLI's one error path: one line on stderr (plus at most a one-line hint)."""
    err.print(f"error: {line}", markup=False, highlight=False, soft_wrap=True)
    if hint:
        err.print(f"hint: {hint}", markup=False, highlight=False, soft_wrap=True)
    sys.exit(code)


def _usage_hint(e: typer.TyperException) -> str:
    ctx = getattr(e, "ctx", None)
    path = ctx.command_path if ctx is not None else "ingest"
    return f"see '{path} --help'"


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    try:
        rc = app(args=argv, standalone_mode=False)
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except typer.TyperException as e:  # typer's bundled click: usage errors, bad option values
        _fail(e.format_message().splitlines()[0], hint=_usage_hint(e))
    except PipelineError as e:
        _fail(str(e))
    except SystemExit:
        raise
    except (KeyboardInterrupt, typer.Abort):
        err.print("interrupted")
        sys.exit(130)
    except Exception as e:
        msg = find_pipeline_error(e, tagged=True)  # Spark wraps ours: show the tagged line
        if msg is not None:
            _fail(msg)
        if _log_file is None or _verbose:
            raise  # a bug, not an operator's error: keep the traceback where it is seen
        logging.getLogger("pipeline").exception("run failed")  # the trace, in the log file
        first = (str(e).strip().splitlines() or [""])[0][:300]
        _fail(f"{type(e).__name__}: {first}", code=1, hint=f"full trace in {_log_file}")


if __name__ == "__main__":
    main()
