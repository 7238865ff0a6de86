"""The observers a pipeline's driver runs (see :mod:`pipeline.observe.base`).

* :class:`MetricsObserver` -- feeds a :class:`~pipeline.observe.metrics.PipelineMetrics`:
  every outcome, failures and fencing, the query for readiness, the writer epoch, the
  committed offsets and last commit time at start, the journal's pending instants; with
  :meth:`MetricsObserver.serve` also the HTTP endpoint and the lag thread.
* :class:`BatchLogObserver` -- one JSON line per outcome on ``pipeline.batches``
  (:mod:`pipeline.observe.logs`).
* :class:`UnknownFieldsObserver` -- adds up the records that carried fields the schema
  lacks and keeps the count in the run state, for ``ingest status``.

Everything comes from the outcome (``bytes``, ``data_loss``, ``epoch``), the start info
or what the caller passes in; no observer reads a table, so every table format gets the
same metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pipeline.commit.offsets import BrokerOffsets, TopicPartition
from pipeline.commit.types import BatchOutcome
from pipeline.observe.accounting import is_fencing_error
from pipeline.observe.base import MaintenanceResult, Observer, RunInfo
from pipeline.observe.lag import KafkaLagSource, LagFetch
from pipeline.observe.logs import batch_log_line, batch_logger
from pipeline.observe.metrics import PipelineMetrics

if TYPE_CHECKING:
    from pipeline.commit.journal import InstantTimeline
    from pipeline.config import PipelineConfig

# the exporter's log lines keep the logger name they always had
log = logging.getLogger("pipeline.observe.metrics")

__all__ = ["BatchLogObserver", "MetricsObserver", "UnknownFieldsObserver"]


class MetricsObserver(Observer):
    """Feeds ``metrics`` from a pipeline's observer calls. ``journal``: the pipeline's
    instant journal (None in at-least-once mode), read for ``ingest_pending_instants``
    after each outcome and at each lag refresh."""

    def __init__(self, metrics: PipelineMetrics, *, journal: InstantTimeline | None = None):
        self.metrics = metrics
        self._journal = journal

    @classmethod
    def from_config(
        cls,
        cfg: PipelineConfig,
        *,
        format_name: str = "iceberg",
        journal: InstantTimeline | None = None,
    ) -> MetricsObserver:
        metrics = PipelineMetrics.from_config(cfg, format_name)
        s = cfg.source
        metrics.declare_topics(s.topics or list((s.assign or {}).keys()))
        return cls(metrics, journal=journal)

    # -- what the pipeline reports -------------------------------------------------------

    def seed(self, info: RunInfo) -> None:
        """Committed offsets and last commit time as the table has them (both merged:
        never backwards)."""
        m = self.metrics
        if info.committed:
            m.update_committed_offsets(info.committed)
        if info.last_commit_time is not None:
            m.set_last_commit_time(info.last_commit_time)

    def on_start(self, info: RunInfo) -> None:
        self.seed(info)
        self.metrics.set_writer_epoch(info.epoch)
        if info.query is not None:
            self.metrics.watch_query(info.query)
        self._export_pending()

    def on_outcome(self, outcome: BatchOutcome) -> None:
        try:
            self.metrics.observe_outcome(outcome)
            self._export_pending()
        except Exception:
            log.warning("metrics: could not account batch %s", outcome.batch_id, exc_info=True)

    def on_failure(self, exc: BaseException, batch_id: int | None) -> None:
        if batch_id is not None:
            self.metrics.mark_failed(exc, batch_id)  # a fencing error counts as fenced
        elif is_fencing_error(exc):  # starting, or the idle epoch check: fencing only
            self.metrics.mark_fenced(exc)

    def on_maintenance(self, result: MaintenanceResult) -> None:
        self.metrics.files.observe(result)

    def _export_pending(self) -> None:
        if self._journal is not None:
            self.metrics.set_pending_instants(len(self._journal.pending()))

    # -- serving -----------------------------------------------------------------------

    def serve(
        self,
        cfg: PipelineConfig,
        consumer_conf: Mapping[str, Any],
        *,
        initial: Callable[[], RunInfo] | None = None,
    ) -> int:
        """Start the HTTP endpoint and the lag thread (every ``metrics.lagRefreshSeconds``,
        partitions and broker offsets from :class:`KafkaLagSource`); returns the bound
        port. ``initial()`` is called by the lag thread until it succeeds once, before its
        first broker read, to :meth:`seed` the table's state without blocking the caller."""
        port = self.metrics.start()
        interval = cfg.metrics.lag_refresh_seconds
        source = KafkaLagSource(cfg.source, consumer_conf, timeout_s=min(30.0, max(5.0, interval)))
        self.metrics.start_lag_refresh(self._lag_fetch(source, initial), interval)
        return port

    def _lag_fetch(self, source: LagFetch, initial: Callable[[], RunInfo] | None) -> LagFetch:
        seeded = [initial is None]

        def fetch() -> Mapping[TopicPartition, BrokerOffsets]:
            if not seeded[0]:
                assert initial is not None
                self.seed(initial())
                seeded[0] = True
            try:
                self._export_pending()
            except Exception as e:
                log.debug("pending instants unknown: %s", e)
            return source()

        return fetch


class BatchLogObserver(Observer):
    """One JSON line per batch outcome on the ``pipeline.batches`` logger."""

    def __init__(self, pipeline_id: str, epoch: int | None = None) -> None:
        self.pipeline_id = pipeline_id
        self.epoch = epoch  # used when an outcome carries none
        self._log = batch_logger()

    def on_start(self, info: RunInfo) -> None:
        self.epoch = info.epoch

    def on_outcome(self, outcome: BatchOutcome) -> None:
        try:
            self._log.info(batch_log_line(outcome, pipeline_id=self.pipeline_id, epoch=self.epoch))
        except Exception:
            log.warning("could not log batch %s", outcome.batch_id, exc_info=True)


class UnknownFieldsObserver(Observer):
    """This run's records with unknown fields (and their names, bounded), written to the
    run state after each batch that had some."""

    def __init__(self, cfg: PipelineConfig) -> None:
        self.cfg = cfg
        self.records = 0
        self.names: set[str] = set()

    def on_outcome(self, outcome: BatchOutcome) -> None:
        from pipeline.decode.unknown_fields import MAX_NAMES
        from pipeline.observe.runstate import record_unknown_fields

        if not outcome.unknown_field_records:
            return
        self.records += outcome.unknown_field_records
        self.names.update(outcome.unknown_fields)
        record_unknown_fields(self.cfg, self.records, sorted(self.names)[:MAX_NAMES])
