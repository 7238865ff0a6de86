"""Prometheus metrics of the driver (named by Prometheus conventions: ``_total``, ``_seconds``).

:class:`PipelineMetrics` owns its own ``CollectorRegistry`` (never the process-global one,
so several pipelines or tests can live in one process), the HTTP endpoint
(``/metrics``, ``/healthz``, ``/readyz``; :mod:`pipeline.observe.health`) and a background
thread that refreshes consumer lag from the broker every ``metrics.lagRefreshSeconds``,
also while no batch runs. It is split by job: the registry and exposition here, readiness
and the warm-standby series in :mod:`pipeline.observe.readiness`, outcome accounting in
:mod:`pipeline.observe.accounting`, lag in :mod:`pipeline.observe.lag`, the tables' data
files in :mod:`pipeline.observe.files`; a pipeline feeds it through
:class:`pipeline.observe.observers.MetricsObserver`.

The exported series, all prefixed ``ingest_``, are the ones :meth:`PipelineMetrics.__init__`
registers, each with its help text, plus :class:`~pipeline.observe.readiness.HaCollector`'s
and :class:`~pipeline.observe.files.FileMetrics`' (prometheus-client adds ``process_*`` and
``python_info``); :meth:`PipelineMetrics.exported_names` lists them. Labels are bounded:
``topic`` is capped at ``max_topics`` values, ``partition`` at ``max_lag_series`` series,
the rest are enums.
"""

from __future__ import annotations

import importlib.metadata
import platform
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
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
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from pipeline.commit.lease import HaStatus
from pipeline.commit.offsets import BrokerOffsets, TopicPartition
from pipeline.commit.types import MAIN
from pipeline.observe.accounting import (
    OUTCOMES,
    PHASES,
    OutcomeAccounting,
)
from pipeline.observe.files import FileMetrics
from pipeline.observe.health import HealthServer
from pipeline.observe.lag import LagExport
from pipeline.observe.readiness import HaCollector, Readiness

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


class PipelineMetrics(OutcomeAccounting, LagExport, Readiness):
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

        # counted on the committed and recommitted outcomes; bytes: of the data files those
        # commits added to the main table (Parquet, after compression)
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
        # per main table (a routed set: each of its tables), by identifier
        self.table_records = Counter(
            "ingest_table_records",
            "Records committed to each main table (dead letters excluded).",
            ["table"],
            registry=r,
        )
        self.table_names: dict[str, str] = {}  # name in the set -> identifier
        self.declare_tables({MAIN: table})
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
        for outcome in OUTCOMES:  # created at 0, so increase() sees the first event
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
        # per assigned partition; the broker's end is the last stable offset under
        # read_committed; a partition the table has no offset for yet: end minus log start
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
        # the last commit is seeded at start from the table's newest commit of the pipeline
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
        r.register(HaCollector(self))  # after the state it reads (described at register)

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

    def declare_tables(self, names: Mapping[str, str]) -> None:
        """The main tables (name in the set -> identifier), each one's series created at 0
        so a table idle since the start still shows (a routed set: every table)."""
        with self._lock:
            self.table_names = dict(names)
        for identifier in names.values():
            if identifier:
                self.table_records.labels(identifier)
