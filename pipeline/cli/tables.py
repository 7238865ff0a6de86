"""Commands on a pipeline's tables: ``status``, ``compact``, ``verify``.

Each reads tables the pipeline made: a local table location that does not exist is
refused before the catalog is opened (the default SQLite catalog would create it), and
option conflicts are refused before the config is even loaded.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli.common import (
    ConfigOpt,
    SetOpt,
    UsageError,
    app,
    err,
    load_config,
    out,
    require_tables,
    setup_logging,
)
from pipeline.errors import ConfigError


@app.command()
def status(config: ConfigOpt = None, set_: SetOpt = None) -> None:
    """Running or stopped (and the last error), the instant journal, the table(s)' last
    batch, and per partition: log start, high watermark, committed offset, lag and the
    records already deleted below the log start."""
    from pipeline.ops.status import print_status
    from pipeline.ops.verify.render import untruncated

    cfg = load_config(config, set_)
    require_tables(cfg, "show")
    setup_logging(f"{cfg.id}-status", screen=logging.WARNING)
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
        typer.Option(
            help="--orphans: safety interval, e.g. '2 hours' (maintenance.orphans.olderThan)"
        ),
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
    from pipeline.ops.compact import run_compact

    if not orphans:
        given = [flag for flag, v in (("--dry-run", dry_run), ("--older-than", older_than)) if v]
        if given:
            raise UsageError(f"{' and '.join(given)} apply to --orphans only")
    elif target_file_size is not None or min_input_files is not None:
        raise UsageError(
            "--target-file-size and --min-input-files apply to compaction, not to --orphans"
        )
    try:
        older = seconds_of(older_than) if older_than is not None else None
    except ValueError as e:
        raise ConfigError(f"--older-than {older_than!r}: {e}") from None
    cfg = load_config(config, set_)
    require_tables(cfg, "compact")
    setup_logging(f"{cfg.id}-compact", screen=logging.WARNING)  # each rewrite: the log file
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
    window: Annotated[
        int, typer.Option(help="offsets per partition held in memory", min=1)
    ] = 100_000,
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

    from pipeline.ops.verify import verify_pipeline
    from pipeline.ops.verify.render import print_report, untruncated, write_json

    if format_ not in (None, "iceberg", "hudi"):
        raise UsageError(f"--format {format_!r}: allowed: iceberg, hudi")
    cfg = load_config(config, set_)
    require_tables(cfg, "verify")
    setup_logging(f"{cfg.id}-verify", screen=logging.WARNING)
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
