"""Prometheus metrics of the driver (named by Prometheus conventions: ``_total``, ``_seconds``).

:class:`PipelineMetrics` owns its own ``CollectorRegistry`` (never the process-global one,
so several pipelines or tests can live in one process), the HTTP endpoint
(``/metrics``, ``/healthz``, ``/readyz``; :mod:`pipeline.observe.health`) and a background
thread that refreshes consumer lag from the broker every ``metrics.lagRefreshSeconds``,
also while no batch runs. It is split by job: the registry and readiness here, outcome
accounting in :mod:`pipeline.observe.accounting`, lag in :mod:`pipeline.observe.lag`; a
pipeline feeds it through :class:`pipeline.observe.observers.MetricsObserver`.

Exported metrics (all prefixed ``ingest_``; labels bounded: ``topic`` is capped at
``max_topics`` values, ``partition`` at ``max_lag_series`` series, the rest are enums):

====================================================  =========  ===========================
name                                                  type       labels
====================================================  =========  ===========================
ingest_build_info                                     gauge      version, python_version,
                                                                 pyspark_version
ingest_pipeline_info                                  gauge      pipeline_id, table, format
ingest_records_total                                  counter    topic
ingest_bytes_total                                    counter    topic
ingest_dead_letter_records_total                      counter    -
ingest_unknown_field_records_total                    counter    -
ingest_data_loss_records_total                        counter    topic
ingest_overlap_dropped_records_total                  counter    -
ingest_batches_total                                  counter    -
ingest_commits_total                                  counter    outcome
ingest_phase_duration_seconds                         histogram  phase
ingest_consumer_lag_records                           gauge      topic, partition
ingest_lag_refresh_timestamp_seconds                  gauge      -
ingest_lag_refresh_errors_total                       counter    -
ingest_last_commit_timestamp_seconds                  gauge      -
ingest_last_commit_age_seconds                        gauge      -
ingest_last_batch_id                                  gauge      -
ingest_pending_instants                               gauge      -
ingest_writer_epoch                                   gauge      -
ingest_writer_fenced                                  gauge      -
ingest_query_active                                   gauge      -
ingest_ready                                          gauge      -
ingest_ha_role                                        gauge      role
ingest_ha_active                                      gauge      -
ingest_ha_lease_age_seconds                           gauge      -
ingest_ha_takeovers_total                             counter    -
ingest_table_data_files                               gauge      table
ingest_table_data_file_average_bytes                  gauge      table
ingest_compactions_total                              counter    table
ingest_compacted_files_total                          counter    table
ingest_orphan_files_removed_total                     counter    table
process_* / python_info                               (prometheus-client's collectors)
====================================================  =========  ===========================

Semantics
  * ``records``: rows made visible in the main table (dead letters excluded), counted on
    ``committed`` and ``recommitted`` outcomes. ``bytes``: bytes of the data files those
    commits added to the main table (Parquet, after compression).
  * ``commits_total{outcome}``: committed, replay_skipped, recommitted, rolled_back,
    fenced, failed -- all pre-created at 0 so ``increase()`` sees the first event.
  * ``consumer_lag_records``: broker end offset (last stable offset under
    read_committed) minus the table's committed end offset, per assigned partition; for a
    partition the table has no offset for yet, end minus log start.
  * ``last_commit_age_seconds``: since the last commit of this pipeline (seeded from the
    table's newest commit of the pipeline at start, any table format), or since the
    exporter started when the table holds none.
  * ``table_data_files`` / ``table_data_file_average_bytes``: measured every
    ``maintenance.fileStatsInterval`` (and after each compaction) by the driver's
    background maintenance; absent until the first measurement.
  * ``ready``: 1 when ``/readyz`` answers 200: the streaming query is active, the last
    batch did not fail and the writer was not fenced -- or the replica is a warm standby
    (``ha.mode``), which is healthy and ready to take over.
  * ``ha_role{role}``: 1 for this replica's role (off, standby, active, stopped);
    ``ha_active``: 1 while this replica writes (with ``ha.mode`` off: while the query is
    active); ``ha_lease_age_seconds``: a standby's view of the lease (since it last
    changed), an active's time since its last renewal; ``ha_takeovers_total``: times
    this replica took over after standing by.
"""

