"""The table's columns evolve under SIGKILLs (``schema-change``).

A driver runs with the drill's schema and is SIGKILLed after a commit; the configuration
then evolves (an optional nested column and an optional string added, a required column
made optional: docs/design.md invariant 13) and the next drivers die, each by itself, at
the points around the change: right after the schema change (Iceberg: its schema commit;
Hudi: the change is planned, its next commit carries it), after the first batch in the new
schema was written, after it was precommitted. A healthy driver then finishes it and
drains; every acknowledged record must be in the tables once.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from pipeline.config import parse_config
from pipeline.tools.drill.model import DrillTimeout
from pipeline.tools.drill.rig import Rig
from pipeline.tools.drill.scenarios.steps import (
    COMMIT_TIMEOUT_S,
    POINT_TIMEOUT_S,
    exited,
    finish,
    first_commit,
)

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


def schema_change(rig: Rig) -> None:
    first_commit(rig)
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    rig.kill_driver("SIGKILL after a commit, before the schema change")
    rig.config_dict["decode"]["schema"] = evolved(rig.config_dict["decode"]["schema"])
    rig.config_path.write_text(yaml.safe_dump(rig.config_dict))
    rig.cfg = parse_config(rig.config_dict)
    rig.event("schema-change", "payload, context added; page made optional")
    for point in SCHEMA_POINTS:
        d = rig.start_driver(fault=f"{point}:kill")
        try:
            rig.wait_until(exited(d), POINT_TIMEOUT_S, f"for fault {point}")
        except DrillTimeout:
            rig.kill_driver(f"SIGKILL (random; {point} not reached)")
            rig.result.notes.append(f"{point} not reached within {POINT_TIMEOUT_S:.0f}s")
            continue
        d.reap()
        if d.poll() != -9:
            rig.result.problems.append(
                f"driver armed with {point} exited {d.poll()}: {d.error_line()}"
            )
        rig.event("kill", point)
    rig.start_driver()
    rig.wait_commits(2, timeout=COMMIT_TIMEOUT_S)
    finish(rig)
