"""Named fault-injection points for crash tests and drills.

Armed by ``INGEST_FAULT=<point>:<action>[@<batch>][,…]`` in the environment or the config
key ``faults`` (same syntax). ``action`` is ``kill`` (SIGKILL of this process: no
``finally``, no flush, exactly like a lost pod), ``raise`` (``FaultInjected``) or
``sleep=<seconds>`` (a slow step: the batch pauses there, then carries on; stop tests land
a signal inside a batch with it).
``@<batch>`` limits the fault to one batch id. Unarmed points cost a dict lookup.

Points (driver unless noted):
  after-requested               REQUESTED durable, no worker started
  mid-write                     inside a worker task, first attempt only (task retry path)
  after-write                   workers done, files staged, INFLIGHT not yet written
  after-precommit               INFLIGHT durable, no table commit yet
  after-dead-letter-commit      dead letters committed, main table not yet
  between-table-commits         the both table format: Iceberg committed, Hudi not yet
  after-commit                  main table committed, COMPLETED marker not yet written
  after-commit-before-checkpoint  marker written, Spark's commit log not yet
  during-rollback               some files of a rolled-back instant deleted, marker not yet
  compaction-after-write        background compaction: its files written, not committed
  compaction-after-commit       background compaction: committed (files replaced)
  after-schema-change           the table's new columns committed, the query not started
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

from pipeline.errors import ConfigError, PipelineError

POINTS = (
    "after-requested",
    "mid-write",
    "after-write",
    "after-precommit",
    "after-dead-letter-commit",
    "between-table-commits",
    "after-commit",
    "after-commit-before-checkpoint",
    "during-rollback",
    "compaction-after-write",
    "compaction-after-commit",
    "after-schema-change",
)
ENV = "INGEST_FAULT"


class FaultInjected(PipelineError):
    code = "fault-injected"


@dataclass(frozen=True)
class Fault:
    point: str
    action: str
    batch: int | None = None


def parse_faults(spec: str | None) -> dict[str, Fault]:
    out: dict[str, Fault] = {}
    for item in (spec or "").split(","):
        item = item.strip()
        if not item:
            continue
        head, _, batch = item.partition("@")
        point, _, action = head.partition(":")
        action = action or "kill"
        if point not in POINTS:
            raise ConfigError(f"fault point {point!r} unknown; allowed: {', '.join(POINTS)}")
        if action not in ("kill", "raise") and _sleep_seconds(action) is None:
            raise ConfigError(
                f"fault action {action!r} unknown; allowed: kill, raise, sleep=<seconds>"
            )
        try:
            out[point] = Fault(point, action, int(batch) if batch else None)
        except ValueError:
            raise ConfigError(f"fault {item!r}: batch after @ must be an integer") from None
    return out


def _sleep_seconds(action: str) -> float | None:
    name, _, arg = action.partition("=")
    if name != "sleep":
        return None
    try:
        seconds = float(arg)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


class FaultPoints:
    def __init__(self, spec: str | None = None) -> None:
        self.armed = parse_faults(spec if spec is not None else os.environ.get(ENV))

    def hit(self, point: str, batch_id: int | None = None) -> None:
        fault = self.armed.get(point)
        if fault is None or (fault.batch is not None and fault.batch != batch_id):
            return
        if fault.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        seconds = _sleep_seconds(fault.action)
        if seconds is not None:
            time.sleep(seconds)
            return
        raise FaultInjected(f"fault injected at {point} (batch {batch_id})")