from __future__ import annotations

import importlib.metadata
import platform
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pipeline.commit.lease import HaStatus
from pipeline.commit.offsets import BrokerOffsets, TopicPartition
from pipeline.observe.accounting import (
    OUTCOMES,
    PHASES,
    OutcomeAccounting,
    one_line,
)
from pipeline.observe.files import FileMetrics
from pipeline.observe.health import HealthServer
from pipeline.observe.lag import LagExport

if TYPE_CHECKING:
    from pipeline.config import PipelineConfig

__all__ = ["PipelineMetrics"]  # outcome vocabulary: pipeline.observe.accounting

_PHASE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


def _version() -> str:
    try:
        return importlib.metadata.version("kafka-lakehouse-ingest")
    except importlib.metadata.PackageNotFoundError:
        from pipeline import __version__

        return __version__


def _pyspark_version() -> str:
    try:
        return importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class _WithoutCreated(Collector):
    """Registry view without the ``*_created`` samples prometheus-client adds to counters
    and histograms (Prometheus 2.x would store them as separate series)."""

    def __init__(self, source: Any) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        for family in self._source.collect():
            if not any(s.name.endswith("_created") for s in family.samples):
                yield family
                continue
            copy = Metric(family.name, family.documentation, family.type, family.unit)
            copy.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield copy

    def restricted_registry(self, names: Iterable[str]) -> _WithoutCreated:
        return _WithoutCreated(self._source.restricted_registry(names))


HA_ROLES = ("off", "standby", "active", "stopped")


