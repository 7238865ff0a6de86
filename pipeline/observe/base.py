"""How a pipeline reports to its observers (metrics exporter, batch log, progress).

:class:`~pipeline.app.Pipeline` keeps an :class:`Observers` list and calls it at fixed
points; nothing is patched into the pipeline:

* ``on_start(info)`` -- the streaming query started (``info``: :class:`RunInfo`);
* ``on_outcome(outcome)`` -- every ``BatchOutcome`` of the coordinator (instants it
  recovered are listed in ``outcome.recovered``);
* ``on_failure(exc, batch_id)`` -- a batch failed (``batch_id``), or starting the query
  or the idle epoch check failed (``batch_id`` None); fencing errors included;
* ``on_stop()`` -- the query ended (normally or not);
* ``on_maintenance(result)`` -- the background maintenance measured a table's files or
  compacted or cleaned one (:mod:`pipeline.commit.maintenance` results; called from the
  maintenance thread).

An observer's own exception is logged and never fails a batch or the run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from pipeline.commit.maintenance import CompactionResult, FileStats, OrphanResult
from pipeline.commit.offsets import TopicPartition
from pipeline.commit.types import BatchOutcome

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery

MaintenanceResult = CompactionResult | OrphanResult | FileStats

log = logging.getLogger(__name__)

__all__ = ["Observer", "Observers", "OutcomeCallback", "PipelineObserver", "RunInfo"]


@dataclass(frozen=True)
class RunInfo:
    """What observers learn when the query has started."""

    pipeline_id: str
    #: the table's committed end offsets of the pipeline (empty: none yet)
    committed: Mapping[TopicPartition, int] = field(default_factory=dict)
    #: Unix time of the pipeline's newest commit in the table (None: none)
    last_commit_time: float | None = None
    #: the writer epoch this driver commits with (0 in at-least-once mode)
    epoch: int = 0
    #: the ``StreamingQuery`` (``isActive`` / ``exception()``), for readiness
    query: StreamingQuery | None = None


class PipelineObserver(Protocol):
    def on_start(self, info: RunInfo) -> None: ...

    def on_outcome(self, outcome: BatchOutcome) -> None: ...

    def on_failure(self, exc: BaseException, batch_id: int | None) -> None: ...

    def on_stop(self) -> None: ...

    def on_maintenance(self, result: MaintenanceResult) -> None: ...


class Observer:
    """An observer that ignores everything: subclass it and override what you need."""

    def on_start(self, info: RunInfo) -> None:
        pass

    def on_outcome(self, outcome: BatchOutcome) -> None:
        pass

    def on_failure(self, exc: BaseException, batch_id: int | None) -> None:
        pass

    def on_stop(self) -> None:
        pass

    def on_maintenance(self, result: MaintenanceResult) -> None:
        pass


class OutcomeCallback(Observer):
    """``fn(outcome)`` for every batch outcome."""

    def __init__(self, fn: Callable[[BatchOutcome], None]) -> None:
        self._fn = fn

    def on_outcome(self, outcome: BatchOutcome) -> None:
        self._fn(outcome)


class Observers:
    """The observers of one pipeline, called in the order they were added."""

    def __init__(self) -> None:
        self._observers: list[PipelineObserver] = []

    def add(self, observer: PipelineObserver) -> None:
        self._observers.append(observer)

    def remove(self, observer: PipelineObserver) -> None:
        if observer in self._observers:
            self._observers.remove(observer)

    def __iter__(self) -> Iterator[PipelineObserver]:
        return iter(list(self._observers))

    def __len__(self) -> int:
        return len(self._observers)

    def _each(self, what: str, call: Callable[[PipelineObserver], None]) -> None:
        for observer in list(self._observers):
            try:
                call(observer)
            except Exception:
                log.warning("observer %r failed in %s", observer, what, exc_info=True)

    def start(self, info: RunInfo) -> None:
        self._each("on_start", lambda o: o.on_start(info))

    def outcome(self, outcome: BatchOutcome) -> None:
        self._each(
            f"on_outcome (batch {outcome.batch_id})",
            lambda o: o.on_outcome(outcome),
        )

    def failure(self, exc: BaseException, batch_id: int | None = None) -> None:
        self._each("on_failure", lambda o: o.on_failure(exc, batch_id))

    def stop(self) -> None:
        self._each("on_stop", lambda o: o.on_stop())

    def maintenance(self, result: MaintenanceResult) -> None:
        self._each("on_maintenance", lambda o: o.on_maintenance(result))
