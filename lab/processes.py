"""The lab's service processes (Kafka nodes, the Schema Registry, the REST catalog): started
so that they die with the process that started them, and stopped gently, then firmly."""

from __future__ import annotations

import contextlib
import ctypes
import signal
import subprocess
import threading
from collections.abc import Callable

__all__ = ["die_with_parent", "stop_process"]


def _parent_death_signal() -> None:  # pragma: no cover - runs in the forked child
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def die_with_parent() -> Callable[[], None] | None:
    """``preexec_fn`` for ``subprocess.Popen`` on Linux: the child gets SIGKILL when its
    starter dies, so a killed test run or drill leaves no service behind. The kernel ties
    the signal to the forking *thread*, so only the main thread's children get it: a
    service restarted from a helper thread would die when that thread ends."""
    return _parent_death_signal if threading.current_thread() is threading.main_thread() else None


def stop_process(process: subprocess.Popen[bytes] | None, grace_s: float = 20.0) -> None:
    """SIGTERM ``process``, then SIGKILL when it has not exited within ``grace_s``."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
