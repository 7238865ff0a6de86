"""One measured run of one peer: launched in its own cgroup, watched through its table.

The harness launches :meth:`PeerSystem.launch`'s command in a new session inside a fresh
cgroup (:mod:`lab.peers.meter`), then every ``POLL_S`` reads the cgroup's CPU and
memory and the table's progress (a fresh metadata read). The run is *done* when the table
holds ``expected`` records (or the process exits); CPU and wall are taken at that moment,
before any shutdown, so a system that idles after its last commit (a Connect worker, a
processing-time trigger) is not charged for the idling. Then the cgroup gets SIGTERM,
``grace_s`` to exit, and SIGKILL for whatever is left.

Figures of a run: whole run (launch → all records visible), start-up (launch → first data
commit visible), steady state (first data commit → done: records/s and CPU per million
records), peak resident memory of the cgroup, data files and bytes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from lab.peers.meter import open_meter
from lab.peers.model import PeerJob, PeerSystem, Progress
from pipeline.errors import PipelineError

POLL_S = 0.2


class PeerRunError(PipelineError):
    """A peer did not finish: timed out or exited before its table held every record."""


@dataclass
class Sample:
    t: float  # seconds since launch
    cpu_s: float
    records: int


@dataclass
class PeerRun:
    system: str
    expected: int
    records: int
    wall_s: float  # launch -> every record visible
    cpu_s: float  # the cgroup's CPU over the same span
    first_commit_s: float | None  # launch -> first data commit visible
    cpu_at_first_commit_s: float | None
    peak_rss_bytes: int
    progress: Progress
    exit: str  # what ended the process: "exited N" / "stopped by SIGTERM" / "killed"
    samples: list[Sample] = field(default_factory=list, repr=False)

    def steady(self) -> dict[str, float | None]:
        """Records/s and CPU-s per million from the first data commit to the end (the
        first batch's records count as start-up: they are in before the span starts)."""
        first = next((s for s in self.samples if s.records > 0), None)
        if first is None or self.records <= first.records or self.wall_s <= first.t:
            return {"records_per_s": None, "cpu_s_per_million": None}
        n = self.records - first.records
        return {
            "records_per_s": n / (self.wall_s - first.t),
            "cpu_s_per_million": (self.cpu_s - first.cpu_s) / n * 1e6,
        }

    def summary(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k not in ("samples", "progress")}
        out["progress"] = asdict(self.progress)
        out["records_per_s"] = self.records / self.wall_s if self.wall_s else None
        out["cpu_s_per_million"] = self.cpu_s / self.records * 1e6 if self.records else None
        out["records_per_cpu_s"] = self.records / self.cpu_s if self.cpu_s else None
        out["steady"] = self.steady()
        return out


class Running:
    """A launched peer in its cgroup (also what fault drills hold and kill)."""

    def __init__(self, system: PeerSystem, job: PeerJob, tag: str) -> None:
        self.system, self.job = system, job
        self.meter = open_meter(f"{system.name}-{tag}-{os.getpid()}")
        launch = system.launch(job)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
        env.update(launch.env)
        self.log = launch.log or job.work / f"{system.name}.log"
        log = open(self.log, "ab")  # noqa: SIM115
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            launch.argv,
            cwd=launch.cwd or job.work,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=self.meter.join,  # writes the child's pid into its cgroup, nothing else
            start_new_session=True,
        )
        log.close()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def stop(self, grace_s: float = 30.0) -> str:
        """SIGTERM the whole cgroup, wait ``grace_s``, SIGKILL the rest; the cgroup goes."""
        if self.proc.poll() is None:
            self.meter.send(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
                how = "stopped by SIGTERM"
            except subprocess.TimeoutExpired:
                how = "killed after SIGTERM timed out"
        else:
            how = f"exited {self.proc.returncode}"
        self.meter.close()
        self.proc.wait()
        return how

    def kill(self) -> None:
        """SIGKILL every process of the system at once (a lost pod), cgroup removed."""
        self.meter.close()
        self.proc.wait()


def run_peer(
    system: PeerSystem, job: PeerJob, expected: int, timeout_s: float, tag: str = "run"
) -> PeerRun:
    """Run ``system`` on ``job`` until its table holds ``expected`` records."""
    running = Running(system, job, tag)
    samples: list[Sample] = []
    first: Sample | None = None
    exit_how = ""
    try:
        while True:
            time.sleep(POLL_S)
            cpu = running.meter.cpu_seconds()
            running.meter.sample()
            exited = running.proc.poll() is not None
            progress = system.progress(job)
            s = Sample(running.elapsed(), cpu, progress.records)
            samples.append(s)
            if first is None and progress.records > 0:
                first = s
            if progress.records >= expected or exited:
                break
            if s.t > timeout_s:
                raise PeerRunError(
                    f"{system.name}: {progress.records:,} of {expected:,} records after "
                    f"{timeout_s:.0f} s (log: {job.work})"
                )
    finally:
        exit_how = running.stop()
    end = samples[-1]
    if end.records < expected:
        raise PeerRunError(
            f"{system.name} {exit_how} with {end.records:,} of {expected:,} records visible "
            f"(log: {job.work})"
        )
    return PeerRun(
        system=system.name,
        expected=expected,
        records=end.records,
        wall_s=end.t,
        cpu_s=end.cpu_s,
        first_commit_s=first.t if first else None,
        cpu_at_first_commit_s=first.cpu_s if first else None,
        peak_rss_bytes=running.meter.peak_bytes,
        progress=progress,
        exit=exit_how,
        samples=samples,
    )
