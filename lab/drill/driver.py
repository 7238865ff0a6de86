"""``DriverProcess`` — ``python -m pipeline run --config …`` in its own process group (so a
SIGKILL takes the JVM too, like a lost pod); stdout/stderr go to files in the work dir."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BATCH_LOG_MARK = "pipeline.batches: "


def driver_out(workdir: Path, n: int) -> Path:
    """Where driver ``n`` of a drill writes its stdout: its log lines."""
    return workdir / f"driver-{n:02d}.out"


class DriverProcess:
    """One ``ingest run`` as its own process group; output captured to files."""

    def __init__(
        self,
        n: int,
        config: Path,
        workdir: Path,
        fault: str | None = None,
        sets: Sequence[str] = (),
    ) -> None:
        self.n, self.fault = n, fault
        self.out_path = driver_out(workdir, n)
        self.err_path = workdir / f"driver-{n:02d}.err"
        # Spark's own log at ERROR unless the drill was asked for more (a breakdown)
        level = os.environ.get("INGEST_SPARK_LOG_LEVEL", "ERROR")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "INGEST_SPARK_LOG_LEVEL": level}
        env.pop("INGEST_FAULT", None)
        if fault:
            env["INGEST_FAULT"] = fault
        cmd = [sys.executable, "-m", "pipeline", "run", "--config", str(config)]
        for s in sets:
            cmd += ["--set", s]
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=err, env=env, cwd=ROOT, start_new_session=True
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group (driver + its JVM): a lost pod."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (graceful stop between batch steps), then SIGKILL the leftovers."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=timeout)
        self.kill()
        return self.proc.returncode

    def reap(self) -> None:
        """After the driver exited by itself: make sure no JVM of its group lingers."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def stderr(self) -> str:
        try:
            return self.err_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log(self) -> str:
        """The driver's log lines: ``ingest run`` writes them to stdout (stderr keeps the
        one-line error; with ``--verbose`` everything is on stderr)."""
        try:
            out = self.out_path.read_text(errors="replace")
        except FileNotFoundError:
            out = ""
        return out + self.stderr()

    def error_line(self) -> str:
        """The operator one-liner (``error: …``) the driver printed, if any."""
        lines = [ln for ln in self.stderr().splitlines() if ln.startswith("error: ")]
        return lines[-1] if lines else ""

    def batch_lines(self) -> list[dict[str, Any]]:
        out = []
        for ln in self.log().splitlines():
            _, mark, rest = ln.partition(BATCH_LOG_MARK)
            if mark and rest.startswith("{"):
                with contextlib.suppress(ValueError):
                    out.append(json.loads(rest))
        return out
