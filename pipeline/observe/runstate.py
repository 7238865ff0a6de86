"""The pipeline's last run state, kept next to the Spark checkpoint so it outlives the process.

``Pipeline.run()`` records ``running`` once the streaming query started and ``stopped``
(with the one-line error, or none on a clean stop) when it ends; ``ingest status`` reads it
back to say why a stopped pipeline stopped. One small JSON file,
``<checkpointLocation>/ingest-run-state.json``, written atomically (temp file + rename).

Only local checkpoint locations (a plain path or ``file:``) are supported; for others
(``s3a://``, ``hdfs://``) nothing is written and :func:`read_run_state` says so. Recording
never raises and never creates the checkpoint directory: a run that failed before Spark
created it (or one whose directory is unwritable) leaves no state behind.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from pipeline.config import PipelineConfig
from pipeline.errors import one_line

log = logging.getLogger(__name__)

FILE_NAME = "ingest-run-state.json"
ERROR_LIMIT = 500  # characters of the error line kept


def local_checkpoint_dir(location: str) -> Path | None:
    """The checkpoint directory as a local path; None when it is not local."""
    if "://" in location or location.startswith("file:"):
        parsed = urlparse(location)
        if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
            return None
        location = unquote(parsed.path)
    return Path(os.path.abspath(os.path.expanduser(location)))


def run_state_path(cfg: PipelineConfig) -> Path | None:
    base = local_checkpoint_dir(cfg.checkpoint_location)
    return None if base is None else base / FILE_NAME


def error_line(exc: BaseException) -> str | None:
    """One line for ``exc``: the pipeline error inside it (also when Spark wrapped it),
    else the type and the first line of its message; None for an interrupt (a stop)."""
    if isinstance(exc, KeyboardInterrupt):
        return None
    return one_line(exc, ERROR_LIMIT)


def record_run_state(
    cfg: PipelineConfig,
    state: str,
    error: str | None,
    *,
    metrics_url: str | None = None,
) -> Path | None:
    """Write the run state (``running`` / ``stopped``); the file written, or None when
    the checkpoint location is not local, its directory does not exist, or writing
    failed (logged, never raised: it must not hide the run's own outcome)."""
    try:
        return _write(cfg, state, error, metrics_url)
    except Exception as e:  # e.g. an unsearchable parent directory: stat() raises EACCES
        log.warning("could not record the run state of %s: %s", cfg.id, e)
        return None


def record_unknown_fields(cfg: PipelineConfig, records: int, names: list[str]) -> None:
    """Add this run's count of records with unknown fields (and their names) to the run
    state; a stop keeps it, the next start clears it. Never raises (logged)."""
    path = run_state_path(cfg)
    try:
        if path is None or not path.is_file():
            return
        doc = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(doc, dict):
            doc[UNKNOWN_KEY] = {"records": records, "fields": names}
            _replace(path, doc)
    except Exception as e:
        log.warning("could not record unknown fields of %s: %s", cfg.id, e)


UNKNOWN_KEY = "unknown_fields"


def _write(cfg: PipelineConfig, state: str, error: str | None, url: str | None) -> Path | None:
    path = run_state_path(cfg)
    if path is None or not path.parent.is_dir():
        return None
    kept: dict[str, Any] = {}
    if state != "running" and path.is_file():  # a stop keeps what the run counted
        with contextlib.suppress(OSError, ValueError, AttributeError):
            old = json.loads(path.read_text(encoding="utf-8"))
            kept = {UNKNOWN_KEY: old[UNKNOWN_KEY]} if UNKNOWN_KEY in old else {}
    doc: dict[str, Any] = {
        "pipeline_id": cfg.id,
        "state": state,
        "error": error,
        "time": time.time(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "metrics_url": url,
        **kept,
    }
    _replace(path, doc)
    return path


def _replace(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(f".{FILE_NAME}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(doc) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)  # our own temp file only
        raise


@dataclass(frozen=True)
class RunState:
    """What :func:`read_run_state` found. ``state`` is None when nothing is recorded;
    ``note`` then says why (non-local checkpoint, no file yet, unreadable file)."""

    state: str | None
    error: str | None = None
    time: float | None = None
    host: str | None = None
    pid: int | None = None
    metrics_url: str | None = None
    pipeline_id: str | None = None
    path: Path | None = None
    note: str | None = None
    unknown_field_records: int = 0  # this (or the last) run's records with unknown fields
    unknown_fields: tuple[str, ...] = ()

    def process_alive(self) -> bool | None:
        """Whether the recorded process still exists (None: another host, or unknown)."""
        if self.pid is None or self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # exists, owned by someone else
        except OSError:
            return None
        return True


def read_run_state(cfg: PipelineConfig) -> RunState:
    path = run_state_path(cfg)
    if path is None:
        return RunState(
            None,
            note=f"run state not kept: checkpoint location {cfg.checkpoint_location} "
            "is not a local path",
        )
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return RunState(None, path=path, note=f"no run recorded in {path.parent}")
    except (OSError, ValueError) as e:
        return RunState(None, path=path, note=f"run state {path} unreadable: {e}")
    if not isinstance(doc, dict):
        return RunState(None, path=path, note=f"run state {path} unreadable: not an object")

    def opt(key: str, kind: type) -> Any:
        value = doc.get(key)
        return value if isinstance(value, kind) and not isinstance(value, bool) else None

    when = doc.get("time")
    return RunState(
        state=opt("state", str),
        error=opt("error", str),
        time=float(when) if isinstance(when, int | float) else None,
        host=opt("host", str),
        pid=opt("pid", int),
        metrics_url=opt("metrics_url", str),
        pipeline_id=opt("pipeline_id", str),
        path=path,
        **_unknown_of(doc.get(UNKNOWN_KEY)),
    )


def _unknown_of(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("records"), int):
        return {}
    names = value.get("fields")
    listed = tuple(n for n in names if isinstance(n, str)) if isinstance(names, list) else ()
    return {"unknown_field_records": value["records"], "unknown_fields": listed}
