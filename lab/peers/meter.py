"""A cgroup per measured system: the CPU and memory of its whole process tree, honestly.

Sampling a process tree with psutil misses processes that live shorter than a sample and
children re-parented away from the tree (a Connect worker's or Spark's helpers). A cgroup
counts every process started inside it, however short-lived, until the cgroup is removed,
and ``kill`` reaches all of them, so a SIGKILL drill leaves nothing behind.

Supports cgroup v1 (``cpuacct`` and ``memory`` hierarchies, as on this host) and v2 (the
unified hierarchy: ``cpu.stat``, ``memory.peak``). Needs root (or a delegated subtree);
:func:`open_meter` says so in one line otherwise.

Peak memory is the largest resident anonymous + mapped-file memory (``rss`` +
``mapped_file`` of ``memory.stat``) seen by :meth:`CgroupMeter.sample`, not the kernel's
high-water mark, which also counts page cache of the files a system writes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from pipeline.errors import PipelineError

ROOT = Path("/sys/fs/cgroup")
PARENT = "ingest-peers"


class MeterError(PipelineError):
    """No cgroup can be made for a measured system."""


def _v2() -> bool:
    return (ROOT / "cgroup.controllers").exists()


class CgroupMeter:
    """One cgroup (v1: in ``cpuacct`` and ``memory``; v2: one directory) for one system."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.v2 = _v2()
        if self.v2:
            parent = ROOT / PARENT
            parent.mkdir(exist_ok=True)
            with contextlib.suppress(OSError):  # may already be on
                (parent / "cgroup.subtree_control").write_text("+cpu +memory")
            self.dirs = [parent / name]
        else:
            self.dirs = [ROOT / "cpuacct" / PARENT / name, ROOT / "memory" / PARENT / name]
        for d in self.dirs:
            if d.exists():  # a stale one from a killed bench: empty it first
                self._kill_in(d)
                d.rmdir()
            d.mkdir(parents=True)
        self.peak_bytes = 0

    def join(self) -> None:
        """Move the calling process into the cgroup (``preexec_fn`` of the measured child:
        everything it starts is counted from its first instruction)."""
        pid = str(os.getpid())
        for d in self.dirs:
            (d / "cgroup.procs").write_text(pid)

    def _file(self, v1_hierarchy: str, name: str) -> Path:
        return self.dirs[0] / name if self.v2 else ROOT / v1_hierarchy / PARENT / self.name / name

    def cpu_seconds(self) -> float:
        """CPU (user + system) of every process that ran in the cgroup so far."""
        if self.v2:
            for line in self._file("", "cpu.stat").read_text().splitlines():
                key, value = line.split()
                if key == "usage_usec":
                    return int(value) / 1e6
            raise MeterError(f"{self._file('', 'cpu.stat')} has no usage_usec")
        return int(self._file("cpuacct", "cpuacct.usage").read_text()) / 1e9

    def resident_bytes(self) -> int:
        """Resident memory of the cgroup's processes now (anonymous + mapped files)."""
        stat = dict(
            line.split() for line in self._file("memory", "memory.stat").read_text().splitlines()
        )
        if self.v2:
            return int(stat.get("anon", 0)) + int(stat.get("file_mapped", 0))
        return int(stat.get("total_rss", stat.get("rss", 0))) + int(
            stat.get("total_mapped_file", stat.get("mapped_file", 0))
        )

    def sample(self) -> int:
        """Read resident memory and keep the peak; returns the current value."""
        now = self.resident_bytes()
        self.peak_bytes = max(self.peak_bytes, now)
        return now

    def pids(self) -> list[int]:
        return [int(p) for p in (self.dirs[0] / "cgroup.procs").read_text().split()]

    @staticmethod
    def _kill_in(d: Path) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        raise MeterError(f"processes of cgroup {d} survive SIGKILL for 10 s")

    def kill(self) -> None:
        """SIGKILL every process in the cgroup and wait until none is left."""
        self._kill_in(self.dirs[0])

    def send(self, sig: int) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def close(self) -> None:
        """Kill what is left and remove the cgroup."""
        self.kill()
        for d in self.dirs:
            with contextlib.suppress(FileNotFoundError):
                d.rmdir()


def open_meter(name: str) -> CgroupMeter:
    """A fresh cgroup named ``name``, or a one-line :class:`MeterError` saying why not."""
    try:
        return CgroupMeter(name)
    except OSError as e:
        raise MeterError(
            f"cannot create a cgroup for {name!r} under {ROOT} ({e.strerror}): the peers "
            "bench measures each system in a cgroup of its own and needs root"
        ) from e
