"""One function per drill scenario, each in the module of its kind of fault. Each runs
against a ``Rig`` and fills its result.

Every scenario ends the same way: the producer stops, a healthy driver drains the topic,
and the tables are counted against the producer's acknowledged offsets (steps.finish).
What each scenario proves is in docs/drills.md.

steps.py           bounds and steps every scenario shares (first commit, supervise, finish)
driver_kills.py    kill (fault points, random times), task-failure, zombie
executor_loss.py   executor-loss (a worker and its executor SIGKILLed on the Spark cluster)
broker_outage.py   broker-outage (real broker faults on a 3-node Kafka cluster)
standby.py         standby, standby-pause (warm-standby takeovers)
lost_state.py      checkpoint-deleted, retention
catalog_outage.py  catalog-outage (and the private PostgreSQL cluster it stops)
schema_change.py   schema-change, avro-schema-change (the table's columns evolve under
                   SIGKILLs; for Avro, the registry's subject gets new versions mid-run)
routed.py          routed-* (a routed set: several topics, a table each; a kill between
                   two tables' commits, route changes, a new topic, the lost checkpoint
                   over twenty tables, a zombie)
"""

from __future__ import annotations

from collections.abc import Callable

from lab.drill.rig import Rig
from lab.drill.scenarios import (
    broker_outage,
    catalog_outage,
    driver_kills,
    executor_loss,
    lost_state,
    routed,
    schema_change,
    standby,
)
from lab.drill.scenarios.catalog_outage import private_pg_cluster
from lab.drill.scenarios.driver_kills import DUAL_KILL_POINTS, KILL_POINTS

# scenario name -> its function, in the order the matrix runs them
SCENARIOS: dict[str, Callable[[Rig], None]] = {
    "kill": driver_kills.kill,
    "executor-loss": executor_loss.executor_loss,
    "task-failure": driver_kills.task_failure,
    "broker-outage": broker_outage.broker_outage,
    "zombie": driver_kills.zombie,
    "standby": standby.standby,
    "standby-pause": standby.standby_pause,
    "checkpoint-deleted": lost_state.checkpoint_deleted,
    "retention": lost_state.retention,
    "catalog-outage": catalog_outage.catalog_outage,
    "schema-change": schema_change.schema_change,
    "avro-schema-change": schema_change.avro_schema_change,
    "routed-kill": routed.routed_kill,
    "routed-route-change": routed.routed_route_change,
    "routed-new-topic": routed.routed_new_topic,
    "routed-checkpoint-deleted": routed.routed_checkpoint_deleted,
    "routed-zombie": routed.routed_zombie,
}

__all__ = ["DUAL_KILL_POINTS", "KILL_POINTS", "SCENARIOS", "private_pg_cluster"]
