"""Named fault-injection points for crash tests and drills.

Armed by ``INGEST_FAULT=<point>:<action>[@<batch>][,…]`` in the environment or the config
key ``faults`` (same syntax). ``action`` is ``kill`` (SIGKILL of this process: no
``finally``, no flush, exactly like a lost pod), ``raise`` (``FaultInjected``) or
``sleep=<seconds>`` (a slow step: the batch pauses there, then carries on; stop tests land
a signal inside a batch with it).
``@<batch>`` limits the fault to one batch id. Unarmed points cost a dict lookup.

Points (:class:`FaultPoint`; driver unless noted):
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

An armed fault is a :class:`Fault`; :func:`parse_faults` and :func:`format_faults` are the
one decode/encode pair of the syntax above (the driver encodes the faults the tasks act
on, the tasks decode them).
"""

from __future__ import annotations

import enum
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass

from pipeline.errors import ConfigError, PipelineError


class FaultPoint(enum.StrEnum):
    """Where a fault may be injected (the value is the name ``INGEST_FAULT`` uses)."""

    AFTER_REQUESTED = "after-requested"
    MID_WRITE = "mid-write"
    AFTER_WRITE = "after-write"
    AFTER_PRECOMMIT = "after-precommit"
    AFTER_DEAD_LETTER_COMMIT = "after-dead-letter-commit"
    BETWEEN_TABLE_COMMITS = "between-table-commits"
    AFTER_COMMIT = "after-commit"
    AFTER_COMMIT_BEFORE_CHECKPOINT = "after-commit-before-checkpoint"
    DURING_ROLLBACK = "during-rollback"
    COMPACTION_AFTER_WRITE = "compaction-after-write"
    COMPACTION_AFTER_COMMIT = "compaction-after-commit"
    AFTER_SCHEMA_CHANGE = "after-schema-change"


class FaultAction(enum.StrEnum):
    KILL = "kill"
    RAISE = "raise"
    SLEEP = "sleep"  # spelled ``sleep=<seconds>``


POINTS: tuple[str, ...] = tuple(p.value for p in FaultPoint)
ENV = "INGEST_FAULT"


class FaultInjected(PipelineError):
    code = "fault-injected"


@dataclass(frozen=True)
class Fault:
    """One armed fault: what happens at ``point`` (in batch ``batch`` only, when set)."""

    point: FaultPoint
    action: FaultAction = FaultAction.KILL
    batch: int | None = None
    seconds: float = 0.0  # FaultAction.SLEEP only

    def spec(self) -> str:
        """This fault in the ``INGEST_FAULT`` syntax (``parse_faults`` reads it back)."""
        action = f"sleep={self.seconds:g}" if self.action is FaultAction.SLEEP else self.action
        batch = f"@{self.batch}" if self.batch is not None else ""
        return f"{self.point}:{action}{batch}"


def parse_faults(spec: str | None) -> dict[FaultPoint, Fault]:
    """The faults ``spec`` arms (``ConfigError`` on an unknown point or action)."""
    out: dict[FaultPoint, Fault] = {}
    for item in (spec or "").split(","):
        item = item.strip()
        if not item:
            continue
        head, _, batch = item.partition("@")
        name, _, action = head.partition(":")
        if name not in POINTS:
            raise ConfigError(f"fault point {name!r} unknown; allowed: {', '.join(POINTS)}")
        point = FaultPoint(name)
        action = action or FaultAction.KILL
        seconds = _sleep_seconds(action)
        if action not in (FaultAction.KILL, FaultAction.RAISE) and seconds is None:
            raise ConfigError(
                f"fault action {action!r} unknown; allowed: kill, raise, sleep=<seconds>"
            )
        kind = FaultAction.SLEEP if seconds is not None else FaultAction(action)
        try:
            at = int(batch) if batch else None
        except ValueError:
            raise ConfigError(f"fault {item!r}: batch after @ must be an integer") from None
        out[point] = Fault(point, kind, at, seconds or 0.0)
    return out


def format_faults(faults: Iterable[Fault]) -> str | None:
    """``faults`` in the ``INGEST_FAULT`` syntax; None when there is none."""
    return ",".join(f.spec() for f in faults) or None


def _sleep_seconds(action: str) -> float | None:
    name, _, arg = action.partition("=")
    if name != FaultAction.SLEEP:
        return None
    try:
        seconds = float(arg)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


class FaultPoints:
    """The faults armed in this process (``spec``, else ``INGEST_FAULT``)."""

    def __init__(self, spec: str | None = None) -> None:
        self.armed = parse_faults(spec if spec is not None else os.environ.get(ENV))

    def at(self, *points: FaultPoint) -> list[Fault]:
        """The armed faults of ``points`` (e.g. those the workers' tasks act on)."""
        return [f for p in points if (f := self.armed.get(p)) is not None]

    def hit(self, point: FaultPoint, batch_id: int | None = None) -> None:
        fault = self.armed.get(point)
        if fault is None or (fault.batch is not None and fault.batch != batch_id):
            return
        if fault.action is FaultAction.KILL:
            os.kill(os.getpid(), signal.SIGKILL)
        if fault.action is FaultAction.SLEEP:
            time.sleep(fault.seconds)
            return
        raise FaultInjected(f"fault injected at {point} (batch {batch_id})")
