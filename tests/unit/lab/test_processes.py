"""Service processes: stopped gently then firmly; the parent-death signal only from the
main thread (lab/processes.py)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from lab.processes import die_with_parent, stop_process

IGNORES_SIGTERM = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
    "print('ready', flush=True); time.sleep(60)"  # fmt: skip


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    proc = subprocess.Popen([sys.executable, "-c", IGNORES_SIGTERM], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    started = time.monotonic()
    stop_process(proc, grace_s=0.5)
    assert proc.returncode == -9 and time.monotonic() - started < 10


def test_a_process_stops_on_sigterm_and_a_gone_one_is_left_alone() -> None:
    proc = subprocess.Popen(["sleep", "60"])
    stop_process(proc)
    assert proc.returncode == -15
    stop_process(proc)  # already gone: nothing to do
    stop_process(None)


def test_only_the_main_thread_ties_a_child_to_its_life() -> None:
    assert die_with_parent() is not None
    from_thread: list[object] = []
    worker = threading.Thread(target=lambda: from_thread.append(die_with_parent()))
    worker.start()
    worker.join()
    assert from_thread == [None]
