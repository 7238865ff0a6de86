"""One pipeline driver as its own OS process, watched for throughput, CPU and memory.

:class:`DriverRun` starts ``python -m pipeline run --config …`` in a new session (so a
SIGKILL takes the JVM and the Python workers with it, like a lost pod), writes its
stdout/stderr to files and samples the whole process tree with psutil:

* CPU seconds: per process, the last seen ``user + system`` time, summed over every
  process ever seen in the tree (driver Python, JVM, PySpark daemon and workers). A process
  that lives shorter than one sampling period is missed: workers are reused
  (``spark.python.worker.reuse``), so that loss is small.
* Peak RSS: the largest sum of resident memory over the tree at one sample, also per role:
  ``driver`` (the ``ingest run`` Python process: coordinator, commits), ``jvm`` (Spark's
  driver and, in local mode, executor JVM) and ``workers`` (PySpark daemon and Python
  workers: source reads, staging writes).
* A time series ``(epoch seconds, CPU seconds so far)`` so CPU can be taken over the
  steady part of a run only (between two batch commits).
* Batches: the JSON lines of the ``pipeline.batches`` logger (pipeline/observe/logs.py) that
  ``ingest run`` prints on stdout, parsed as they appear.

Nothing here interprets the numbers; :mod:`lab.bench.stats` does.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import yaml

from pipeline.errors import PipelineError

ROOT = Path(__file__).resolve().parents[2]
BATCH_LOG_MARK = "pipeline.batches: "
ENDPOINT_MARK = "metrics and health endpoints on "
SAMPLE_S = 0.2


class BenchRunError(PipelineError):
    """A benchmark driver run failed or timed out (the message names its log files)."""

    code = "bench-run"


@dataclass(frozen=True)
class BatchLine:
    """One ``pipeline.batches`` JSON line, with the commit wall-clock time in seconds."""

    batch_id: int
    outcome: str
    records: int
    bytes: int
    ts: float  # epoch seconds when the batch's commit finished (logged right after it)
    phases: dict[str, float]
    files: int = 0  # data files the batch committed

    @classmethod
    def parse(cls, text: str) -> BatchLine:
        d = json.loads(text)
        ts = datetime.fromisoformat(d["ts"].replace("Z", "+00:00")).timestamp()
        return cls(
            batch_id=int(d["batch_id"]),
            outcome=str(d["outcome"]),
            records=int(d.get("records") or 0),
            bytes=int(d.get("bytes") or 0),
            ts=ts,
            phases={str(k): float(v) for k, v in (d.get("phases_seconds") or {}).items()},
            files=int(d.get("files") or 0),
        )


@dataclass
class RunResult:
    """What one driver process did, as measured from outside."""

    name: str
    returncode: int | None
    started: float  # epoch seconds at Popen
    ended: float
    cpu_seconds: float
    peak_rss_bytes: int
    batches: list[BatchLine] = field(default_factory=list)
    stderr_path: str = ""
    peak_rss_by_role: dict[str, int] = field(default_factory=dict)
    broker_cpu_seconds: float | None = None  # the bench's Kafka node meanwhile (external: None)
    cpu_series: list[tuple[float, float]] = field(default_factory=list)
    # (epoch time, cumulative CPU seconds per role: driver, jvm, workers)
    cpu_role_series: list[tuple[float, dict[str, float]]] = field(default_factory=list)

    def cpu_at(self, t: float) -> float:
        """CPU seconds used by the tree up to epoch time ``t`` (linear between samples)."""
        return interpolate(self.started, self.cpu_series, t)

    def cpu_by_role(self, t0: float, t1: float) -> dict[str, float]:
        """CPU seconds each role used between epoch times ``t0`` and ``t1``."""
        roles = {r for _, d in self.cpu_role_series for r in d}
        out = {}
        for role in sorted(roles):
            series = [(t, d.get(role, 0.0)) for t, d in self.cpu_role_series]
            out[role] = interpolate(self.started, series, t1) - interpolate(
                self.started, series, t0
            )
        return out

    @property
    def wall_seconds(self) -> float:
        return self.ended - self.started

    @property
    def committed(self) -> list[BatchLine]:
        return [b for b in self.batches if b.outcome in ("committed", "recommitted")]

    @property
    def records(self) -> int:
        return sum(b.records for b in self.committed)


def interpolate(start: float, series: list[tuple[float, float]], t: float) -> float:
    """The cumulative value of ``series`` at time ``t`` (0 at ``start``; linear)."""
    prev = (start, 0.0)
    for cur in series:
        if cur[0] >= t:
            span = cur[0] - prev[0]
            frac = (t - prev[0]) / span if span > 0 else 1.0
            return prev[1] + (cur[1] - prev[1]) * max(0.0, min(1.0, frac))
        prev = cur
    return prev[1]


def write_config(path: Path, cfg: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


class DriverRun:
    """``ingest run`` on ``config`` in its own session, sampled until it exits."""

    def __init__(self, name: str, config: Path, workdir: Path, env: dict[str, str] | None = None):
        self.name = name
        workdir.mkdir(parents=True, exist_ok=True)
        self.out_path = workdir / f"{name}.out"
        self.err_path = workdir / f"{name}.err"
        full_env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "INGEST_SPARK_LOG_LEVEL": "ERROR",
            **(env or {}),
        }
        if "INGEST_FAULT" not in (env or {}):
            full_env.pop("INGEST_FAULT", None)
        cmd = [sys.executable, "-m", "pipeline", "run", "--config", str(config)]
        self.started = time.time()
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=err, env=full_env, cwd=ROOT, start_new_session=True
            )
        self.batches: list[BatchLine] = []
        self._cpu: dict[int, float] = {}
        self._peak_rss = 0
        self._peak_roles: dict[str, int] = {}
        self._series: list[tuple[float, float]] = []
        self._pid_role: dict[int, str] = {}
        self._role_series: list[tuple[float, dict[str, float]]] = []
        self._read_pos = 0
        self._partial = b""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample_loop, daemon=True)
        self._sampler.start()

    # -- sampling -------------------------------------------------------------------------
    def _tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def _role(self, p: psutil.Process) -> str:
        if p.pid == self.proc.pid:
            return "driver"
        with contextlib.suppress(psutil.Error):
            if "java" in p.name():
                return "jvm"
        return "workers"

    def _sample(self) -> None:
        rss = 0
        roles: dict[str, int] = {}
        for p in self._tree():
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                t = p.cpu_times()
                mem = p.memory_info().rss
                rss += mem
                role = self._role(p)
                roles[role] = roles.get(role, 0) + mem
                with self._lock:
                    self._cpu[p.pid] = max(self._cpu.get(p.pid, 0.0), t.user + t.system)
                    self._pid_role[p.pid] = role
        with self._lock:
            self._peak_rss = max(self._peak_rss, rss)
            for role, mem in roles.items():
                self._peak_roles[role] = max(self._peak_roles.get(role, 0), mem)
            now = time.time()
            self._series.append((now, sum(self._cpu.values())))
            by_role: dict[str, float] = {}
            for pid, cpu in self._cpu.items():
                role = self._pid_role.get(pid, "workers")
                by_role[role] = by_role.get(role, 0.0) + cpu
            self._role_series.append((now, by_role))

    def _sample_loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self.poll_batches()
            self._stop.wait(SAMPLE_S)

    def poll_batches(self) -> list[BatchLine]:
        """New batch lines since the last call (also collected into ``self.batches``)."""
        try:
            with open(self.out_path, "rb") as f:  # ingest run logs on stdout
                f.seek(self._read_pos)
                chunk = f.read()
        except FileNotFoundError:
            return []
        with self._lock:
            self._read_pos += len(chunk)
            data = self._partial + chunk
            lines = data.split(b"\n")
            self._partial = lines.pop()
            new = []
            for raw in lines:
                text = raw.decode("utf-8", "replace")
                i = text.find(BATCH_LOG_MARK)
                if i >= 0:
                    with contextlib.suppress(ValueError, KeyError):
                        new.append(BatchLine.parse(text[i + len(BATCH_LOG_MARK) :]))
            self.batches.extend(new)
            return new

    def endpoint(self) -> str | None:
        """The driver's metrics/health base URL, once it logged it."""
        try:
            text = self.out_path.read_text(errors="replace")  # ingest run logs on stdout
        except FileNotFoundError:
            return None
        i = text.find(ENDPOINT_MARK)
        return text[i + len(ENDPOINT_MARK) :].split()[0] if i >= 0 else None

    def ready(self) -> bool:
        """``/readyz`` answers 200: the streaming query is active."""
        import urllib.error
        import urllib.request

        url = self.endpoint()
        if url is None:
            return False
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def committed_count(self) -> int:
        with self._lock:
            return sum(1 for b in self.batches if b.outcome in ("committed", "recommitted"))

    # -- control --------------------------------------------------------------------------
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole session: driver, JVM and Python workers."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self, grace_s: float = 60.0) -> None:
        """SIGTERM (``ingest run`` stops the query between batches), then SIGKILL."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.kill()
        # stragglers of the session (a JVM whose parent died)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def wait(self, timeout_s: float) -> RunResult:
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            self.finish()
            raise BenchRunError(
                f"bench run {self.name} did not finish within {timeout_s:.0f}s "
                f"(log: {self.err_path})"
            ) from None
        return self.finish()

    def finish(self) -> RunResult:
        ended = time.time()
        self._stop.set()
        self._sampler.join(timeout=10)
        self.poll_batches()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with self._lock:
            return RunResult(
                name=self.name,
                returncode=self.proc.returncode,
                started=self.started,
                ended=ended,
                cpu_seconds=sum(self._cpu.values()),
                peak_rss_bytes=self._peak_rss,
                batches=list(self.batches),
                stderr_path=str(self.err_path),
                peak_rss_by_role=dict(self._peak_roles),
                cpu_series=list(self._series),
                cpu_role_series=list(self._role_series),
            )

    def tail(self, chars: int = 1500) -> str:
        try:
            return self.err_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return ""


def run_to_end(name: str, config: Path, workdir: Path, timeout_s: float) -> RunResult:
    """Run a driver until it exits (available-now); a non-zero exit is an error."""
    run = DriverRun(name, config, workdir)
    result = run.wait(timeout_s)
    if result.returncode != 0:
        raise BenchRunError(
            f"bench run {name} exited with {result.returncode}: "
            f"{' '.join(run.tail(600).split())} (log: {run.err_path})"
        )
    return result
