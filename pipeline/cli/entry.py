"""The CLI's one error path, the same for every command.

- Operator-actionable errors (``PipelineError``, also when Spark or py4j wrapped it, and
  usage errors): one line on stderr, at most one hint line, exit 2.
- Anything else (a bug, an OS or S3 error): one line naming the exception and the log file,
  exit 1; the traceback goes to that file, never to stderr.
- Ctrl-C outside a command's own handling: ``interrupted``, exit 130.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import typer

from pipeline.cli.common import app, close_logging, err, log_file, logging_started, trace_log
from pipeline.errors import PipelineError, find_pipeline_error


def fail(line: str, code: int = 2, hint: str | None = None) -> NoReturn:
    """One line on stderr (plus at most a one-line hint), then exit ``code``; a message
    of several lines (a driver's, a server's) is cut to its first: the rest is in the log."""
    line = (line.strip().splitlines() or [""])[0]
    err.print(f"error: {line}", markup=False, highlight=False, soft_wrap=True)
    if hint:
        err.print(f"hint: {hint}", markup=False, highlight=False, soft_wrap=True)
    sys.stdout.flush()
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
        fail(e.format_message().splitlines()[0], hint=_usage_hint(e))
    except PipelineError as e:
        if logging_started():  # refusals before the command's logging started leave no file
            trace_log.error("stopped: %s", e, exc_info=e)
        fail(str(e))
    except SystemExit:
        raise
    except (KeyboardInterrupt, typer.Abort):
        err.print("interrupted")
        sys.exit(130)
    except Exception as e:
        msg = find_pipeline_error(e, tagged=True)  # Spark wraps ours: show the tagged line
        if msg is not None:
            trace_log.error("stopped: %s", msg, exc_info=e)
            fail(msg)
        path = log_file()
        trace_log.error("failed", exc_info=e)  # the traceback, in the log file
        first = (str(e).strip().splitlines() or [""])[0][:300]
        fail(f"{type(e).__name__}: {first}; traceback in {path}", code=1)
    finally:
        close_logging()  # in-process callers (tests) get their logging back
