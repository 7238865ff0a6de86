"""``ingest drill``: failover drills (docs/drills.md); ``--soak`` and ``--files`` runs."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, NoReturn

import typer

from pipeline.cli.common import UsageError, out, require_broker, setup_logging

if TYPE_CHECKING:
    from lab.drill.runner import DrillOptions

DEFAULT_KILLS = 20  # the full matrix's SIGKILL restarts per format
FAST_KILLS = 2  # the fast matrix's, unless --kills says otherwise


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
    kills: Annotated[
        int | None,
        typer.Option(
            help=f"SIGKILL restarts per format; default: {FAST_KILLS} with the fast matrix, "
            f"else {DEFAULT_KILLS}",
            min=0,
        ),
    ] = None,
    standby_kills: Annotated[
        int | None,
        typer.Option(help="SIGKILLs of the active in the standby drill (default: --kills)", min=0),
    ] = None,
    executor_kills: Annotated[
        int | None,
        typer.Option(
            help="worker+executor SIGKILLs in the executor-loss drill (default: --kills)", min=0
        ),
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
    catalog: Annotated[
        str,
        typer.Option(
            help="sql | rest: the Iceberg tables' catalog; rest starts Iceberg's REST catalog "
            "server (over PostgreSQL, OAuth2 on, the warehouse on S3) per drill, and "
            "catalog-outage kills it mid-commit"
        ),
    ] = "sql",
    rate: Annotated[float, typer.Option(help="records/s the producer writes", min=0.001)] = 100.0,
    reader: Annotated[
        list[str] | None,
        typer.Option(
            help="source.reader of the drilled pipeline: python | spark (repeatable: each "
            "drill once per reader); default: auto"
        ),
    ] = None,
    hudi_writer: Annotated[
        str,
        typer.Option(
            help="sink.hudi.writer of the Hudi drills: native | spark (Hudi's own writer; "
            "PySpark 3.5)"
        ),
    ] = "native",
    local_cores: Annotated[
        int,
        typer.Option(
            help="cores of the drilled pipeline's local Spark master (local[N,4]); "
            "ignored with --cluster",
            min=1,
        ),
    ] = 2,
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
    from lab.drill.runner import DrillOptions, run_drills, select

    if soak is not None and files is not None:
        raise UsageError("--soak and --files are two different runs: choose one")
    if seed is not None and soak is None:
        raise UsageError("--seed applies to --soak only")
    if matrix not in ("fast", "full"):
        raise UsageError(f"--matrix {matrix!r}: allowed: fast, full")
    if storage not in ("local", "s3"):
        raise UsageError(f"--storage {storage!r}: allowed: local, s3")
    if catalog not in ("sql", "rest"):
        raise UsageError(f"--catalog {catalog!r}: allowed: sql, rest")
    readers = list(dict.fromkeys(reader or ["auto"]))
    bad = [r for r in readers if r not in ("auto", "python", "spark")]
    if bad:
        raise UsageError(f"--reader {bad[0]!r}: allowed: python, spark")
    if hudi_writer not in ("native", "spark"):
        raise UsageError(f"--hudi-writer {hudi_writer!r}: allowed: native, spark")
    long_run = None
    if soak is not None:
        long_run = _long_run("--soak", soak, format_ or [])
    elif files is not None:
        long_run = _long_run("--files", files, format_ or [])
    fast = matrix == "fast" and not scenario
    n_kills = DEFAULT_KILLS if kills is None else kills
    specs = []
    if long_run is None:
        # select() checks the scenario and format names; the fast matrix caps kills at
        # FAST_KILLS there, so an explicit --kills is applied to its drills here
        specs = select(
            matrix,
            scenario or [],
            format_ or [],
            n_kills,
            rate,
            standby_kills,
            executor_kills,
            cluster,
            "s3" if storage == "s3" else "local",
        )
        if fast and kills is not None:
            specs = [dataclasses.replace(s, kills=kills) for s in specs]
        specs = [
            dataclasses.replace(
                s,
                reader=r,
                hudi_writer=hudi_writer,
                local_cores=local_cores,
                catalog="rest" if catalog == "rest" else "sql",
            )
            for s in specs
            for r in readers
        ]
    if bootstrap is not None:
        require_broker(bootstrap)
    setup_logging("drill", screen=logging.WARNING)
    opts = DrillOptions(
        out=out_dir.resolve(),
        kills=0 if long_run else n_kills,
        rate=rate,
        bootstrap=bootstrap,
        keep_work=keep_work,
        work=work.resolve() if work else None,
    )
    if soak is not None and long_run is not None:
        _soak(soak, long_run, seed, opts)
    if files is not None and long_run is not None:
        _files(files, long_run, opts)
    if fast and kills is None:
        out.print(
            f"fast matrix: {FAST_KILLS} SIGKILL restarts per drill (--kills N to change; "
            f"--matrix full: {DEFAULT_KILLS})",
            markup=False,
            highlight=False,
        )
    results = run_drills(specs, opts, out)
    raise typer.Exit(0 if all(r.ok for r in results) else 1)


def _long_run(flag: str, minutes: float, formats: list[str]) -> Literal["iceberg", "hudi"]:
    """The one format of a ``--soak`` / ``--files`` run of ``minutes``."""
    if minutes <= 0:
        raise UsageError(f"{flag} {minutes:g}: minutes must be positive")
    if len(formats) > 1 or formats[:1] not in ([], ["iceberg"], ["hudi"]):
        raise UsageError(f"{flag} runs on one format: --format iceberg or hudi, not {formats}")
    return "hudi" if formats == ["hudi"] else "iceberg"


def _files(minutes: float, fmt: Literal["iceberg", "hudi"], opts: DrillOptions) -> NoReturn:
    """``ingest drill --files MINUTES``: lab/drill/files.py; exit 0 only if ok."""
    from lab.drill.files import RATE, run_files

    report = run_files(minutes, fmt, dataclasses.replace(opts, rate=RATE), out)
    raise typer.Exit(0 if report["ok"] else 1)


def _soak(
    minutes: float, fmt: Literal["iceberg", "hudi"], seed: int | None, opts: DrillOptions
) -> NoReturn:
    """``ingest drill --soak MINUTES``: lab/drill/soak.py; exit 0 only if ok."""
    import random

    from lab.drill.soak import run_soak

    seed = random.SystemRandom().randrange(1_000_000) if seed is None else seed
    result, _ = run_soak(minutes, fmt, seed, opts, out)
    raise typer.Exit(0 if result.ok else 1)
