"""What every ``ingest`` command shares: the Typer app, the consoles, the ``--config`` /
``--set`` options, the log file, and the checks that refuse a command before it opens
anything (a missing table, an unreachable broker)."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlparse

import typer
from rich.console import Console

from pipeline.errors import ConfigError, PipelineError

if TYPE_CHECKING:
    from pipeline.config import PipelineConfig

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


class UsageError(PipelineError):
    """Options that contradict each other, or a command without what it needs."""

    code = "usage"


def load_config(config: Path | None, set_: list[str] | None) -> PipelineConfig:
    from pipeline.config import load_config as load

    if config is None:
        raise ConfigError("--config is required: a pipeline YAML file (conf/pipeline.example.yaml)")
    return load(config, set_ or [])


# -- the log file ------------------------------------------------------------------------------

_STARTED = time.strftime("%Y%m%d-%H%M%S")


class _LazyFileHandler(logging.FileHandler):
    """A log file created (with its directory) by its first line, so that a command
    refused before it logs anything leaves no file behind."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, encoding="utf-8", delay=True)

    def _open(self):  # type: ignore[no-untyped-def]
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()


class _Logging:
    path: Path | None = None  # this process's log file, named in the error line
    verbose = False
    handlers: list[logging.Handler] = []


# tracebacks of failed commands: the log file only (stderr keeps its one line)
trace_log = logging.getLogger("ingest.trace")
trace_log.propagate = False


def default_log_file(name: str) -> Path:
    """``<tmp>/ingest-<name>-<start time>-<pid>.log``: one file per process, so an active
    and a standby of one pipeline (or two commands at once) never share one."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
    return Path(tempfile.gettempdir()) / f"ingest-{safe}-{_STARTED}-{os.getpid()}.log"


def setup_logging(
    name: str, *, verbose: bool = False, log_file: Path | None = None, screen: int = logging.INFO
) -> Path:
    """Log lines at ``screen`` level and above on stdout (``--verbose``: everything on
    stderr, at DEBUG), and all of them, with any traceback, in the log file: ``log_file``,
    else :func:`default_log_file` of ``name``. Returns the log file's path."""
    path = (log_file or default_log_file(name)).resolve()
    close_logging()  # a second call (tests) replaces the first's handlers
    root = logging.getLogger()
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    stream = logging.StreamHandler(sys.stderr if verbose else sys.stdout)
    stream.setLevel(logging.DEBUG if verbose else screen)
    file = _LazyFileHandler(path)
    for h in (stream, file):
        h.setFormatter(fmt)
        root.addHandler(h)
    trace_log.addHandler(file)
    if verbose:
        trace_log.addHandler(stream)
    _Logging.handlers = [stream, file]
    _Logging.path, _Logging.verbose = path, verbose
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.captureWarnings(True)  # library warnings are log lines, not stderr noise
    for noisy in ("py4j", "pyiceberg", "urllib3", "botocore", "boto3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if not verbose:
        # py4j logs "KeyboardInterrupt while sending command" at ERROR with a traceback
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
    return path


def close_logging() -> None:
    """Remove and close the handlers :func:`setup_logging` added."""
    root = logging.getLogger()
    for h in _Logging.handlers:
        root.removeHandler(h)
        trace_log.removeHandler(h)
        h.close()
    _Logging.handlers = []
    _Logging.path = None


def logging_started() -> bool:
    return _Logging.path is not None


def log_file() -> Path:
    """This process's log file (set up with a default name if no command did yet)."""
    if _Logging.path is None:
        setup_logging("ingest")
    assert _Logging.path is not None
    return _Logging.path


# -- refusals before anything is opened ----------------------------------------------------


def _local_path(location: str) -> str | None:
    """The local file-system path of ``location``; None for a remote URI."""
    if "://" not in location and not location.startswith("file:"):
        return os.path.abspath(os.path.expanduser(location))
    parsed = urlparse(location)
    return parsed.path if parsed.scheme == "file" and parsed.netloc in ("", "localhost") else None


def require_tables(cfg: PipelineConfig, command: str) -> None:
    """``status`` / ``compact`` / ``verify`` read existing tables: a local table location
    that does not exist means the pipeline never ran here. Refused before the catalog is
    opened (opening the default SQLite catalog would create the warehouse)."""
    from pipeline.formats.registry import table_format

    for key, location in table_format(cfg).writable_paths(cfg):
        path = _local_path(location)
        if "deadLetter" in key or path is None or os.path.exists(path):
            continue
        raise PipelineError(
            f"{key} {location!r} does not exist: pipeline {cfg.id!r} has no tables here yet "
            f"(nothing to {command})"
        )


def require_broker(bootstrap: str, timeout_s: float = 10.0) -> None:
    """One metadata request to ``bootstrap``: ``BrokerUnavailableError`` (exit 2) when
    nobody answers, before a command starts producers, drivers or work directories."""
    from pipeline.kafka.client import KafkaMetadata

    KafkaMetadata({"bootstrap.servers": bootstrap}, timeout_s=timeout_s).check_reachable()


def require_pipeline_broker(cfg: PipelineConfig) -> None:
    """The configured brokers answer (security settings included): checked before the
    pipeline opens its tables, which creates the warehouse."""
    from pipeline.kafka.client import KafkaMetadata, consumer_config

    s = cfg.source
    conf = consumer_config(s.bootstrap_servers, s.kafka, isolation_level=s.isolation_level)
    KafkaMetadata(conf, timeout_s=15).check_reachable()


@app.callback(invoke_without_command=True)
def _root(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:  # bare `ingest`: the help, then a usage error
        out.print(ctx.get_help(), markup=False, highlight=False)
        raise UsageError("no command given; see 'ingest --help'")
