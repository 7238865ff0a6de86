"""Builds and runs the streaming query described by a ``PipelineConfig``.

    ingest_kafka source ──▶ foreachBatch ──▶ Coordinator
                                 │ mapInArrow: workers read, decode and stage files
                                 ▼
                      one table commit per batch

The driver process holds the coordinator and the metrics registry; the source's planner
and the writers run in Spark's Python workers. :mod:`pipeline.runtime.composition` builds
the driver's jobs, one per module of :mod:`pipeline.runtime`: the checkpoint probe, the
source settings (broker check, options), the batch runner, telemetry (metrics, batch
log), the fence guard, graceful stop and the warm-standby lease; :class:`Pipeline` runs
them (start, the run loop, stop); background maintenance is
:mod:`pipeline.maintenance_scheduler`.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from pipeline.commit.faults import FaultPoint
from pipeline.config import PipelineConfig
from pipeline.observe.base import PipelineObserver, RunInfo
from pipeline.runtime.checkpoint_probe import needs_spark, probe_checkpoint_location
from pipeline.runtime.composition import check_locally, compose
from pipeline.runtime.stats import RunStats
from pipeline.runtime.streams import start_stream, trigger_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from pipeline.formats.base import PipelineTables
    from pipeline.maintenance_scheduler import BackgroundMaintenance
    from pipeline.observe.metrics import PipelineMetrics

log = logging.getLogger(__name__)

__all__ = ["Pipeline", "RunStats", "check_locally"]


class Pipeline:
    """Runs the parts :func:`~pipeline.runtime.composition.compose` builds."""

    def __init__(self, cfg: PipelineConfig, spark: SparkSession | None = None) -> None:
        parts = compose(cfg, spark)
        self.cfg = parts.cfg
        self.faults = parts.faults
        self.format = parts.format
        self.tables: PipelineTables = parts.tables
        self.source = parts.source
        self._session = parts.session
        self.stats = parts.stats
        self.observers = parts.observers
        self.timeline = parts.timeline
        self.coordinator = parts.coordinator
        self.telemetry = parts.telemetry
        self.fence = parts.fence
        self.stopping = parts.stopping
        self.batches = parts.batches
        self.lease = parts.lease
        self._broker_checked = False

    # -- what other code uses (CLI, tools, tests) ---------------------------------------
    @property
    def spark(self) -> SparkSession:
        return self._session.get()

    @property
    def metrics(self) -> PipelineMetrics | None:
        """The attached ``PipelineMetrics`` (:meth:`attach_metrics`), else None."""
        return self.telemetry.metrics

    def check_broker(self) -> None:
        self.source.check_broker()

    def process_batch(self, df: DataFrame, batch_id: int) -> None:
        """foreachBatch: one batch through the coordinator (:mod:`pipeline.runtime.batches`)."""
        self.batches.process_batch(df, batch_id)

    def add_observer(self, observer: PipelineObserver) -> None:
        """``observer`` is told of the query's start, every batch outcome, failures and the
        query's end (:mod:`pipeline.observe.base`)."""
        self.observers.add(observer)

    def run_info(self, query: StreamingQuery | None = None) -> RunInfo:
        """The pipeline's committed state as its main table(s) hold it (any format)."""
        return self.telemetry.run_info(query)

    def attach_metrics(self, *, serve: bool | None = None) -> PipelineMetrics:
        """Export this pipeline's metrics: a ``PipelineMetrics`` fed by a metrics observer,
        plus the JSON batch log line (``pipeline.batches``); returns the metrics.

        ``serve`` (default ``cfg.metrics.enabled``): start the HTTP endpoint (``/metrics``,
        ``/healthz``, ``/readyz``) and the lag thread (every ``cfg.metrics.lagRefreshSeconds``;
        its first refresh reads the table's committed offsets and last commit time).
        Call ``stop()`` on the returned metrics when done (:meth:`run` does it for the
        metrics it attached itself)."""
        return self.telemetry.attach(serve=serve)

    def request_stop(self) -> None:
        """Ask ``run()`` to stop gracefully: the batch in progress finishes its commit (for
        at most ``run.stopTimeoutSeconds``), then the query stops between batches and
        ``run()`` returns its stats. Only sets a flag, so it is safe in a signal handler
        (never raises into a py4j call) and from any thread; repeated calls are no-ops."""
        self.stopping.request()

    # -- the query ----------------------------------------------------------------------
    def start(self) -> StreamingQuery:
        """Start the streaming query; observers get ``on_start`` (``on_failure`` when it
        cannot start, e.g. fenced)."""
        try:
            query = self._start_query()
        except Exception as e:
            self.observers.failure(e, None)
            raise
        if len(self.observers):
            self.observers.start(self.telemetry.start_info(query))
        return query

    def _start_query(self) -> StreamingQuery:
        if not self._broker_checked:  # run() already checked it
            self.check_broker()
        location = self.cfg.checkpoint_location
        if needs_spark(location, self.cfg.spark.conf):  # a remote checkpoint location:
            probe_checkpoint_location(location, spark=self.spark)  # before the epoch
        # a column change no restart may make is refused here, before any side effect
        planned = self.tables.schema_changes()
        if self.timeline is not None:
            # Fence before Spark starts: a zombie of an earlier run cannot commit past here.
            self.stats.epoch = self.coordinator.acquire_epoch(owner=socket.gethostname())
        if planned:
            self._evolve_schema()
        if not self.lease.warm:  # a standby warmed its workers up while it waited
            from pipeline.runtime.batch_writes import planned_path
            from pipeline.spark.session import warm_up_in_background

            path = planned_path(self.cfg, self.source.reader, self.tables, start_known=True)
            warm_up_in_background(self.spark, rdd=path.reads_ranges, sql=not path.reads_ranges)
        return start_stream(
            self.spark,
            self.source.reader.format,
            self.source.query_options(),
            self.process_batch,
            checkpoint=location,
            name=f"ingest-{self.cfg.id}",
            trigger=trigger_of(self.cfg),
        )

    def _evolve_schema(self) -> None:
        """Apply the configured column changes (docs/design.md invariant 13): after the
        epoch (a zombie of the old schema is fenced), before the query's first batch."""
        from pipeline.columns.evolution import describe

        applied = self.tables.evolve_schema()
        self.faults.hit(FaultPoint.AFTER_SCHEMA_CHANGE, None)
        if applied:
            log.info(
                "pipeline %s: table columns evolved: %s",
                self.cfg.id,
                "; ".join(describe(c) for c in applied),
            )

    def run(
        self,
        until: Callable[[RunStats], bool] | None = None,
        tick: Callable[[RunStats], None] | None = None,
        timeout_s: float | None = None,
    ) -> RunStats:
        """Run until the query ends (available-now/once), ``until`` holds, or a timeout.

        The run state (``running`` once the query started, then ``stopped`` with the
        error line) is kept next to the checkpoint for ``ingest status``."""
        from pipeline.observe.observers import UnknownFieldsObserver
        from pipeline.observe.runstate import error_line, record_run_state

        try:
            self.check_broker()  # fail fast, before any endpoint or Spark starts
            self._broker_checked = True
            # started here, stopped here; metrics attached by the caller stay up
            attached = self.cfg.metrics.enabled and self.metrics is None
            if attached:
                self.attach_metrics()  # /metrics, /healthz, /readyz, lag thread, batch log
            unknown = UnknownFieldsObserver(self.cfg)  # for ingest status, via the run state
            self.observers.add(unknown)
            try:
                stats = self._run(until, tick, timeout_s)
            finally:
                self.observers.remove(unknown)
                if attached:
                    self.telemetry.detach()
        except BaseException as e:
            record_run_state(self.cfg, "stopped", error_line(e))
            raise
        record_run_state(self.cfg, "stopped", None)
        return stats

    def _run(
        self,
        until: Callable[[RunStats], bool] | None,
        tick: Callable[[RunStats], None] | None,
        timeout_s: float | None,
    ) -> RunStats:
        if self.stopping.requested or not self.lease.acquire(self.metrics):
            self.stats.stop_requested = True  # stopped before the query started
            return self.stats
        try:
            return self._run_query(until, tick, timeout_s)
        finally:
            self.lease.release()

    def _run_query(
        self,
        until: Callable[[RunStats], bool] | None,
        tick: Callable[[RunStats], None] | None,
        timeout_s: float | None,
    ) -> RunStats:
        query = self.start()
        self.stopping.query = query
        self.telemetry.record_running()
        maintenance = self._start_maintenance()
        deadline = time.monotonic() + timeout_s if timeout_s else None
        self.fence.arm()
        try:
            while query.isActive:
                if self.stopping.requested:
                    self.stopping.stop_between_batches(query, self.lease.keep)
                    break
                try:
                    # seconds, as a float: pyspark's hint says int, its code multiplies
                    query.awaitTermination(0.5)  # type: ignore[arg-type]
                except Exception as e:  # a batch refused while halting ends the query
                    if not self.stopping.is_halt(e):
                        self._raise_failure(e)
                    break
                self.lease.keep()
                if tick:
                    tick(self.stats)
                if until is not None and until(self.stats):
                    break
                if deadline is not None and time.monotonic() > deadline:
                    break
                self.fence.check_idle()
            exc = query.exception()
            if exc is not None and not self.stopping.is_halt(exc):
                self._raise_failure(exc)
        finally:
            # a stop cut short leaves its batch running: stopping the query under it would
            # cancel its Spark jobs and fail it noisily; the process's exit ends it instead
            if query.isActive and not self.stats.stop_cut_short:
                query.stop()
            if maintenance is not None:
                maintenance.stop()
            self.observers.stop()
        return self.stats

    def _raise_failure(self, error: BaseException) -> NoReturn:
        """The query's failure, as the reader's one-line error when it names it."""
        explained = self.source.reader.explain_failure(error)
        if explained is not None:
            raise explained from error
        raise error

    def _start_maintenance(self) -> BackgroundMaintenance | None:
        """Background compaction, orphan cleanup and file statistics (``maintenance.*``),
        on tables of its own; never fails the run."""
        from pipeline.commit.faults import FaultPoints
        from pipeline.maintenance_scheduler import start_background

        try:
            return start_background(
                self.cfg,
                lambda: self.format.open_tables(self.cfg, FaultPoints("")),
                epoch=self.coordinator.epoch if self.timeline is not None else None,
                report=self.observers.maintenance,
                file_stats=self.metrics is not None,
                faults=self.faults,  # compaction-after-write / -commit (drills)
            )
        except Exception as e:
            log.warning("background maintenance not started: %s", e)
            return None


