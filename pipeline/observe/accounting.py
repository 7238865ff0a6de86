"""Outcome accounting of :class:`~pipeline.observe.metrics.PipelineMetrics`.

What one coordinator result (a ``BatchOutcome``, recovered instants included), a failed
batch or a fencing does to the counters, the readiness state and the last-commit time.
The outcome and phase label values are defined here. :class:`MetricsState` declares the
registry members and the state that :class:`OutcomeAccounting` and
:class:`~pipeline.observe.lag.LagExport` share; ``PipelineMetrics`` mixes both in and
creates them.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from pipeline.commit.offsets import TopicPartition
from pipeline.commit.types import BatchOutcome, Outcome, Recovered
from pipeline.errors import is_fencing_error, one_line

# the exporter's log lines keep the logger name they always had
log = logging.getLogger("pipeline.observe.metrics")

__all__ = [
    "COMMITTING_OUTCOMES",
    "FAILED",
    "FENCED",
    "OTHER",
    "OUTCOMES",
    "PHASES",
    "ROLLED_BACK",
    "MetricsState",
    "OutcomeAccounting",
    "is_fencing_error",
    "split_by_weight",
]

#: ``ingest_commits_total{outcome}`` values besides a batch's :class:`Outcome`: an instant
#: rolled back by recovery, a fenced writer, a failed batch.
ROLLED_BACK, FENCED, FAILED = Recovered.ROLLED_BACK.value, "fenced", "failed"
#: Values of ``ingest_commits_total{outcome}``.
OUTCOMES: tuple[str, ...] = (*(o.value for o in Outcome), ROLLED_BACK, FENCED, FAILED)
#: Outcomes that made records visible in the table.
COMMITTING_OUTCOMES = frozenset({Outcome.COMMITTED, Outcome.RECOMMITTED})
#: Values of ``ingest_phase_duration_seconds{phase}`` (anything else is dropped).
PHASES: tuple[str, ...] = ("request", "write", "precommit", "commit", "recovery")
#: Label value standing in for topics / partitions beyond the cardinality caps.
OTHER = "_other"


def split_by_weight(total: int, weights: Mapping[str, int]) -> dict[str, int]:
    """``total`` spread over keys proportionally to ``weights`` (largest remainder: the
    parts are non-negative integers summing exactly to ``total``)."""
    keys = sorted(k for k, w in weights.items() if w > 0) or sorted(weights)
    if not keys or total <= 0:
        return {}
    if len(keys) == 1:
        return {keys[0]: total}
    wsum = sum(max(0, weights[k]) for k in keys)
    if wsum <= 0:
        return {keys[0]: total}
    exact = {k: total * max(0, weights[k]) / wsum for k in keys}
    out = {k: math.floor(v) for k, v in exact.items()}
    rest = total - sum(out.values())
    for k in sorted(keys, key=lambda k: (out[k] - exact[k], k))[:rest]:
        out[k] += 1
    return {k: v for k, v in out.items() if v}


class MetricsState:
    """Registry members and state shared by the mixins of ``PipelineMetrics`` (which
    creates all of them in its ``__init__``)."""

    records: Counter
    bytes: Counter
    dead_letter_records: Counter
    table_records: Counter
    table_names: dict[str, str]
    unknown_field_records: Counter
    data_loss_records: Counter
    overlap_dropped_records: Counter
    batches: Counter
    commits: Counter
    phase_duration: Histogram
    consumer_lag: Gauge
    lag_refreshed: Gauge
    lag_refresh_errors: Counter
    last_commit: Gauge
    last_batch_id: Gauge
    pending_instants: Gauge
    writer_epoch: Gauge
    writer_fenced: Gauge
    max_topics: int
    max_lag_series: int
    started_at: float
    _clock: Callable[[], float]
    _lock: threading.RLock
    _topics: set[str]
    _warned: set[str]
    _last_commit_ts: float | None
    _failed: str | None
    _failed_exc: BaseException | None
    _fenced: str | None
    _observed_any: bool

    def update_committed_offsets(self, committed: Mapping[TopicPartition, int]) -> None:
        raise NotImplementedError  # LagExport

    def declare_topics(self, topics: Iterable[str]) -> None:
        """Create the per-topic series at 0 (so the first increase is seen by rate())."""
        with self._lock:
            for t in topics:
                self._topic(t)

    def _topic(self, topic: str) -> str:
        with self._lock:
            if topic not in self._topics:
                if topic != OTHER and len(self._topics) >= self.max_topics:
                    self._warn_once(
                        "topics", "more than %d topics: the rest as %r", self.max_topics, OTHER
                    )
                    topic = OTHER
                if topic not in self._topics:
                    self._topics.add(topic)
                    self.records.labels(topic)
                    self.bytes.labels(topic)
                    self.data_loss_records.labels(topic)
            return topic

    def _warn_once(self, key: str, msg: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(msg, *args)


class OutcomeAccounting(MetricsState):
    """Batches, phases, failures and fencing (methods of ``PipelineMetrics``)."""

    def observe_outcome(self, outcome: BatchOutcome) -> None:
        """Account one coordinator result (recovered instants too).

        ``committed`` / ``recommitted``: records, bytes, dead letters, data loss, last
        commit time, committed offsets (lag). Every outcome is one more batch and
        ``commits_total{outcome}``; rolled-back instants listed in ``recovered`` count
        too, and the phase timings. Clears a previous failure (readiness). Bytes: the
        main-table data-file bytes, split over the topics like the records.
        """
        kind = Outcome(outcome.outcome)
        recovered = outcome.recovered
        with self._lock:
            first, self._observed_any = not self._observed_any, True
        # The coordinator recovers on the first batch of a run; later batches carry a
        # zero "recovery" timing that would drown the real recoveries in the histogram.
        ran_recovery = first or bool(recovered) or kind is Outcome.RECOMMITTED
        for phase, seconds in outcome.timings.items():
            if phase != "recovery" or ran_recovery:
                self.observe_phase(phase, seconds)
        for _instant, action in recovered:
            if action == Recovered.ROLLED_BACK or (
                action == Recovered.RECOMMITTED and kind is not Outcome.RECOMMITTED
            ):
                self.commits.labels(action).inc()
        if outcome.epoch is not None:
            self.set_writer_epoch(outcome.epoch)
        self.commits.labels(kind).inc()
        self.batches.inc()
        self.last_batch_id.set(outcome.batch_id)
        with self._lock:
            self._failed, self._failed_exc = None, None
        if kind not in COMMITTING_OUTCOMES:
            return

        records = outcome.records
        weights: dict[str, int] = {}
        for tp, (start, end) in outcome.ranges.items():
            weights[tp.topic] = weights.get(tp.topic, 0) + max(0, end - start)
        per_topic = split_by_weight(records, weights)
        if records and not per_topic:
            per_topic = {OTHER: records}
        for topic, n in per_topic.items():
            self.records.labels(self._topic(topic)).inc(max(0, n))
        for topic, n in split_by_weight(outcome.bytes, per_topic or weights).items():
            self.bytes.labels(self._topic(topic)).inc(max(0, n))
        for name, n in outcome.table_records.items():
            self.table_records.labels(self.table_names.get(name, name)).inc(max(0, n))
        self.dead_letter_records.inc(max(0, outcome.dead_letter_records))
        self.unknown_field_records.inc(max(0, outcome.unknown_field_records))
        self.overlap_dropped_records.inc(max(0, outcome.overlap_dropped))
        for tp, (start, end) in outcome.data_loss.items():
            self.record_data_loss(tp.topic, end - start)
        self.set_last_commit_time(self._clock())
        if outcome.committed:
            self.update_committed_offsets(outcome.committed)

    def observe_phase(self, phase: str, seconds: float) -> None:
        """One duration of a coordinator phase (``PHASES``; others are dropped)."""
        if phase not in PHASES:
            self._warn_once(f"phase:{phase}", "phase %r is not exported (known: %s)", phase, PHASES)
            return
        if seconds >= 0 and math.isfinite(seconds):
            self.phase_duration.labels(phase).observe(seconds)

    @contextlib.contextmanager
    def phase_timer(self, phase: str) -> Iterator[None]:
        """``with metrics.phase_timer("recovery"): ...`` observes the block's duration
        (also when it raises)."""
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.observe_phase(phase, time.monotonic() - t0)

    def record_data_loss(self, topic: str, records: int) -> None:
        """Records of ``topic`` skipped because retention deleted them."""
        if records > 0:
            self.data_loss_records.labels(self._topic(topic)).inc(records)

    def set_pending_instants(self, n: int) -> None:
        self.pending_instants.set(max(0, n))

    def set_writer_epoch(self, epoch: int) -> None:
        self.writer_epoch.set(epoch)

    def set_last_commit_time(self, unix_seconds: float) -> None:
        """Last commit time; never moves backwards."""
        with self._lock:
            if self._last_commit_ts is None or unix_seconds > self._last_commit_ts:
                self._last_commit_ts = unix_seconds
                self.last_commit.set(unix_seconds)

    def last_commit_age(self) -> float:
        with self._lock:
            since = self._last_commit_ts if self._last_commit_ts is not None else self.started_at
        return max(0.0, self._clock() - since)

    # -- failures and readiness --------------------------------------------------------

    def mark_failed(self, exc: BaseException | str, batch_id: int | None = None) -> None:
        """A batch (or recovery) failed: ``commits_total{failed}`` +1 and not ready until
        the next successful outcome. A fencing error counts as :meth:`mark_fenced`. The
        same exception object reported twice counts once."""
        if isinstance(exc, BaseException) and is_fencing_error(exc):
            self.mark_fenced(exc)
            return
        with self._lock:
            if isinstance(exc, BaseException) and exc is self._failed_exc:
                return
            what = f"batch {batch_id}" if batch_id is not None else "last batch"
            self._failed = f"{what} failed: {one_line(exc)}"
            self._failed_exc = exc if isinstance(exc, BaseException) else None
        self.commits.labels(FAILED).inc()

    def mark_fenced(self, reason: BaseException | str = "") -> None:
        """A newer writer epoch owns the table: ``commits_total{fenced}`` +1 (once),
        ``writer_fenced`` 1, not ready from now on."""
        with self._lock:
            if self._fenced is not None:
                return
            self._fenced = one_line(reason) if reason else "a newer writer epoch owns the table"
        self.writer_fenced.set(1)
        self.commits.labels(FENCED).inc()
