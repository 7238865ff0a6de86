"""Run the pipeline as its own OS process (`python -m pipeline run`), as drills do."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_driver(config: Path, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    """One driver run on ``config``; ``fault`` arms INGEST_FAULT (e.g. ``after-commit:kill``)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "INGEST_SPARK_LOG_LEVEL": "ERROR"}
    env.pop("INGEST_FAULT", None)
    if fault:
        env["INGEST_FAULT"] = fault
    return subprocess.run(
        [sys.executable, "-m", "pipeline", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )


_COMMIT_LINE = re.compile(r"(\d+) records in (\S+)(?: as snapshot| \()")


def logged_records(messages: list[str]) -> dict[str, int]:
    """Records per table from the commit log lines (Iceberg name or Hudi base path)."""
    out: dict[str, int] = {}
    for msg in messages:
        m = _COMMIT_LINE.search(msg)
        if m:
            out[m[2]] = out.get(m[2], 0) + int(m[1])
    return out
