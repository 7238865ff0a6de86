"""Consumer lag of :class:`~pipeline.observe.metrics.PipelineMetrics`.

:class:`LagExport` (mixed into ``PipelineMetrics``) merges the table's committed end
offsets and the broker's log offsets into ``ingest_consumer_lag_records`` and runs the
background thread that refreshes the broker side every ``metrics.lagRefreshSeconds``, also
while no batch runs. :class:`KafkaLagSource` is that thread's ``fetch()``: the partitions
a source config selects and their broker offsets.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pipeline.commit.offsets import BrokerOffsets, TopicPartition
from pipeline.errors import one_line
from pipeline.observe.accounting import OTHER, MetricsState

if TYPE_CHECKING:
    from pipeline.config import SourceConfig

# the exporter's log lines keep the logger name they always had
log = logging.getLogger("pipeline.observe.metrics")

__all__ = ["KafkaLagSource", "LagExport", "LagFetch"]

LagFetch = Callable[[], Mapping[TopicPartition, BrokerOffsets]]


class LagExport(MetricsState):
    """Lag per partition and its refresh thread (methods of ``PipelineMetrics``)."""

    _committed: dict[TopicPartition, int]
    _broker: dict[TopicPartition, BrokerOffsets]
    _lag_labels: set[tuple[str, str]]
    _stop: threading.Event
    _lag_thread: threading.Thread | None

    def update_committed_offsets(self, committed: Mapping[TopicPartition, int]) -> None:
        """The table's cumulative committed end offsets (a ``PartitionOffsets``); merged
        per partition, never backwards. Recomputes lag with the last broker offsets."""
        with self._lock:
            for tp, off in committed.items():
                tp = TopicPartition(tp[0], int(tp[1]))
                if off > self._committed.get(tp, -1):
                    self._committed[tp] = int(off)
            self._recompute_lag()

    def update_broker_offsets(self, offsets: Mapping[TopicPartition, BrokerOffsets]) -> None:
        """Broker log start / end of every partition the pipeline reads (the complete
        set: partitions missing here stop being exported)."""
        with self._lock:
            self._broker = {TopicPartition(tp[0], int(tp[1])): o for tp, o in offsets.items()}
            for tp in self._broker:
                self._topic(tp.topic)
            self._recompute_lag()
        self.lag_refreshed.set(self._clock())

    def lag(self) -> dict[TopicPartition, int]:
        """Current lag per partition (what the gauge exports, before capping)."""
        with self._lock:
            return self._lag_values()

    def _lag_values(self) -> dict[TopicPartition, int]:
        out = {}
        for tp, b in self._broker.items():
            committed = self._committed.get(tp)
            base = committed if committed is not None else b.low
            out[tp] = max(0, b.high - base)
        return out

    def _recompute_lag(self) -> None:
        # The first max_lag_series partitions (sorted) get a series each; the rest are
        # summed per topic into partition="_other" (totals stay right).
        values: dict[tuple[str, str], int] = {}
        series = 0
        for tp, lag in sorted(self._lag_values().items()):
            topic = self._topic(tp.topic)
            key = (topic, str(tp.partition))
            if key not in values:
                if series >= self.max_lag_series:
                    key = (topic, OTHER)
                else:
                    series += 1
            values[key] = values.get(key, 0) + lag
        for key in self._lag_labels - set(values):
            with contextlib.suppress(KeyError):
                self.consumer_lag.remove(*key)
        for key, lag in values.items():
            self.consumer_lag.labels(*key).set(lag)
        self._lag_labels = set(values)

    def start_lag_refresh(self, fetch: LagFetch, interval_s: float) -> None:
        """Call ``fetch()`` now and every ``interval_s`` on a daemon thread and export the
        lag (:meth:`update_broker_offsets`). A failing fetch counts
        ``lag_refresh_errors_total`` and keeps the previous values."""
        if self._lag_thread is not None:
            return
        self._stop.clear()

        def loop() -> None:
            failures = 0
            while not self._stop.is_set():
                try:
                    offsets = fetch()
                except Exception as e:
                    failures += 1
                    self.lag_refresh_errors.inc()
                    if failures == 1 or failures % 20 == 0:
                        log.warning("lag refresh failed (%d in a row): %s", failures, one_line(e))
                else:
                    if failures:
                        log.info("lag refresh works again after %d failure(s)", failures)
                    failures = 0
                    self.update_broker_offsets(offsets)
                self._stop.wait(interval_s)

        self._lag_thread = threading.Thread(target=loop, name="ingest-metrics-lag", daemon=True)
        self._lag_thread.start()

    def stop_lag_refresh(self) -> None:
        """Stop the refresh thread (idempotent)."""
        self._stop.set()
        thread, self._lag_thread = self._lag_thread, None
        if thread is not None:
            thread.join(timeout=10)


class KafkaLagSource:
    """``fetch()`` for :meth:`LagExport.start_lag_refresh`: the partitions ``source``
    selects (``assign``, ``topics`` or ``topicPattern``, re-listed at every call) and
    their broker offsets, read with the consumer config ``consumer_conf``."""

    def __init__(
        self, source: SourceConfig, consumer_conf: Mapping[str, Any], timeout_s: float
    ) -> None:
        self._source = source
        self._conf = dict(consumer_conf)
        self._timeout = timeout_s
        self._md: Any = None

    def partitions(self) -> list[TopicPartition]:
        s = self._source
        if s.assign:
            return sorted(TopicPartition(t, p) for t, ps in s.assign.items() for p in ps)
        md = self._metadata()
        topics = list(s.topics) if s.topics else md.topics_matching(s.topic_pattern or "")
        return md.partitions_of(topics) if topics else []

    def _metadata(self) -> Any:
        if self._md is None:
            from pipeline.kafka.client import KafkaMetadata

            self._md = KafkaMetadata(self._conf, timeout_s=self._timeout)
        return self._md

    def __call__(self) -> Mapping[TopicPartition, BrokerOffsets]:
        tps = self.partitions()
        return dict(self._metadata().offsets(tps)) if tps else {}
