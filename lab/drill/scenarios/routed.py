"""Faults of a routed set (``sink.routes`` by topic: several topics, a table each; model
``ROUTED_SCENARIOS``): a SIGKILL between two tables' commits (``routed-kill``), a route
added between runs and a removed one refused while an instant needs its table
(``routed-route-change``), a topic added between runs (``routed-new-topic``), the lost
checkpoint over twenty tables (``routed-checkpoint-deleted``) and a zombie writer
(``routed-zombie``). Every one ends with each record once over the set, in the table
its route names (lab/drill/count.py)."""

from __future__ import annotations

from typing import Any

from lab.drill.driver import DriverProcess
from lab.drill.model import DrillTimeout
from lab.drill.pipeline_config import routes_by_topic
from lab.drill.rig import Rig
from lab.drill.scenarios import driver_kills, lost_state
from lab.drill.scenarios.steps import (
    COMMIT_TIMEOUT_S,
    POINT_TIMEOUT_S,
    exited,
    finish,
    first_commit,
)
from lab.drill.verdict import RECOMMIT_LINE
from pipeline.commit.offsets import TopicPartition

ROUTED_KILLS = 2  # SIGKILLs between two tables' commits: each leaves a half-committed batch


def routed_kill(rig: Rig) -> None:
    """SIGKILL between the commits of two tables of the set, twice; the run after each
    kill must roll the batch forward (a recommit, never a rollback: some table holds it).
    The second armed run may die while it recommits the first one's instant: the point
    is the same, in recovery's commit of the set."""
    for i in range(ROUTED_KILLS):
        d = rig.start_driver(fault="between-table-commits:kill", restart=i > 0)
        _died_at(rig, d, "between-table-commits")
    rig.start_driver()
    rig.wait_commits(2, timeout=COMMIT_TIMEOUT_S)
    finish(rig)
    after_kills = rig.drivers[1 : ROUTED_KILLS + 1]
    rolled = sum(1 for d in after_kills if RECOMMIT_LINE.search(d.log()))
    if rolled < ROUTED_KILLS or rig.result.rollbacks:
        rig.result.problems.append(
            f"{rolled} of the {ROUTED_KILLS} runs after a kill between table commits "
            f"rolled forward, {rig.result.rollbacks} rollbacks: each must roll forward"
        )
    else:
        rig.result.notes.append(
            f"each of the {ROUTED_KILLS} runs after a kill between table commits rolled "
            f"the batch forward ({rig.result.recommits} instant(s) recommitted, no rollback)"
        )


def routed_route_change(rig: Rig) -> None:
    """Between runs, a topic that went to ``sink.table`` gets a table of its own: it
    takes that topic's records from the next batch on (the earlier ones stay where they
    are). Then a driver dies with files staged for that table, and a run configured
    without its route must refuse in one line (``[ingest:table-set]``) and touch nothing;
    with the route restored the next run finishes the instant."""
    changed = rig.topics[2]
    before = _routed(rig, own=[rig.topics[1]])
    rig.reconfigure(before)
    first_commit(rig)
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    boundary = _stop_caught_up(rig)
    after = _routed(rig, own=rig.topics[1:])
    rig.reconfigure(after, routes_from=boundary)
    rig.event("route-added", f"{changed} -> drill.t02 from {_fmt(boundary, changed)}")
    rig.producer.resume()
    armed = rig.start_driver(fault="after-precommit:kill")
    _died_at(rig, armed, "after-precommit")
    rig.reconfigure(before)  # the new table's route removed: the pending instant needs it
    refused = rig.start_driver()
    rig.event("route-removed", f"{changed} back to drill.events, an instant pending")
    rig.wait_until(exited(refused), COMMIT_TIMEOUT_S, "for the run without the route to stop")
    refused.reap()
    line = refused.error_line()
    if refused.poll() != 2 or not line.startswith("error: [ingest:table-set] "):
        rig.result.problems.append(f"run without the route: exit {refused.poll()}, {line!r}")
    else:
        rig.result.notes.append(f"refused: {line[:200]}")
    rig.reconfigure(after)
    rig.start_driver()
    rig.event("route-restored", f"{changed} -> drill.t02")
    rig.wait_commits(2, timeout=COMMIT_TIMEOUT_S)
    finish(rig)


def routed_new_topic(rig: Rig) -> None:
    """A topic appears while the pipeline runs (``source.topics`` is fixed: it is not
    read yet); between runs it is added to the topics and routed to a table of its own.
    Its records from its first offset on must land there, once."""
    new = rig.topics[-1]
    first_commit(rig)
    rig.producer.add_topic(new)
    rig.event("topic-created", f"{new}: produced to, not read")
    rig.wait_commits(2, timeout=COMMIT_TIMEOUT_S)
    assert rig.driver is not None
    rig.driver.stop()
    rig.reconfigure(_routed(rig, topics=rig.topics))
    rig.event("topic-added", f"{new} -> drill.t{len(rig.topics) - 1:02d}")
    rig.start_driver()
    rig.wait_commits(2, timeout=COMMIT_TIMEOUT_S)
    finish(rig)


def routed_checkpoint_deleted(rig: Rig) -> None:
    """The Spark checkpoint deleted between runs of a set of twenty tables: the next run
    resumes from the offsets the tables committed."""
    lost_state.checkpoint_deleted(rig)


def routed_zombie(rig: Rig) -> None:
    """A second driver started beside a running one over a routed set: the first is
    fenced (every table of the set carries the new writer's epoch) and stops."""
    driver_kills.zombie(rig)


def _routed(
    rig: Rig, own: list[str] | None = None, topics: list[str] | None = None
) -> dict[str, Any]:
    """The drill's config reading ``topics`` (default: the ones it reads now), those of
    ``own`` (default: all but the first) routed to tables of their own."""
    read = topics if topics is not None else list(rig.config_dict["source"]["topics"])
    doc = dict(rig.config_dict)
    doc["source"] = {**doc["source"], "topics": read}
    doc["sink"] = {**doc["sink"], "routes": routes_by_topic(read, own)}
    return doc


def _died_at(rig: Rig, d: DriverProcess, point: str) -> None:
    """Wait for ``d``, armed with ``point``, to die there; a problem if it did otherwise."""
    try:
        rig.wait_until(exited(d), POINT_TIMEOUT_S, f"for fault {point}")
    except DrillTimeout:
        rig.kill_driver(f"SIGKILL ({point} not reached)")
        rig.result.problems.append(f"{point} not reached within {POINT_TIMEOUT_S:.0f}s")
        return
    d.reap()
    if d.poll() != -9:
        rig.result.problems.append(
            f"driver armed with {point} exited {d.poll()}: {d.error_line() or d.stderr()[-300:]}"
        )
    rig.event("kill", point)


def _stop_caught_up(rig: Rig) -> dict[TopicPartition, int]:
    """Pause the producer, let the driver commit everything, stop it: the committed
    offsets, where the next run's routes take over (nothing is pending between)."""
    rig.producer.pause()
    rig.wait_until(rig.caught_up, COMMIT_TIMEOUT_S, "for the pipeline to catch up")
    assert rig.driver is not None
    rig.driver.stop()
    rig.event("stop", "driver stopped, caught up")
    return rig.committed_offsets(fresh=True)


def _fmt(offsets: dict[TopicPartition, int], topic: str) -> str:
    return ", ".join(
        f"[{tp.partition}]@{o}" for tp, o in sorted(offsets.items()) if tp.topic == topic
    )
