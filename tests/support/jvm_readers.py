"""The independent JVM readers' environment (``scripts/jvm-reader-env.sh``): PySpark 3.5 in its
own virtual environment with Iceberg's and Hudi's Spark packages from the project's JVM
manifest. ``reader_paths()`` builds it on first use and returns its ``python``,
``iceberg_jar``, ``hudi_jar`` and ``sqlite_jdbc_jar``; when it cannot be built the test skips
naming what is missing, or fails under ``INGEST_REQUIRE_JVM_READERS=1`` (set by the test
command: everything it needs can be installed there)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
ENV_SCRIPT = ROOT / "scripts" / "jvm-reader-env.sh"


def _unavailable(why: str) -> None:
    if os.environ.get("INGEST_REQUIRE_JVM_READERS") == "1":
        pytest.fail(f"JVM reader environment required (INGEST_REQUIRE_JVM_READERS=1): {why}")
    pytest.skip(f"JVM reader environment: {why}")


def reader_paths() -> dict[str, str]:
    try:
        r = subprocess.run(
            ["bash", str(ENV_SCRIPT)], capture_output=True, text=True, timeout=600, cwd=ROOT
        )
    except subprocess.TimeoutExpired:
        _unavailable("scripts/jvm-reader-env.sh timed out")
        raise  # not reached: skip and fail raise
    if r.returncode != 0:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        _unavailable(lines[-1] if lines else f"exit {r.returncode}")
    return dict(ln.split("=", 1) for ln in r.stdout.splitlines() if "=" in ln)


def reader_process_env() -> dict[str, str]:
    """This environment without what points Python or Spark at the project's PySpark."""
    drop = {"SPARK_HOME", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "SPARK_CONF_DIR"}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("PYSPARK_")}
    return {**env, "PYTHONNOUSERSITE": "1"}
