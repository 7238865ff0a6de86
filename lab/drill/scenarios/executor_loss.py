"""``executor-loss``: on the standalone cluster, a worker JVM SIGKILLed with its executor
mid-write or mid-commit; Spark reruns the lost tasks, the driver keeps committing."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import time
from pathlib import Path

from lab.cluster import StandaloneCluster, Worker
from lab.drill.model import DrillTimeout, SkipDrill
from lab.drill.rig import Rig
from lab.drill.scenarios.steps import (
    COMMIT_TIMEOUT_S,
    finish,
)

# executor-loss: write tasks pause after staging their files (first attempt) and the driver
# after its precommit, so the kills land inside those phases on a loaded host too
EXECUTOR_LOSS_FAULTS = "mid-write:sleep=1.5,after-precommit:sleep=1.5"
PHASE_TIMEOUT_S = 120.0
# executor log lines (Spark's default INFO log, see pipeline_config.cluster_spark) of a
# task's start and end
_TASK_LINE = re.compile(
    r"(Running|Finished|Exception in|killed) task \S+ in stage \S+ \(TID (\d+)\)"
)


def executor_loss(rig: Rig) -> None:
    """On the standalone cluster: SIGKILL a worker JVM together with its executor JVM (and
    its Python workers) ``kills`` times — while that executor runs a task of a batch's
    write stage; the 2nd, 5th, 8th … kill while the driver commits — then restart it.
    Spark reruns the lost tasks on the other executor; the driver is never restarted and
    must keep committing."""
    cluster = rig.cluster
    if cluster is None:
        raise SkipDrill("executor-loss runs on the standalone cluster (DrillSpec.cluster)")
    rng = random.Random(rig.spec.kills)
    rig.start_driver(fault=EXECUTOR_LOSS_FAULTS, restart=False)
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    write_kills = 0
    for i in range(rig.spec.kills):
        rig.wait_until(
            lambda: all(w.executor_pids() for w in cluster.workers),
            PHASE_TIMEOUT_S,
            "for an executor on every worker",
        )
        phase = "commit" if i % 3 == 1 else "write"
        n, t_kill, what = _kill_in_phase(rig, cluster, phase, rng)
        write_kills += phase == "write"
        rig.event("executor-kill", what)
        rig.recovery_from_now(since=t_kill)
        cluster.restart_worker(n)
        rig.result.restarts += 1  # the worker, not the driver
        rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)  # the driver lives on and commits
    finish(rig)
    lost = _lost_task_attempts(rig.workdir / "spark-events")
    rig.result.notes.append(
        f"{lost} task attempt(s) lost with their executor and rerun (driver's event log)"
    )
    if write_kills and lost == 0:
        rig.result.problems.append(f"{write_kills} mid-write kill(s) but no task attempt lost")


def _kill_in_phase(
    rig: Rig, cluster: StandaloneCluster, phase: str, rng: random.Random
) -> tuple[int, float, str]:
    """Wait for ``phase`` of a batch — write: the newest instant REQUESTED and a task running
    on an executor (then 0-0.8 s more, if it still runs); commit: the newest instant
    INFLIGHT — and SIGKILL that (write) or a random (commit) worker with its descendants.
    Returns (worker slot, time of the kill, what was killed)."""
    from pipeline.commit.instant import InstantState

    want = InstantState.REQUESTED if phase == "write" else InstantState.INFLIGHT
    deadline = time.monotonic() + PHASE_TIMEOUT_S
    while time.monotonic() < deadline:
        pending = rig.tables().timeline(rig.cfg.id).pending()
        newest = pending[-1] if pending else None
        if newest is not None and newest.state is want:
            if phase == "commit":
                n = rng.randrange(len(cluster.workers))
                t, pids = rig.now(), cluster.kill_worker(n)
                return n, t, f"worker {n} mid-commit of {newest.time} ({len(pids)} processes)"
            busy = {w.n: tids for w in cluster.workers if (tids := _running_tasks(w))}
            if busy:
                n = rng.choice(sorted(busy))
                time.sleep(rng.uniform(0.0, 0.8))
                if _running_tasks(cluster.workers[n]) & busy[n]:
                    t, pids = rig.now(), cluster.kill_worker(n)
                    what = f"worker {n} mid-write, TID {sorted(busy[n])}"
                    return n, t, f"{what}, instant {newest.time} ({len(pids)} processes)"
        time.sleep(0.05)
    raise DrillTimeout(f"executor-loss: no {phase} phase seen within {PHASE_TIMEOUT_S:.0f}s")


def _running_tasks(worker: Worker) -> set[int]:
    """Task ids the worker's executor runs now, from its log (``stderr`` in its working
    directory, ``<work dir>/<app id>/<executor id>``)."""
    running: set[int] = set()
    for pid in worker.executor_pids():
        try:
            text = (Path(os.readlink(f"/proc/{pid}/cwd")) / "stderr").read_text(errors="replace")
        except OSError:
            continue
        for m in _TASK_LINE.finditer(text):
            if m[1] == "Running":
                running.add(int(m[2]))
            else:
                running.discard(int(m[2]))
    return running


def _lost_task_attempts(events: Path) -> int:
    """Task attempts that ended with ``ExecutorLostFailure`` in Spark event logs under
    ``events`` (a killed driver's log may end in a partial line)."""
    lost = 0
    for log in events.rglob("*"):
        if not log.is_file() or log.name.startswith((".", "appstatus")):
            continue
        for line in log.read_text(errors="replace").splitlines():
            if '"ExecutorLostFailure"' not in line:
                continue
            with contextlib.suppress(ValueError):
                ev = json.loads(line)
                if ev.get("Event") == "SparkListenerTaskEnd":
                    lost += ev.get("Task End Reason", {}).get("Reason") == "ExecutorLostFailure"
    return lost
