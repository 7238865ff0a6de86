"""Builds and runs the streaming query described by a ``PipelineConfig``.

    ingest_kafka source ──▶ foreachBatch ──▶ Coordinator
                                 │ mapInArrow: workers read, decode and stage files
                                 ▼
                      one table commit per batch

The driver process holds the coordinator (and later the metrics registry); the source's
planner and the writers run in Spark's Python workers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pipeline.commit.coordinator import make_coordinator
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.commit.types import BatchOutcome, StagedBatch
from pipeline.config import PipelineConfig
from pipeline.errors import FencedError, PipelineError
from pipeline.observe.base import Observers, PipelineObserver, RunInfo

if TYPE_CHECKING:
    from pipeline.formats.base import PipelineTables
    from pipeline.observe.metrics import PipelineMetrics
    from pipeline.standby import Standby

log = logging.getLogger(__name__)

FENCE_CHECK_S = 5.0  # how often an idle driver checks that no newer writer took over
STOP_POLL_S = 0.1  # how often a stopping driver looks whether the batch has finished


@dataclass
class RunStats:
    """Running totals the progress display and `status` read (driver memory only)."""

    batches: int = 0
    skipped: int = 0
    records: int = 0
    dead_letters: int = 0
    last: BatchOutcome | None = None
    committed: PartitionOffsets = field(default_factory=PartitionOffsets)
    overlap_dropped: int = 0
    recommitted: int = 0
    recovered: dict[str, int] = field(default_factory=dict)  # action -> instants
    epoch: int = 0
    fenced: bool = False
    error: BaseException | None = None
    stop_requested: bool = False  # request_stop() (SIGTERM/SIGINT) ended the run
    stop_cut_short: bool = False  # ... after run.stopTimeoutSeconds, a batch still running
    lock: threading.Lock = field(default_factory=threading.Lock)


class Pipeline:
    def __init__(self, cfg: PipelineConfig, spark: Any | None = None) -> None:
        from pipeline.commit.faults import FaultPoints
        from pipeline.formats.registry import table_format
        from pipeline.preflight import check_paths

        fmt = table_format(cfg)
        # before anything is created or an epoch taken
        check_paths(cfg, fmt.writable_paths(cfg))
        self.cfg = cfg
        self.faults = FaultPoints(cfg.commit.faults)  # config, else INGEST_FAULT
        self.format = fmt
        self.tables: PipelineTables = fmt.open_tables(cfg, self.faults)
        self._spark = spark
        if spark is not None:
            from pipeline.spark.session import register_source

            register_source(spark)
        self.stats = RunStats()
        # metrics exporter, batch log, progress displays (pipeline.observe.base)
        self.observers = Observers()
        exactly_once = cfg.commit.mode == "exactly-once"
        self.timeline = self.tables.timeline(cfg.id) if exactly_once else None
        self.coordinator = make_coordinator(
            cfg.id,
            self.tables.main,
            self.tables.dead_letter,
            timeline=self.timeline,
            on_overlap=cfg.commit.on_overlap,
            faults=self.faults,
            data_loss=self._data_loss,
        )
        self._incarnation: str | None = None
        self._broker_checked = False
        self._starting_offsets: str | None = None  # the source's startingOffsets option
        self.metrics: Any = None  # PipelineMetrics (attach_metrics) while attached
        self._metrics_observers: list[PipelineObserver] = []
        # graceful stop (request_stop): the request's time, set by a signal handler
        self._stop_requested_at: float | None = None
        self._batch_gate = threading.Lock()  # guards _in_batch and _halting
        self._in_batch = False  # a batch is inside process_batch
        self._halting = False  # query.stop() is being issued: no batch may start now
        self._query: Any = None
        self._lease: Standby | None = None  # ha.mode not off: the standby lease
        # (batch id, its logged end offsets): the next batch's start, without a second read
        self._last_end: tuple[int, PartitionOffsets] | None = None

    # -- set-up ----------------------------------------------------------------------
    @property
    def spark(self) -> Any:
        if self._spark is None:
            from pipeline.spark.session import build_spark

            self._spark = build_spark(
                self.cfg.spark.app_name, self.cfg.spark.master, self.cfg.spark.conf
            )
        return self._spark

    def check_broker(self) -> None:
        from pipeline.kafka.client import KafkaMetadata

        s = self.cfg.source
        md = KafkaMetadata(self.sources_conf(), timeout_s=15)
        md.check_reachable()
        if s.topics:
            md.topic_partitions(s.topics)
        elif s.assign:
            counts = md.topic_partitions(s.assign)
            for topic, parts in s.assign.items():
                missing = [p for p in parts if p >= counts[topic]]
                if missing:
                    raise PipelineError(
                        f"source.assign: topic {topic!r} has {counts[topic]} partitions; "
                        f"partition(s) {missing} do not exist"
                    )

    def source_options(self) -> dict[str, str]:
        s = self.cfg.source
        opts: dict[str, str] = {"kafka.bootstrap.servers": s.bootstrap_servers}
        opts.update({f"kafka.{k}": v for k, v in s.kafka.items()})
        if s.topics:
            opts["topics"] = ",".join(s.topics)
        elif s.assign:
            import json

            opts["assign"] = json.dumps(s.assign)
        elif s.topic_pattern:
            opts["topicPattern"] = s.topic_pattern
        opts["startingOffsets"] = self.resolve_starting_offsets()
        if s.starting_timestamp is not None and s.starting_offsets != "table":
            opts["startingTimestamp"] = str(s.starting_timestamp)
            opts["startingOffsetsByTimestampStrategy"] = s.starting_offsets_by_timestamp_strategy
        if s.max_records_per_trigger:
            opts["maxRecordsPerTrigger"] = str(s.max_records_per_trigger)
        if s.min_records_per_trigger:
            opts["minRecordsPerTrigger"] = str(s.min_records_per_trigger)
        if s.max_trigger_delay:
            opts["maxTriggerDelay"] = s.max_trigger_delay
        if s.min_partitions:
            opts["minPartitions"] = str(s.min_partitions)
        opts["failOnDataLoss"] = str(s.fail_on_data_loss).lower()
        opts["isolationLevel"] = s.isolation_level
        opts["includeHeaders"] = str(s.include_headers).lower()
        opts["brokerRetrySeconds"] = str(s.broker_retry_seconds)
        return opts

    def resolve_starting_offsets(self) -> str:
        """``table`` → the table's committed end offsets (DESIGN invariant 6); only used
        by Spark when the checkpoint is new."""
        s = self.cfg.source
        if isinstance(s.starting_offsets, dict):
            import json

            return json.dumps(s.starting_offsets)
        if s.starting_offsets != "table":
            return s.starting_offsets
        committed = self.tables.main.committed_offsets(self.cfg.id)
        if committed:
            log.info("resuming from the table's committed offsets %s", committed.to_json())
            return committed.to_json()  # partitions not listed start at earliest
        return s.starting_offsets_fallback

    # -- the batch ----------------------------------------------------------------------
    def _incarnation_id(self) -> str:
        if self._incarnation is None:
            from pipeline.spark.offset_log import SparkOffsetLog

            self._incarnation = SparkOffsetLog(self.spark, self.cfg.checkpoint_location).query_id()
        return self._incarnation

    def process_batch(self, df: Any, batch_id: int) -> None:
        """foreachBatch: one batch through the coordinator. A graceful stop waits for it."""
        with self._batch_gate:
            halting = self._halting
            if not halting:
                self._in_batch = True
        try:
            if halting:
                self._skip_batch_while_halting(batch_id)
                return
            try:
                self._process_batch(df, batch_id)
            finally:
                with self._batch_gate:
                    self._in_batch = False
        except Exception as e:
            self.observers.failure(e, batch_id)  # fencing included
            raise

    def _skip_batch_while_halting(self, batch_id: int) -> None:
        """Spark planned this batch in the moment a graceful stop decided to stop the
        query (no batch was running). Nothing of it is written (no journal entry). Only
        once ``query.stop()`` has marked the query terminated -- it then interrupts the
        query thread, which is blocked in this call -- do we return: the interrupted
        thread does not write the batch to Spark's commit log, so the next run replays it
        from the offset log. If the query is still active after a while, raise instead:
        a failed batch is never committed."""
        deadline = time.monotonic() + 10.0
        while self._query is not None and self._query.isActive:
            if time.monotonic() > deadline:
                raise PipelineError(
                    f"batch {batch_id} started while stopping and the query did not stop"
                )
            time.sleep(STOP_POLL_S)
        time.sleep(1.0)  # stop() interrupts the query thread right after marking it
        log.info("batch %d was planned as the query stopped: the next run processes it", batch_id)

    def _process_batch(self, df: Any, batch_id: int) -> None:
        from pipeline.spark.batch import BatchWriter
        from pipeline.spark.offset_log import SparkOffsetLog
        from pipeline.spark.settle import settle

        offset_log = SparkOffsetLog(df.sparkSession, self.cfg.checkpoint_location)
        end = offset_log.offsets(batch_id)
        if end is None:
            raise PipelineError(f"offset log entry for batch {batch_id} is missing")
        # an offset log entry never changes once written: the previous batch's end is ours
        last = self._last_end
        start = last[1] if last is not None and last[0] == batch_id - 1 else None
        if start is None:
            start = offset_log.offsets(batch_id - 1)
        self._last_end = (batch_id, end)
        armed = ",".join(
            f"{f.point}:{f.action}" for f in self.faults.armed.values() if f.point == "mid-write"
        )
        writer = BatchWriter(
            df=df,
            start=start if start is not None else self._explicit_start(end),
            end=end,
            plan=self.tables.task_plan,
            decode=self.cfg.decode,
            source=self.cfg.source,
            consumer_conf=self.sources_conf(),
            data_ddl=self.tables.data_ddl,
            faults=armed or None,
        )
        try:
            outcome = self.coordinator.run_batch(
                self._incarnation_id(), batch_id, start, end, writer.write
            )
        except FencedError:
            with self.stats.lock:
                self.stats.fenced = True
            raise
        with self.stats.lock:
            self.stats.last = outcome
            for _, action in outcome.recovered:
                self.stats.recovered[action] = self.stats.recovered.get(action, 0) + 1
            if outcome.outcome == "replay_skipped":
                self.stats.skipped += 1
            else:
                self.stats.batches += 1
                self.stats.records += outcome.records
                self.stats.dead_letters += outcome.dead_letter_records
                self.stats.overlap_dropped += outcome.overlap_dropped
                self.stats.committed = outcome.committed
                if outcome.outcome == "recommitted":
                    self.stats.recommitted += 1
        log.info(
            "batch %d %s: instant %s, %d records, %d dead letters, %d files",
            batch_id,
            outcome.outcome,
            outcome.instant,
            outcome.records,
            outcome.dead_letter_records,
            outcome.files,
        )
        self.observers.outcome(outcome)
        settle()  # after the first batch: the driver's imports and caches are in place
        if self.timeline is not None and batch_id % 50 == 0:
            self.timeline.purge_finished(self.cfg.commit.journal_retention)

    def _explicit_start(self, end: PartitionOffsets) -> PartitionOffsets | None:
        """Start of a checkpoint's first batch when the source's initial offsets are
        explicit for every partition in ``end`` (JSON offsets, e.g. resumed from the
        table); None otherwise (earliest/latest are re-evaluated by Spark, so only the
        batch's own DataFrame knows them and the first batch uses the Spark engine)."""
        import json

        text = self._starting_offsets
        if not text or not text.lstrip().startswith("{"):
            return None
        try:
            given = PartitionOffsets.from_json(text)
        except (ValueError, json.JSONDecodeError):
            return None
        if any(given.get(tp, -1) < 0 for tp in end):
            return None
        return PartitionOffsets({tp: given[tp] for tp in end})

    def _data_loss(
        self, staged: StagedBatch, ranges: dict[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, tuple[int, int]]:
        """Ranges whose head was deleted by retention before we read it
        (only possible with failOnDataLoss=false; otherwise the source stopped)."""
        if self.cfg.source.fail_on_data_loss:
            return {}
        first = {TopicPartition(s.topic, s.partition): s.min_offset for s in staged.stats}
        suspects = [tp for tp, (s, e) in ranges.items() if first.get(tp, e) > s]
        if not suspects:
            return {}
        from pipeline.kafka.client import KafkaMetadata

        md = KafkaMetadata(self.sources_conf())
        low = md.offsets(suspects)
        out = {}
        for tp in suspects:
            s, e = ranges[tp]
            lost_end = min(low[tp].low, first.get(tp, e), e)
            if lost_end > s:
                out[tp] = (s, lost_end)
                log.warning(
                    "data loss on %s: offsets [%d, %d) were deleted by retention", tp, s, lost_end
                )
        return out

    def sources_conf(self) -> dict[str, Any]:
        from pipeline.kafka.client import consumer_config

        s = self.cfg.source
        return consumer_config(s.bootstrap_servers, s.kafka, isolation_level=s.isolation_level)

    # -- observers ----------------------------------------------------------------------
    def add_observer(self, observer: PipelineObserver) -> None:
        """``observer`` is told of the query's start, every batch outcome, failures and the
        query's end (:mod:`pipeline.observe.base`)."""
        self.observers.add(observer)

    def remove_observer(self, observer: PipelineObserver) -> None:
        self.observers.remove(observer)

    def run_info(self, query: Any = None) -> RunInfo:
        """The pipeline's committed state as its main table(s) hold it (any format)."""
        main = self.tables.main
        return RunInfo(
            self.cfg.id,
            committed=main.committed_offsets(self.cfg.id) or {},
            last_commit_time=main.last_commit_time(self.cfg.id),
            epoch=self.coordinator.epoch,
            query=query,
        )

    def attach_metrics(self, *, serve: bool | None = None) -> PipelineMetrics:
        """Export this pipeline's metrics: a ``PipelineMetrics`` fed by a metrics observer,
        plus the JSON batch log line (``pipeline.batches``); returns the metrics.

        ``serve`` (default ``cfg.metrics.enabled``): start the HTTP endpoint (``/metrics``,
        ``/healthz``, ``/readyz``) and the lag thread (every ``cfg.metrics.lagRefreshSeconds``;
        its first refresh reads the table's committed offsets and last commit time).
        Call ``stop()`` on the returned metrics when done (:meth:`run` does it for the
        metrics it attached itself)."""
        from pipeline.observe.observers import BatchLogObserver, MetricsObserver

        observer = MetricsObserver.from_config(
            self.cfg, format_name=self.format.name, journal=self.timeline
        )
        observer.metrics.set_writer_epoch(self.coordinator.epoch)
        batch_log = BatchLogObserver(self.cfg.id, epoch=self.coordinator.epoch)
        if self.cfg.metrics.enabled if serve is None else serve:
            observer.serve(self.cfg, self.sources_conf(), initial=self.run_info)
        for o in (observer, batch_log):
            self.add_observer(o)
        self._metrics_observers = [observer, batch_log]
        self.metrics = observer.metrics  # run() reuses it instead of starting another
        return observer.metrics

    def _detach_metrics(self) -> None:
        for o in self._metrics_observers:
            self.remove_observer(o)
        self._metrics_observers = []
        if self.metrics is not None:
            self.metrics.stop()
            self.metrics = None

    def _start_info(self, query: Any) -> RunInfo:
        try:
            return self.run_info(query)
        except Exception as e:  # observers must never fail the run
            log.warning("observers: the table's committed state is unknown at start: %s", e)
            return RunInfo(self.cfg.id, epoch=self.coordinator.epoch, query=query)

    # -- the query ----------------------------------------------------------------------
    def start(self) -> Any:
        """Start the streaming query; observers get ``on_start`` (``on_failure`` when it
        cannot start, e.g. fenced)."""
        try:
            query = self._start_query()
        except Exception as e:
            self.observers.failure(e, None)
            raise
        if len(self.observers):
            self.observers.start(self._start_info(query))
        return query

    def _start_query(self) -> Any:
        from pipeline.source.datasource import SOURCE_NAME

        if not self._broker_checked:  # run() already checked it
            self.check_broker()
        if self.timeline is not None:
            # Fence before Spark starts: a zombie of an earlier run cannot commit past here.
            import socket

            self.stats.epoch = self.coordinator.acquire_epoch(owner=socket.gethostname())
        spark = self.spark
        opts = self.source_options()
        self._starting_offsets = opts.get("startingOffsets")
        if "startingTimestamp" in opts:
            self._starting_offsets = None  # timestamps win over startingOffsets
        reader = spark.readStream.format(SOURCE_NAME).options(**opts)
        # Raw Kafka rows: the batch writer decodes (spark/batch.py), so Spark has no decode
        # plan to re-analyse every batch when the arrow engine never runs it.
        writer = (
            reader.load()
            .writeStream.foreachBatch(self.process_batch)
            .option("checkpointLocation", self.cfg.checkpoint_location)
        )
        t = self.cfg.trigger
        if t.mode == "available-now":
            writer = writer.trigger(availableNow=True)
        elif t.mode == "once":
            writer = writer.trigger(once=True)
        else:
            writer = writer.trigger(processingTime=t.interval)
        return writer.queryName(f"ingest-{self.cfg.id}").start()

    def run(
        self,
        until: Callable[[RunStats], bool] | None = None,
        tick: Callable[[RunStats], None] | None = None,
        timeout_s: float | None = None,
    ) -> RunStats:
        """Run until the query ends (available-now/once), ``until`` holds, or a timeout.

        The run state (``running`` once the query started, then ``stopped`` with the
        error line) is kept next to the checkpoint for ``ingest status``."""
        from pipeline.observe.runstate import error_line, record_run_state

        try:
            self.check_broker()  # fail fast, before any endpoint or Spark starts
            self._broker_checked = True
            # started here, stopped here; metrics attached by the caller stay up
            attached = self.cfg.metrics.enabled and self.metrics is None
            if attached:
                self.attach_metrics()  # /metrics, /healthz, /readyz, lag thread, batch log
            try:
                stats = self._run(until, tick, timeout_s)
            finally:
                if attached:
                    self._detach_metrics()
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
        if self._stop_requested_at is not None or not self._acquire_lease():
            self.stats.stop_requested = True  # stopped before the query started
            return self.stats
        try:
            return self._run_query(until, tick, timeout_s)
        finally:
            if self._lease is not None:
                self._lease.release()  # a standby need not wait for the lease to expire

    def _run_query(
        self,
        until: Callable[[RunStats], bool] | None,
        tick: Callable[[RunStats], None] | None,
        timeout_s: float | None,
    ) -> RunStats:
        query = self.start()
        self._query = query
        self._record_running()
        maintenance = self._start_maintenance()
        deadline = time.monotonic() + timeout_s if timeout_s else None
        next_fence_check = time.monotonic() + FENCE_CHECK_S
        try:
            while query.isActive:
                if self._stop_requested_at is not None:
                    self._stop_between_batches(query)
                    break
                query.awaitTermination(0.5)
                self._keep_lease()
                if tick:
                    tick(self.stats)
                if until is not None and until(self.stats):
                    break
                if deadline is not None and time.monotonic() > deadline:
                    break
                if time.monotonic() > next_fence_check:
                    # an idle zombie must stop too, not only one that tries to commit
                    next_fence_check = time.monotonic() + FENCE_CHECK_S
                    try:
                        self.coordinator.check_epoch()
                    except FencedError as e:
                        self.stats.fenced = True
                        self.observers.failure(e, None)
                        raise
            exc = query.exception()
            if exc is not None:
                raise exc
        finally:
            # a stop cut short leaves its batch running: stopping the query under it would
            # cancel its Spark jobs and fail it noisily; the process's exit ends it instead
            if query.isActive and not self.stats.stop_cut_short:
                query.stop()
            if maintenance is not None:
                maintenance.stop()
            self.observers.stop()
        return self.stats

    def _start_maintenance(self) -> Any:
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

    # -- warm standby (ha.mode, pipeline/standby/) --------------------------------------
    def _acquire_lease(self) -> bool:
        """Own the standby lease before the query starts (``ha.mode`` not off). False: a
        stop was requested while standing by."""
        if self.cfg.ha.mode == "off" or self.timeline is None:
            return True
        from pipeline.standby import Standby
        from pipeline.standby.liveness import advertised_host

        host = advertised_host(dict(self.cfg.spark.conf))
        self._lease = Standby(self.cfg.ha, self.timeline.store, host)
        if self.metrics is not None:
            self.metrics.watch_standby(self._lease.status)  # a warm standby is ready
        return self._lease.acquire(self._warm_up, lambda: self._stop_requested_at is not None)

    def _warm_up(self) -> None:
        from pipeline.spark.session import warm_up

        warm_up(self.spark)
        try:
            for step in (self._rehearse, self.run_info):  # run_info: catalog and table
                if self._stop_requested_at is not None:  # SIGTERM while warming up
                    return
                step()
        except Exception as e:  # the take-over reports it if it persists
            log.warning("standby: warming up failed (%s); still standing by", e)

    def _rehearse(self) -> None:
        """Run the query's path once on a private checkpoint, reading nothing: a JVM's
        first streaming query starts ~2.5 s slower than its next (classes, the source's
        planner worker, the foreachBatch callback server); a take-over should not pay it."""
        import shutil
        import tempfile

        from pipeline.source.datasource import SOURCE_NAME

        opts = {**self.source_options(), "startingOffsets": "latest"}
        opts.pop("startingTimestamp", None)
        checkpoint = tempfile.mkdtemp(prefix="ingest-rehearsal-")
        try:
            query = (
                self.spark.readStream.format(SOURCE_NAME)
                .options(**opts)
                .load()
                .writeStream.foreachBatch(lambda df, _: df.count())
                .option("checkpointLocation", f"file://{checkpoint}")  # never fs.defaultFS
                .trigger(availableNow=True)
                .queryName(f"ingest-{self.cfg.id}-rehearsal")
                .start()
            )
            query.awaitTermination()
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)

    def _keep_lease(self) -> None:
        if self._lease is None:
            return
        try:
            self._lease.keep()
        except FencedError as e:  # LeaseLostError: another replica took over
            self.stats.fenced = True
            self.observers.failure(e, None)
            raise

    def _record_running(self) -> None:
        """``ingest status`` reads this (and the metrics URL, when serving) after we die."""
        from pipeline.observe.runstate import record_run_state

        m = self.metrics
        url = m.url if m is not None and m.port else None
        record_run_state(self.cfg, "running", None, metrics_url=url)

    # -- stopping -----------------------------------------------------------------------
    def request_stop(self) -> None:
        """Ask ``run()`` to stop gracefully: the batch in progress finishes its commit (for
        at most ``run.stopTimeoutSeconds``), then the query stops between batches and
        ``run()`` returns its stats. Only sets a flag, so it is safe in a signal handler
        (never raises into a py4j call) and from any thread; repeated calls are no-ops."""
        if self._stop_requested_at is None:
            self._stop_requested_at = time.monotonic()

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested_at is not None

    def _stop_between_batches(self, query: Any) -> None:
        """Wait (bounded) until no batch is in ``process_batch``, then stop the query while
        none can start. Past the timeout the batch is left running and ``stop_cut_short``
        is set: the caller ends the process; the next run recovers the batch's instant."""
        assert self._stop_requested_at is not None
        timeout = self.cfg.run.stop_timeout_seconds
        deadline = self._stop_requested_at + timeout
        with self.stats.lock:
            self.stats.stop_requested = True
        announced = False
        while True:
            with self._batch_gate:
                if not self._in_batch:
                    self._halting = True
                    break
            if not query.isActive:
                return  # the batch failed (or the query ended): run() reports it
            if time.monotonic() >= deadline:
                with self.stats.lock:
                    self.stats.stop_cut_short = True
                log.warning(
                    "stop: the batch in progress did not commit within run.stopTimeoutSeconds"
                    " (%g s); stopping without it (the next run recovers it)",
                    timeout,
                )
                return
            self._keep_lease()  # the batch may commit: this replica still writes
            if not announced:
                announced = True
                log.info(
                    "stop requested: letting the batch in progress commit (at most %g s)",
                    timeout,
                )
            time.sleep(STOP_POLL_S)
        log.info("stop requested: stopping the query between batches")
        query.stop()
