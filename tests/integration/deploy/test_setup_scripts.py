"""The test command's set-up scripts, run as `run-tests.sh` runs them.

`run-tests.sh` captures `scripts/postgres.sh`'s output with `$(...)`, which returns only
when every holder of the pipe has closed it; a server started by the script must not keep
it open, or the test command hangs before its first test (a CI run did, on a machine where
the cluster was down).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CLUSTER = "ingestsetup"
PORT = "54339"


def _can_manage_clusters() -> bool:
    return os.geteuid() == 0 and shutil.which("pg_createcluster") is not None


@pytest.mark.skipif(not _can_manage_clusters(), reason="needs root and Debian's postgresql")
def test_postgres_script_returns_when_it_starts_the_server() -> None:
    env = {**os.environ, "INGEST_PG_CLUSTER": CLUSTER, "INGEST_PG_PORT": PORT}
    version = sorted(os.listdir("/etc/postgresql"), key=float)[-1]
    try:
        for attempt in ("creates and starts", "starts the stopped cluster"):
            if attempt.startswith("starts"):
                subprocess.run(["pg_ctlcluster", version, CLUSTER, "stop"], check=True)
            done = subprocess.run(
                ["bash", "-c", 'uri="$(bash scripts/postgres.sh)"; echo "$uri"'],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, (attempt, done.stderr)
            assert done.stdout.strip() == f"postgresql://postgres@127.0.0.1:{PORT}/test", attempt
    finally:
        subprocess.run(["pg_dropcluster", "--stop", version, CLUSTER], capture_output=True)
