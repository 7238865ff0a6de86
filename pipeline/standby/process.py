"""Proof that a lease holder on this host is dead: its process no longer exists.

A replica's lease claim carries its process identity: the kernel's boot id, its process
namespace, its pid and the pid's start time. A replica restarted on the same host after
its predecessor was SIGKILLed reads ``/proc/<pid>/stat`` on every look at the lease (a
fresh read, never cached): no such process, another start time (the pid was reused) or a
zombie means the holder is gone -- it cannot renew, and the kernel closed its sockets -- so
the restart takes the lease at once instead of waiting out ``ha.leaseSeconds``.

Only the same boot *and* the same process namespace make ``/proc`` an authority: another
host's or another container's pid names nothing here, so its identity proves nothing and
the lease's expiry decides, as it does without ``/proc``. A wrong "gone" could only cost a
needless take-over; the writer epoch still fences the replica it replaces.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

_BOOT_ID = "/proc/sys/kernel/random/boot_id"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of ``pid``; None when there is none.

    Not psutil: its public ``create_time()`` adds the boot time as the wall clock tells it,
    which moves when the clock is adjusted, so another process could later see a live
    holder's start time change. The ticks since boot never do."""
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        return None
    fields = text.rpartition(")")[2].split()  # the command name may hold spaces and ")"
    return fields[0], int(fields[19])


def _namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


@dataclass(frozen=True)
class ProcessIdentity:
    """One process, told apart from every other process of its host's boot."""

    boot: str
    pid_namespace: str
    pid: int
    start: int

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        """``pid``'s identity, as seen from this process's namespace; None without ``/proc``."""
        boot, namespace, stat = _read(_BOOT_ID), _namespace(), _stat(pid)
        if boot is None or namespace is None or stat is None:
            return None
        return cls(boot.strip(), namespace, pid, stat[1])

    @classmethod
    def current(cls) -> ProcessIdentity | None:
        return cls.of(os.getpid())

    def to_claim(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_claim(cls, value: Any) -> ProcessIdentity | None:
        """The identity a claim published; None for none or anything malformed."""
        try:
            return cls(
                str(value["boot"]),
                str(value["pid_namespace"]),
                int(value["pid"]),
                int(value["start"]),
            )
        except (TypeError, KeyError, ValueError):
            return None

    def gone(self) -> bool:
        """True only when this host's kernel says the process is no more (read now)."""
        boot = _read(_BOOT_ID)
        if boot is None or boot.strip() != self.boot or _namespace() != self.pid_namespace:
            return False  # another host or container: its pids are not ours to look up
        stat = _stat(self.pid)
        return stat is None or stat[1] != self.start or stat[0] in ("Z", "X")
