"""The table's columns evolve under SIGKILLs (``schema-change``).

A driver runs with the drill's schema and is SIGKILLed after a commit; the configuration
then evolves (an optional nested column and an optional string added, a required column
made optional: docs/design.md invariant 13) and the next drivers die, each by itself, at
the points around the change: right after the schema change (Iceberg: its schema commit;
Hudi: the change is planned, its next commit carries it), after the first batch in the new
schema was written, after it was precommitted. A healthy driver then finishes it and
drains; every acknowledged record must be in the tables once.

``avro-schema-change`` does the same on an Avro topic through a Schema Registry, where the
schema changes without a restart: the subject gets new versions while the drivers run
(pipeline/decode/registry/watch.py finds them, the run restarts itself on them).
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from lab.drill.driver import DriverProcess
from lab.drill.model import DrillTimeout
from lab.drill.rig import Rig
from lab.drill.scenarios.steps import (
    COMMIT_TIMEOUT_S,
    POINT_TIMEOUT_S,
    exited,
    finish,
    first_commit,
)
from pipeline.config import parse_config

SCHEMA_POINTS = ("after-schema-change", "after-write", "after-precommit")
ADDED: list[dict[str, Any]] = [
    {"name": "payload", "type": "string"},  # never filled by the drill's producer: null
    {
        "name": "context",
        "type": {"type": "struct", "fields": [{"name": "source", "type": "string"}]},
    },
]


def evolved(schema: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The drill's schema with optional columns added and ``page`` made optional."""
    out = copy.deepcopy(schema)
    for f in out:
        if f["name"] == "page":
            f["required"] = False
    return [*out, *copy.deepcopy(ADDED)]


def _die_at(rig: Rig, d: DriverProcess, point: str) -> None:
    try:
        rig.wait_until(exited(d), POINT_TIMEOUT_S, f"for fault {point}")
    except DrillTimeout:
        rig.kill_driver(f"SIGKILL (random; {point} not reached)")
        rig.result.notes.append(f"{point} not reached within {POINT_TIMEOUT_S:.0f}s")
        return
    d.reap()
    if d.poll() != -9:
        rig.result.problems.append(f"driver armed with {point} exited {d.poll()}: {d.error_line()}")
    rig.event("kill", point)


def schema_change(rig: Rig) -> None:
    first_commit(rig)
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    rig.kill_driver("SIGKILL after a commit, before the schema change")
    rig.config_dict["decode"]["schema"] = evolved(rig.config_dict["decode"]["schema"])
    rig.config_path.write_text(yaml.safe_dump(rig.config_dict))
    rig.cfg = parse_config(rig.config_dict)
    rig.event("schema-change", "payload, context added; page made optional")
    for point in SCHEMA_POINTS:
        _die_at(rig, rig.start_driver(fault=f"{point}:kill"), point)
    rig.start_driver()
    rig.wait_commits(2, timeout=COMMIT_TIMEOUT_S)
    finish(rig)


# -- the registry's schema advances while the pipeline runs (avro-schema-change) ------------

CONTEXT: dict[str, Any] = {
    "name": "context",
    "type": [
        "null",
        {"type": "record", "name": "Context", "fields": [{"name": "source", "type": "string"}]},
    ],
    "default": None,
}
REGION: dict[str, Any] = {"name": "region", "type": ["null", "string"], "default": None}


def avro_version(version: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the events' Avro schema at ``version``, the values its added fields carry): v2 adds
    an optional nested record, v3 an optional string."""
    from lab.avro_events import event_avro_schema

    schema = event_avro_schema()
    added = [CONTEXT, REGION][: version - 1]
    values: dict[str, Any] = {"context": {"source": "drill"}, "region": "eu"}
    return {**schema, "fields": [*schema["fields"], *added]}, {
        f["name"]: values[f["name"]] for f in added
    }


def _register(rig: Rig, version: int) -> None:
    """Register ``version`` under the topic's subject; the producer writes it from now on
    (records of the older version are still in flight: the table reads both)."""
    from lab.avro_events import AvroEventEncoder

    assert rig.registry is not None
    schema, extra = avro_version(version)
    encoder = AvroEventEncoder(rig.registry.url, rig.topic, schema=schema, extra=extra)
    rig.producer.encode = encoder.encode_value
    rig.event("schema-change", f"version {version} registered (schema id {encoder.schema_id})")


def avro_schema_change(rig: Rig) -> None:
    """An Avro topic whose subject gets two new versions while drivers run and die: the
    running driver finds version 2 before a batch that may carry it, restarts itself on it
    and is SIGKILLed right after the table's schema change; the next drivers die after the
    first write and the first precommit in the new schema; a healthy driver meets version 3
    live and is SIGKILLed after its first commits on it. Every acknowledged record once."""
    first_commit(rig)
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    rig.kill_driver("SIGKILL after a commit, before the new version")
    d = rig.start_driver(fault="after-schema-change:kill")
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    _register(rig, 2)
    _die_at(rig, d, "after-schema-change")
    for point in ("after-write", "after-precommit"):
        _die_at(rig, rig.start_driver(fault=f"{point}:kill"), point)
    rig.start_driver()
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    _register(rig, 3)
    rig.wait_commits(2, timeout=COMMIT_TIMEOUT_S, driver_must_live=False)
    rig.kill_driver("SIGKILL after commits in version 3")
    rig.start_driver()
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    finish(rig)
