"""Structured logs: one JSON line per batch on the logger ``pipeline.batches``.

The line is the log record's *message*, so any handler can carry it; for log shippers
that want bare JSON lines, :func:`install_json_batch_handler` writes the message alone
(no timestamp/level prefix) to a stream and stops propagation to the root logger.

A line looks like (one line, keys in this order)::

    {"ts": "2024-06-01T12:00:00.123Z", "event": "batch", "pipeline_id": "events",
     "batch_id": 7, "instant": null, "outcome": "committed", "records": 1480,
     "dead_letter_records": 20, "bytes": 81234, "files": 3, "partitions": 4,
     "epoch": 0, "duration_seconds": 1.234,
     "phases_seconds": {"dedupe": 0.01, "write": 1.1, "commit": 0.12}}
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from pipeline.commit.types import BatchOutcome, Outcome

BATCH_LOGGER = "pipeline.batches"
#: Outcomes whose line carries ``bytes`` (the others commit no data files).
_DATA_OUTCOMES = frozenset({Outcome.COMMITTED, Outcome.RECOMMITTED})

__all__ = ["BATCH_LOGGER", "batch_log_line", "batch_logger", "install_json_batch_handler"]


def batch_logger() -> logging.Logger:
    return logging.getLogger(BATCH_LOGGER)


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def batch_log_line(
    outcome: BatchOutcome,
    *,
    pipeline_id: str | None = None,
    epoch: int | None = None,
    now: datetime | None = None,
) -> str:
    """The JSON line for one batch outcome: its ``batch_id``, ``outcome``, ``instant``,
    ``records``, ``dead_letter_records``, ``files``, the count of its ``ranges``, its
    ``timings`` (phase -> seconds), ``bytes`` (null for outcomes that commit no data)
    and ``epoch`` (``epoch`` when the outcome has none)."""
    timings = outcome.timings
    ts = (now or datetime.now(UTC)).astimezone(UTC)
    line: dict[str, Any] = {
        "ts": ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z",
        "event": "batch",
        "pipeline_id": pipeline_id,
        "batch_id": outcome.batch_id,
        "instant": outcome.instant,
        "outcome": str(outcome.outcome),
        "records": outcome.records,
        "dead_letter_records": outcome.dead_letter_records,
        "bytes": outcome.bytes if outcome.outcome in _DATA_OUTCOMES else None,
        "files": outcome.files,
        "partitions": len(outcome.ranges),
        "epoch": outcome.epoch if outcome.epoch is not None else epoch,
        "duration_seconds": round(sum(timings.values()), 6),
        "phases_seconds": {k: round(v, 6) for k, v in timings.items()},
    }
    return json.dumps(line, separators=(", ", ": "), default=str)


def install_json_batch_handler(stream: TextIO | None = None) -> logging.Handler:
    """Write ``pipeline.batches`` records as bare JSON lines to ``stream`` (stdout).

    Stops propagation so the root logger's format does not duplicate them. Returns the
    handler (remove it with ``batch_logger().removeHandler(h)``).
    """
    handler = logging.StreamHandler(stream or sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = batch_logger()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return handler
