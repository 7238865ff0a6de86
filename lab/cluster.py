"""A Spark standalone cluster on this machine for tests and drills of cluster behaviour:
one master and N workers, each its own JVM from the installed PySpark's ``spark-class``.

Guarantees
  * :meth:`StandaloneCluster.start` returns once the master is up and every worker is
    registered ALIVE in the master's JSON (``http://127.0.0.1:<ui>/json/``), or raises
    :class:`ClusterError` with the log tail and leaves nothing running. Ports are chosen
    by the JVMs (0) and read back from their logs; all bind 127.0.0.1; the master's REST
    submission server (fixed port 6066) is off.
  * Each worker has its own work dir (its executors' working directories: never the
    driver's), ``SPARK_LOCAL_DIRS`` and ``TMPDIR``, ``cores`` cores and ``memory`` memory;
    executors run Python workers on ``python`` (default: this interpreter) through
    ``PYSPARK_PYTHON``, so the installed ``pipeline`` package imports there.
  * :meth:`kill_worker` SIGKILLs a worker's JVM and all its descendants at once (its
    executor JVMs and their Python workers): a lost node. :meth:`restart_worker` starts a
    new JVM in that slot (same dirs) and waits for it to register.
  * :meth:`stop` SIGKILLs every process working in the cluster's directories (all it
    started, orphaned executors too); no JVM is left behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ClusterError", "StandaloneCluster", "Worker", "descendants", "spark_home"]

EXECUTOR_CLASS = "CoarseGrainedExecutorBackend"
_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_MASTER_UI = re.compile(r"Successfully started service 'MasterUI' on port (\d+)")
_WORKER_PORT = re.compile(r"Starting Spark worker [\w.\-]+:(\d+) with")


class ClusterError(RuntimeError):
    """The cluster did not come up (the message has the relevant log tail)."""


def spark_home() -> Path:
    """``SPARK_HOME`` of the installed PySpark (the pip package ships a full Spark)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _proc(pid: int | str, entry: str) -> str:
    """``/proc/<pid>/<entry>`` as text ('' when the process is gone)."""
    try:
        return Path(f"/proc/{pid}/{entry}").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _ppids() -> dict[int, int]:
    """pid -> parent pid of every process (the 4th field of ``stat``, after the name)."""
    stats = {int(d): _proc(d, "stat") for d in os.listdir("/proc") if d.isdigit()}
    return {p: int(st.rsplit(")", 1)[1].split()[1]) for p, st in stats.items() if ")" in st}


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children first), from /proc."""
    ppids, out, i = _ppids(), [pid], 0
    while i < len(out):
        out += [c for c, p in ppids.items() if p == out[i]]
        i += 1
    return out[1:]


def cmdline(pid: int) -> str:
    return _proc(pid, "cmdline")


def _sigkill(pids: list[int]) -> None:
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)


@dataclass
class Worker:
    """One worker slot: its directories and its current JVM (``None`` once killed)."""

    n: int
    dir: Path
    proc: subprocess.Popen[bytes] | None = None
    port: int | None = None  # the worker's RPC port, as registered with the master
    starts: int = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    @property
    def log(self) -> Path:
        return self.dir / f"worker.{self.starts}.log"

    def executor_pids(self) -> list[int]:
        """The executor JVMs this worker launched: its children running
        ``CoarseGrainedExecutorBackend`` (direct children only: a process the executor
        forks shows the executor's command line until it execs)."""
        pid = self.pid
        kids = [c for c, p in _ppids().items() if p == pid] if pid is not None else []
        return [c for c in kids if EXECUTOR_CLASS in cmdline(c)]


class StandaloneCluster:
    """See the module docstring. Use as a context manager, or ``start()`` / ``stop()``."""

    def __init__(
        self,
        root: Path,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        python: str = sys.executable,
    ) -> None:
        self.root = root.resolve()
        self.cores, self.memory, self.python = cores, memory, python
        self.workers = [Worker(i, self.root / f"worker-{i}") for i in range(workers)]
        self.master: subprocess.Popen[bytes] | None = None
        self.master_url = self.ui_url = ""
        self._env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))},
            "SPARK_HOME": str(spark_home()),
            "SPARK_CONF_DIR": str(self.root / "conf"),  # empty: no stray spark-env.sh
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            # daemons: quick start-up, little heap, one GC thread (2-core CI hosts)
            "SPARK_DAEMON_JAVA_OPTS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
            "PYSPARK_PYTHON": python,
        }

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, args: list[str], cwd: Path, log: Path, env: dict[str, str]) -> Any:
        cwd.mkdir(parents=True, exist_ok=True)
        cmd = [str(spark_home() / "bin" / "spark-class"), *args]
        with open(log, "wb") as out:  # a new session: a terminal's Ctrl-C is the caller's
            return subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=cwd, env=env, start_new_session=True,
            )  # fmt: skip

    def _wait_log(self, log: Path, pattern: re.Pattern[str], deadline: float) -> str:
        while not (m := pattern.search(text := log.read_text(errors="replace"))):
            if time.monotonic() > deadline:
                raise ClusterError(f"{log}: no {pattern.pattern!r} in time; tail:\n{text[-2000:]}")
            time.sleep(0.1)
        return m.group(1)

    def start(self, timeout: float = 30.0) -> StandaloneCluster:
        """Master, then every worker; returns once all are registered ALIVE."""
        deadline = time.monotonic() + timeout
        (self.root / "conf").mkdir(parents=True, exist_ok=True)
        log = self.root / "master" / "master.log"
        args = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0"]
        try:
            self.master = self._spawn([*args, "--webui-port", "0"], log.parent, log, self._env)
            self.master_url = self._wait_log(log, _MASTER_URL, deadline)
            self.ui_url = f"http://127.0.0.1:{self._wait_log(log, _MASTER_UI, deadline)}"
            for w in self.workers:
                self._start_worker(w)
            for w in self.workers:
                self._await_registered(w, deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_worker(self, w: Worker) -> None:
        w.starts, w.port = w.starts + 1, None
        work, local, tmp = (w.dir / d for d in ("work", "local", "tmp"))
        for d in (work, local, tmp):
            d.mkdir(parents=True, exist_ok=True)
        env = {**self._env, "SPARK_LOCAL_DIRS": str(local), "TMPDIR": str(tmp)}
        env["SPARK_DAEMON_JAVA_OPTS"] += f" -Djava.io.tmpdir={tmp}"
        args = ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", "0"]
        args += ["--webui-port", "0", "--cores", str(self.cores), "--memory", self.memory]
        w.proc = self._spawn([*args, "--work-dir", str(work), self.master_url], w.dir, w.log, env)

    def _await_registered(self, w: Worker, deadline: float) -> None:
        w.port = int(self._wait_log(w.log, _WORKER_PORT, deadline))
        while time.monotonic() < deadline:
            if any(x["port"] == w.port for x in self.alive_workers()):
                return
            time.sleep(0.2)
        raise ClusterError(f"worker {w.n} (port {w.port}) did not register with the master")

    def alive_workers(self) -> list[dict[str, Any]]:
        """The workers the master's JSON (``<ui>/json/``) lists as ALIVE; [] if it is down."""
        try:
            with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as r:
                workers = json.load(r).get("workers", [])
        except OSError:
            return []
        return [x for x in workers if x.get("state") == "ALIVE"]

    def kill_worker(self, n: int) -> list[int]:
        """SIGKILL worker ``n``'s JVM and all its descendants at once; returns their pids."""
        proc, self.workers[n].proc = self.workers[n].proc, None
        pids = [proc.pid, *descendants(proc.pid)] if proc is not None else []
        _sigkill(pids)
        if proc is not None:
            proc.wait(timeout=30)
        return pids

    def restart_worker(self, n: int, timeout: float = 30.0) -> None:
        """A new worker JVM in slot ``n`` (killed first if running), registered on return."""
        self.kill_worker(n)
        self._start_worker(self.workers[n])
        self._await_registered(self.workers[n], time.monotonic() + timeout)

    def stop(self) -> None:
        """SIGKILL every process working inside the cluster's root: the master and the
        workers (their own dirs), executors (their work dirs) and the executors' Python
        workers, also those a killed worker left behind for a moment."""
        deadline = time.monotonic() + 10
        while (left := self._inside()) and time.monotonic() < deadline:
            _sigkill(left)
            time.sleep(0.1)
        for p in (self.master, *(w.proc for w in self.workers)):
            if p is not None:
                p.wait(timeout=10)
        self.master = None
        for w in self.workers:
            w.proc = None

    def _inside(self) -> list[int]:
        """Processes (but this one) whose working directory is inside the cluster's root."""
        out = []
        for d in os.listdir("/proc"):
            with contextlib.suppress(OSError, ValueError):
                if Path(os.readlink(f"/proc/{d}/cwd")).is_relative_to(self.root):
                    out += [int(d)] if int(d) != os.getpid() else []
        return out
