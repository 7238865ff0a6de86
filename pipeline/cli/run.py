"""``ingest run``: the pipeline until stopped, with a graceful stop on SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pipeline.cli.common import (
    ConfigOpt,
    SetOpt,
    app,
    default_log_file,
    load_config,
    out,
    require_pipeline_broker,
    setup_logging,
)

if TYPE_CHECKING:
    from pipeline.app import Pipeline
    from pipeline.config import PipelineConfig


def run_log_file(given: Path | None, cfg: PipelineConfig) -> Path:
    """``--log-file``, else ``$INGEST_LOG_FILE``, else one file per process:
    ``<tmp>/ingest-<id>[-<ha.mode>]-<start time>-<pid>.log`` (an active and a standby of
    one pipeline on one host must not append to one file)."""
    if given is not None:
        return given.resolve()
    env = os.environ.get("INGEST_LOG_FILE")
    if env:
        return Path(env).resolve()
    role = "" if cfg.ha.mode == "off" else f"-{cfg.ha.mode}"
    return default_log_file(f"{cfg.id}{role}")


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
            "else <tmp>/ingest-<id>[-<ha.mode>]-<start time>-<pid>.log"
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
    from pipeline.app import check_locally, run_following_registry

    cfg = load_config(config, [*(set_ or []), *(["ha.mode=standby"] if standby else [])])
    path = setup_logging("run", verbose=verbose, log_file=run_log_file(log_file, cfg))
    if not verbose:
        os.environ["INGEST_LOG_FILE"] = str(path)  # Spark's log4j follows (spark/session.py)
    logging.getLogger("pipeline").info("log file: %s", path)
    # Opening the tables creates the warehouse: bad columns and paths, then an unreachable
    # broker, are refused first.
    check_locally(cfg)
    require_pipeline_broker(cfg)

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

    def started(p: Pipeline) -> None:
        nonlocal pipeline
        pipeline = p
        if signals:
            p.request_stop()

    _watch_stop_signals(on_stop_signal)
    # started again when the registry subject gets a new version (registry formats)
    stats = run_following_registry(cfg, started=started)
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
