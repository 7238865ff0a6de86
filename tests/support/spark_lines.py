"""Other Spark lines' own environments (``scripts/spark-line-env.sh VERSION``), for tests
that drive a process on them: PySpark 3.5.7, where Hudi's Spark bundle runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


def python_of(version: str = "3.5.7") -> str:
    """The ``python`` of PySpark ``version``'s environment, installed on first use. It can
    always be installed here (PyPI): a failure fails the test."""
    r = subprocess.run(
        ["bash", str(ROOT / "scripts" / "spark-line-env.sh"), version],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or ["spark-line-env.sh failed"])[-1]
        pytest.fail(f"PySpark {version} environment: {why}")
    return r.stdout.strip().splitlines()[-1]