class _HaCollector(Collector):
    """The warm-standby series, read from the pipeline's lease at each scrape."""

    def __init__(self, metrics: PipelineMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        st = self.metrics.ha_status()
        role = GaugeMetricFamily(
            "ingest_ha_role", "1 for this replica's warm-standby role.", labels=["role"]
        )
        for name in HA_ROLES:
            role.add_metric([name], 1.0 if st.role == name else 0.0)
        yield role
        writes = st.role == "active" or (st.role == "off" and self.metrics.query_active())
        yield GaugeMetricFamily(
            "ingest_ha_active", "1 while this replica writes.", value=1.0 if writes else 0.0
        )
        yield GaugeMetricFamily(
            "ingest_ha_lease_age_seconds",
            "Standby: since the lease last changed; active: since its last renewal.",
            value=st.lease_age_s,
        )
        yield CounterMetricFamily(
            "ingest_ha_takeovers",
            "Times this replica took over the lease after standing by.",
            value=st.takeovers,
        )


class PipelineMetrics(OutcomeAccounting, LagExport):
    """Metrics, readiness state and the HTTP endpoint of one pipeline's driver.

    Thread-safe: the batch thread, recovery code, the lag thread and scrapes may call in
    concurrently. No method raises on bad data (a metrics problem must never fail a
    batch); problems are logged.
    """

    def __init__(
        self,
        pipeline_id: str = "",
        *,
        table: str = "",
        format_name: str = "iceberg",
        host: str = "0.0.0.0",
        port: int = 9108,
        max_topics: int = 200,
        max_lag_series: int = 4096,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.pipeline_id = pipeline_id
        self.host = host
        self.requested_port = port
        self.max_topics = max_topics
        self.max_lag_series = max_lag_series
        self._clock = clock
        self._lock = threading.RLock()
        self.started_at = clock()
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry

        build = Gauge(
            "ingest_build_info",
            "Build of the ingestion driver (always 1).",
            ["version", "python_version", "pyspark_version"],
            registry=r,
        )
        build.labels(_version(), platform.python_version(), _pyspark_version()).set(1)
        info = Gauge(
            "ingest_pipeline_info",
            "The pipeline this driver runs (always 1).",
            ["pipeline_id", "table", "format"],
            registry=r,
        )
        info.labels(pipeline_id, table, format_name).set(1)

        self.records = Counter(
            "ingest_records",
            "Records committed to the main table (dead letters excluded).",
            ["topic"],
            registry=r,
        )
        self.bytes = Counter(
            "ingest_bytes",
            "Bytes of data files committed to the main table.",
            ["topic"],
            registry=r,
        )
        self.dead_letter_records = Counter(
            "ingest_dead_letter_records",
            "Undecodable records committed to the dead-letter table.",
            registry=r,
        )
        self.unknown_field_records = Counter(
            "ingest_unknown_field_records",
            "Records that carried top-level fields decode.schema lacks (decode.unknownFields: "
            "ignored or dead-lettered).",
            registry=r,
        )
        self.data_loss_records = Counter(
            "ingest_data_loss_records",
            "Records skipped because Kafka retention deleted them before ingestion "
            "(failOnDataLoss=false).",
            ["topic"],
            registry=r,
        )
        self.overlap_dropped_records = Counter(
            "ingest_overlap_dropped_records",
            "Records re-read at offsets the table already held, dropped before writing.",
            registry=r,
        )
        self.batches = Counter(
            "ingest_batches",
            "Micro-batches the coordinator completed (committed, recommitted or replay-skipped).",
            registry=r,
        )
        self.commits = Counter(
            "ingest_commits",
            "Commit outcomes of batches and recovered instants.",
            ["outcome"],
            registry=r,
        )
        for outcome in OUTCOMES:
            self.commits.labels(outcome)
        self.phase_duration = Histogram(
            "ingest_phase_duration_seconds",
            "Duration of the coordinator's phases per batch or recovery.",
            ["phase"],
            buckets=_PHASE_BUCKETS,
            registry=r,
        )
        for phase in PHASES:
            self.phase_duration.labels(phase)
        self.consumer_lag = Gauge(
            "ingest_consumer_lag_records",
            "Broker end offset minus the table's committed end offset.",
            ["topic", "partition"],
            registry=r,
        )
        self.lag_refreshed = Gauge(
            "ingest_lag_refresh_timestamp_seconds",
            "Unix time of the last successful lag refresh from the broker.",
            registry=r,
        )
        self.lag_refresh_errors = Counter(
            "ingest_lag_refresh_errors",
            "Lag refreshes that failed (broker unreachable, metadata errors).",
            registry=r,
        )
        self.last_commit = Gauge(
            "ingest_last_commit_timestamp_seconds",
            "Unix time of the last commit of this pipeline (0: none known).",
            registry=r,
        )
        age = Gauge(
            "ingest_last_commit_age_seconds",
            "Seconds since the last commit (since exporter start when none is known).",
            registry=r,
        )
        age.set_function(self.last_commit_age)
        self.last_batch_id = Gauge(
            "ingest_last_batch_id", "Spark batch id of the last completed batch.", registry=r
        )
        self.last_batch_id.set(-1)
        self.pending_instants = Gauge(
            "ingest_pending_instants",
            "Instants in the journal that are neither committed nor rolled back.",
            registry=r,
        )
        self.writer_epoch = Gauge(
            "ingest_writer_epoch", "Writer epoch this driver commits with.", registry=r
        )
        self.writer_fenced = Gauge(
            "ingest_writer_fenced",
            "1 when a newer writer epoch fenced this driver out.",
            registry=r,
        )
        active = Gauge("ingest_query_active", "1 while the streaming query is active.", registry=r)
        active.set_function(lambda: 1.0 if self._query_state()[0] else 0.0)
        ready = Gauge("ingest_ready", "1 when /readyz answers 200.", registry=r)
        ready.set_function(lambda: 1.0 if self.readiness()[0] else 0.0)
        self.files = FileMetrics(r)  # fed by the background maintenance
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)

        # state behind the lock
        self._topics: set[str] = set()
        self._committed: dict[TopicPartition, int] = {}
        self._broker: dict[TopicPartition, BrokerOffsets] = {}
        self._lag_labels: set[tuple[str, str]] = set()
        self._last_commit_ts: float | None = None
        self._failed: str | None = None
        self._failed_exc: BaseException | None = None
        self._fenced: str | None = None
        self._query: Any = None
        self._ha: Callable[[], HaStatus] | None = None  # watch_standby
        self._query_active = False
        self._query_reason = "query not started"
        self._warned: set[str] = set()
        self._observed_any = False
        r.register(_HaCollector(self))  # after the state it reads (described at register)

        self._exposition = _WithoutCreated(self.registry)
        self._server = HealthServer(self._exposition, self.readiness, host, port)
        self._bound_port = 0
        self._stop = threading.Event()
        self._lag_thread: threading.Thread | None = None

    @classmethod
    def from_config(cls, cfg: PipelineConfig, format_name: str = "iceberg") -> PipelineMetrics:
        """``format_name``: the table format's registry name (the app knows it)."""
        return cls(
            cfg.id,
            table=cfg.sink.table,
            format_name=format_name,
            host=cfg.metrics.host,
            port=cfg.metrics.port,
        )

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> int:
        """Serve ``/metrics``, ``/healthz``, ``/readyz``; returns the bound port.

        Raises ``ConfigError`` (one line) when the port cannot be bound.
        """
        self._server.start()
        self._bound_port = self._server.port
        return self._bound_port

    def stop(self) -> None:
        """Stop the lag thread and the HTTP server (idempotent)."""
        self.stop_lag_refresh()
        self._server.stop()

    @property
    def port(self) -> int:
        """The bound port (0 before :meth:`start`)."""
        return self._bound_port

    @property
    def url(self) -> str:
        """``http://host:port`` of the endpoint (127.0.0.1 for a wildcard host)."""
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        return f"http://{f'[{host}]' if ':' in host else host}:{self._bound_port}"

    def __enter__(self) -> PipelineMetrics:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- readiness ---------------------------------------------------------------------

    def set_query_active(self, active: bool, reason: str = "") -> None:
        """Query state for readiness when no query is watched (see :meth:`watch_query`)."""
        with self._lock:
            self._query_active = active
            self._query_reason = reason or ("" if active else "query not active")

    def watch_query(self, query: Any) -> None:
        """Read ``isActive`` / ``exception()`` of a ``StreamingQuery`` at each probe and
        scrape (overrides :meth:`set_query_active`)."""
        with self._lock:
            self._query = query

    def watch_standby(self, status: Callable[[], HaStatus]) -> None:
        """The replica's lease (``pipeline.standby.Standby.status``), read at each probe."""
        with self._lock:
            self._ha = status

    def ha_status(self) -> HaStatus:
        with self._lock:
            status = self._ha
        if status is None:
            return HaStatus("off")
        try:
            return status()
        except Exception:  # a metrics problem must never fail the pipeline
            return HaStatus("off")

    def query_active(self) -> bool:
        return self._query_state()[0]

    def _query_state(self) -> tuple[bool, str]:
        with self._lock:
            query, active, reason = self._query, self._query_active, self._query_reason
        if query is None:
            return active, reason
        try:
            if query.isActive:
                return True, ""
            exc = query.exception()
        except Exception as e:  # JVM gone (shutdown) or py4j error
            return False, f"query status unavailable ({type(e).__name__})"
        return False, "query terminated" + (f": {one_line(exc)}" if exc is not None else "")

    def readiness(self) -> tuple[bool, str]:
        """``(ready, reason)``: query active, last batch not failed, not fenced."""
        with self._lock:
            fenced, failed = self._fenced, self._failed
        if fenced is not None:
            return False, f"writer fenced: {fenced}"
        if failed is not None:
            return False, failed
        ha = self.ha_status()
        if ha.role == "standby":
            return (True, "") if ha.warm else (False, "standby warming up")
        active, reason = self._query_state()
        if not active:
            return False, reason or "query not active"
        return True, ""

    # -- exposition --------------------------------------------------------------------

    def exposition(self) -> bytes:
        """What ``/metrics`` serves in the Prometheus text format."""
        return generate_latest(self._exposition)

    def exported_names(self) -> set[str]:
        """Every series name ``/metrics`` can contain (suffixes included)."""
        suffixes = {
            "counter": ("_total",),
            "histogram": ("_bucket", "_sum", "_count"),
            "summary": ("", "_sum", "_count"),
            "info": ("_info",),
        }
        names: set[str] = set()
        for family in self._exposition.collect():
            names.update(family.name + s for s in suffixes.get(family.type, ("",)))
            names.update(s.name for s in family.samples)
        return names