def _built_from(pipeline: Pipeline) -> tuple[object, ...]:
    """The registry schema ids (value, key) and the tables a start was built from."""
    dec = pipeline.cfg.decode
    return (
        dec.registry.schema_id if dec.registry is not None else None,
        dec.key.schema_id if dec.key is not None else None,
        tuple(name for name, _ in pipeline.tables.commit_tables()),
    )


def run_following_registry(
    cfg: PipelineConfig,
    spark: SparkSession | None = None,
    *,
    started: Callable[[Pipeline], None] | None = None,
    **run_args: Any,
) -> RunStats:
    """``Pipeline(cfg).run(**run_args)``, started again each time a batch finds that the
    table's registry subject has a new version (``[ingest:schema-advanced]``) or that a new
    topic of ``source.topicPattern`` needs its routed table (``[ingest:table-set-grew]``),
    both raised before the batch's side effects (:mod:`pipeline.decode.registry.watch`,
    :func:`pipeline.formats.routes.new_topic_check`). Each start resolves the subject's
    latest version and the pattern's topics, evolves the table's columns, opens the new
    tables and replays that batch. The returned stats add up the counts of every start.
    ``started`` gets each new pipeline (the CLI's stop signal handler asks the current one
    to stop)."""
    from pipeline.errors import find_pipeline_error

    done = RunStats()
    followed: tuple[object, ...] | None = None  # what the last start was built from
    while True:
        pipeline = Pipeline(cfg, spark)
        if started is not None:
            started(pipeline)
        try:
            stats = pipeline.run(**run_args)
        except Exception as e:
            line = find_pipeline_error(e, tagged=True) or ""
            if not line.startswith(("[ingest:schema-advanced]", "[ingest:table-set-grew]")):
                raise
            now = _built_from(pipeline)
            if now == followed:  # the restart did not move: never loop
                raise
            followed = now
            log.info("pipeline %s: %s", cfg.id, line)
            stats = pipeline.stats
            advanced = True
        else:
            advanced = False
        done.batches += stats.batches
        done.skipped += stats.skipped
        done.records += stats.records
        done.dead_letters += stats.dead_letters
        done.recommitted += stats.recommitted
        done.stop_requested = stats.stop_requested
        done.stop_cut_short = stats.stop_cut_short
        if not advanced or stats.stop_requested:
            return done
