"""Driver faults: SIGKILL at each named fault point and at random times (``kill``), a
worker process killed or raising inside every first task attempt (``task-failure``), and a
second driver started beside a running one (``zombie``)."""

from __future__ import annotations

import random
import time

from lab.drill.model import DrillSpec, DrillTimeout
from lab.drill.rig import Rig
from lab.drill.scenarios.steps import (
    COMMIT_TIMEOUT_S,
    POINT_TIMEOUT_S,
    exited,
    finish,
    first_commit,
)

# Driver fault points in the order that exercises every recovery path: the run after
# after-requested/after-write rolls back, during-rollback dies inside that rollback,
# after-precommit/after-dead-letter-commit are recommitted, after-commit-before-checkpoint
# is replayed and skipped (tests/integration/commit/test_recovery_spark.py CHAIN). Then
# the background
# compaction's (the drill runs with it on, compactions.DRILL_COMPACTION): killed with its
# files written but not committed (orphans; the table unchanged), then right after its
# commit (the replaced files stay until expiry); the next driver must carry on exactly.
KILL_POINTS = (
    "after-requested",
    "after-write",
    "during-rollback",
    "after-precommit",
    "after-dead-letter-commit",
    "after-commit",
    "after-commit-before-checkpoint",
    "compaction-after-write",
    "compaction-after-commit",
)
# the both table format: also between-table-commits (the Iceberg table committed, the Hudi
# table not yet: rolled forward)
DUAL_KILL_POINTS = (
    "after-requested",
    "after-write",
    "during-rollback",
    "after-precommit",
    "after-dead-letter-commit",
    "between-table-commits",
    "after-commit",
    "after-commit-before-checkpoint",
    "compaction-after-write",
    "compaction-after-commit",
)


def kill_points(spec: DrillSpec) -> tuple[str, ...]:
    """The fault points a kill drill of ``spec`` arms in turn: without the pipeline's own
    compaction (Hudi's own writer) the compaction's two are left out."""
    named = DUAL_KILL_POINTS if spec.table_format == "both" else KILL_POINTS
    if not spec.own_maintenance:
        return tuple(p for p in named if not p.startswith("compaction-"))
    return named


def kill(rig: Rig) -> None:
    """SIGKILL the driver at each named fault point, then at random times, ``kills`` times;
    background compaction runs throughout (two of the points are its own)."""
    rng = random.Random(rig.spec.kills)
    points = list(kill_points(rig.spec)[: rig.spec.kills])
    kills = 0
    # fault-point kills: each run is armed with the next point and dies there by itself
    for i, point in enumerate(points):
        d = rig.start_driver(fault=f"{point}:kill", restart=i > 0)
        try:
            rig.wait_until(exited(d), POINT_TIMEOUT_S, f"for fault {point}")
        except DrillTimeout:
            rig.kill_driver(f"SIGKILL (random; {point} not reached)")
            rig.result.notes.append(f"{point} not reached within {POINT_TIMEOUT_S:.0f}s")
            kills += 1
            continue
        d.reap()
        rc = d.poll()
        if rc != -9:
            rig.result.problems.append(
                f"driver armed with {point} exited {rc}: {d.error_line() or d.stderr()[-300:]}"
            )
        rig.event("kill", f"{point}")
        kills += 1
    # random-time kills: after the restarted driver committed, kill it mid-batch
    while kills < rig.spec.kills:
        rig.start_driver(restart=bool(rig.drivers))
        rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
        time.sleep(rng.uniform(0.0, 2.5))
        rig.kill_driver("SIGKILL random")
        kills += 1
    rig.start_driver()
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    rig.await_compaction()
    finish(rig)


def task_failure(rig: Rig) -> None:
    """A worker process dies inside each task's first attempt (after staging its files),
    then raises instead; Spark retries every task. Faults = batches whose tasks all failed
    once (every batch of the armed drivers that carried records)."""
    rig.start_driver(fault="mid-write:kill", restart=False)
    rig.event("task-kill", "mid-write: worker SIGKILLed in every first attempt")
    rig.wait_commits(5, timeout=COMMIT_TIMEOUT_S)
    assert rig.driver is not None
    rig.driver.stop()
    rig.start_driver(fault="mid-write:raise")
    rig.event("task-raise", "mid-write: exception in every first attempt")
    rig.wait_commits(3, timeout=COMMIT_TIMEOUT_S)
    finish(rig)
    rig.result.faults = sum(
        1
        for d in rig.drivers
        for ln in d.batch_lines()
        if ln.get("outcome") == "committed" and ln.get("records", 0) > 0
    )


def zombie(rig: Rig) -> None:
    """A second driver starts while the first runs; the first must be fenced and stop.
    Both run background compaction: the fenced one's must stop too."""
    first_commit(rig)
    first = rig.driver
    assert first is not None
    rig.start_driver(restart=False)
    rig.event(
        "zombie", f"driver {rig.driver.n if rig.driver else '?'} started beside driver {first.n}"
    )
    try:
        rig.wait_until(lambda: not first.alive(), 240, "for the old driver to stop")
    except DrillTimeout:
        rig.result.problems.append("the old driver was not fenced within 240 s")
        first.kill()
    first.reap()
    # Both drivers commit until the old one is fenced, so a commit right after the second
    # start is not the takeover's. Time to recover is the stall an operator sees: from the
    # fenced driver's exit to the next commit.
    rig.result.restarts += 1
    rig.recovery_from_now()
    msg = first.error_line()
    fence_words = ("superseded", "fenced", "must stop")  # coordinator / table fence messages
    if first.poll() != 2 or not any(w in msg for w in fence_words):
        rig.result.problems.append(
            f"old driver exited {first.poll()} without a fence message: {msg!r}"
        )
    else:
        rig.result.notes.append(f"old driver: {msg[:160]}")
    rig.wait_commits(2, timeout=COMMIT_TIMEOUT_S)
    rig.await_compaction()
    finish(rig)
