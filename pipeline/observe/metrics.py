"""Prometheus metrics of the driver (DESIGN.md "Observability").

:class:`PipelineMetrics` owns its own ``CollectorRegistry`` (never the process-global one,
so several pipelines or tests can live in one process), the HTTP endpoint
(``/metrics``, ``/healthz``, ``/readyz``; :mod:`pipeline.observe.health`) and a background
thread that refreshes consumer lag from the broker every ``metrics.lagRefreshSeconds``,
also while no batch runs. :func:`attach` wires one to a :class:`~pipeline.app.Pipeline`.

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
    table's newest snapshot of the pipeline at start), or since the exporter started when
    the table holds none.
  * ``ready``: 1 when ``/readyz`` answers 200: the streaming query is active, the last
    batch did not fail and the writer was not fenced.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import math
import platform
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

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

from pipeline.commit.offsets import BrokerOffsets, TopicPartition
from pipeline.observe.health import HealthServer
from pipeline.observe.logs import batch_log_line, batch_logger

if TYPE_CHECKING:
    from pipeline.app import Pipeline
    from pipeline.config import PipelineConfig

log = logging.getLogger(__name__)

__all__ = [
    "COMMITTING_OUTCOMES",
    "OUTCOMES",
    "PHASES",
    "OutcomeLike",
    "PipelineMetrics",
    "attach",
    "batch_log_line",
]

#: Values of ``ingest_commits_total{outcome}``.
OUTCOMES: tuple[str, ...] = (
    "committed",
    "replay_skipped",
    "recommitted",
    "rolled_back",
    "fenced",
    "failed",
)
#: Other outcome spellings of the coordinator, counted as the canonical value.
OUTCOME_ALIASES: dict[str, str] = {
    "at_least_once": "committed",
    "overlap_skipped": "replay_skipped",
}
#: Outcomes that made records visible in the table.
COMMITTING_OUTCOMES = frozenset({"committed", "recommitted"})
#: Outcomes that complete a Spark micro-batch (``ingest_batches_total``).
BATCH_OUTCOMES = frozenset({"committed", "recommitted", "replay_skipped"})
#: Values of ``ingest_phase_duration_seconds{phase}`` (anything else is dropped).
PHASES: tuple[str, ...] = ("request", "write", "precommit", "commit", "recovery")
#: Label value standing in for topics / partitions beyond the cardinality caps.
OTHER = "_other"

_PHASE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class OutcomeLike(Protocol):
    """What :meth:`PipelineMetrics.observe_outcome` reads (``BatchOutcome`` fits).

    Optional attributes picked up when present: ``instant`` (journal instant id),
    ``epoch`` (writer epoch), ``topic_records`` / ``topic_bytes`` (``{topic: n}``, exact
    per-topic split), ``bytes`` (total data-file bytes), ``data_loss``
    (``{TopicPartition: (start, end)}`` skipped by retention), ``pending_instants``,
    ``overlap_dropped`` (records dropped as already committed) and ``recovered``
    (``[(instant, action)]`` with action completed / recommitted / rolled_back).
    """

    @property
    def batch_id(self) -> int: ...

    @property
    def outcome(self) -> str: ...

    @property
    def records(self) -> int: ...

    @property
    def dead_letter_records(self) -> int: ...

    @property
    def files(self) -> int: ...

    @property
    def ranges(self) -> Mapping[TopicPartition, tuple[int, int]]: ...

    @property
    def committed(self) -> Mapping[TopicPartition, int]: ...

    @property
    def timings(self) -> Mapping[str, float]: ...


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


def one_line(exc: BaseException | str, limit: int = 300) -> str:
    """A short single-line reason: the pipeline error message when one is inside."""
    if isinstance(exc, str):
        text = exc
    else:
        from pipeline.errors import find_pipeline_error

        text = find_pipeline_error(exc) or f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def is_fencing_error(exc: BaseException) -> bool:
    """A newer writer epoch owns the table (also when Spark wrapped the error)."""
    from pipeline.errors import FencedError

    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, FencedError):
            return True
        desc = getattr(cur, "desc", None)
        if "[ingest:fenced]" in str(cur) or (isinstance(desc, str) and "[ingest:fenced]" in desc):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


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


LagFetch = Callable[[], Mapping[TopicPartition, BrokerOffsets]]


class PipelineMetrics:
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
        sink_format: str = "iceberg",
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
        info.labels(pipeline_id, table, sink_format).set(1)

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
        self._query_active = False
        self._query_reason = "query not started"
        self._warned: set[str] = set()
        self._observed_any = False

        self._exposition = _WithoutCreated(self.registry)
        self._server = HealthServer(self._exposition, self.readiness, host, port)
        self._bound_port = 0
        self._stop = threading.Event()
        self._lag_thread: threading.Thread | None = None

    @classmethod
    def from_config(cls, cfg: PipelineConfig) -> PipelineMetrics:
        return cls(
            cfg.id,
            table=cfg.sink.table,
            sink_format=cfg.sink.format,
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
        self._stop.set()
        thread, self._lag_thread = self._lag_thread, None
        if thread is not None:
            thread.join(timeout=10)
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

    # -- batches -----------------------------------------------------------------------

    def observe_outcome(
        self,
        outcome: OutcomeLike,
        *,
        bytes_written: int | None = None,
    ) -> None:
        """Account one coordinator result (a ``BatchOutcome``; recovered instants too).

        ``committed`` / ``recommitted``: records, bytes, dead letters, data loss, last
        commit time, committed offsets (lag). ``committed`` / ``recommitted`` /
        ``replay_skipped``: one more batch. Every outcome: ``commits_total{outcome}``,
        rolled-back instants listed in ``recovered``, the phase timings. Clears a
        previous failure (readiness) unless the outcome is ``failed`` / ``fenced``.
        ``bytes_written`` (total data-file bytes) is used when the outcome has no
        ``topic_bytes`` / ``bytes``.
        """
        kind = str(getattr(outcome, "outcome", ""))
        kind = OUTCOME_ALIASES.get(kind, kind)
        if kind not in OUTCOMES:
            self._warn_once(f"outcome:{kind}", "unknown batch outcome %r ignored", kind)
            return
        if kind == "failed":
            self.mark_failed(f"batch {getattr(outcome, 'batch_id', '?')} failed")
            return
        if kind == "fenced":
            self.mark_fenced(f"batch {getattr(outcome, 'batch_id', '?')} fenced")
            return
        recovered = list(getattr(outcome, "recovered", None) or ())
        with self._lock:
            first, self._observed_any = not self._observed_any, True
        # The coordinator recovers on the first batch of a run; later batches carry a
        # zero "recovery" timing that would drown the real recoveries in the histogram.
        ran_recovery = first or bool(recovered) or kind == "recommitted"
        for phase, seconds in (getattr(outcome, "timings", None) or {}).items():
            if phase != "recovery" or ran_recovery:
                self.observe_phase(phase, seconds)
        for _instant, action in recovered:
            if action == "rolled_back" or (action == "recommitted" and kind != "recommitted"):
                self.commits.labels(action).inc()
        epoch = getattr(outcome, "epoch", None)
        if isinstance(epoch, int):
            self.set_writer_epoch(epoch)
        pending = getattr(outcome, "pending_instants", None)
        if isinstance(pending, int):
            self.set_pending_instants(pending)
        self.commits.labels(kind).inc()
        if kind in BATCH_OUTCOMES:
            self.batches.inc()
            self.last_batch_id.set(int(getattr(outcome, "batch_id", -1)))
        with self._lock:
            self._failed, self._failed_exc = None, None
        if kind not in COMMITTING_OUTCOMES:
            return

        records = int(getattr(outcome, "records", 0) or 0)
        ranges: Mapping[TopicPartition, tuple[int, int]] = getattr(outcome, "ranges", None) or {}
        weights: dict[str, int] = {}
        for tp, (start, end) in ranges.items():
            weights[tp.topic] = weights.get(tp.topic, 0) + max(0, end - start)
        topic_records = getattr(outcome, "topic_records", None)
        per_topic = (
            {str(t): int(n) for t, n in topic_records.items()}
            if topic_records
            else split_by_weight(records, weights)
        )
        if records and not per_topic:
            per_topic = {OTHER: records}
        for topic, n in per_topic.items():
            self.records.labels(self._topic(topic)).inc(max(0, n))
        topic_bytes = getattr(outcome, "topic_bytes", None)
        if topic_bytes:
            byte_split = {str(t): int(n) for t, n in topic_bytes.items()}
        else:
            total = getattr(outcome, "bytes", None)
            total = bytes_written if total is None else int(total)
            byte_split = split_by_weight(int(total or 0), per_topic or weights)
        for topic, n in byte_split.items():
            self.bytes.labels(self._topic(topic)).inc(max(0, n))
        self.dead_letter_records.inc(max(0, int(getattr(outcome, "dead_letter_records", 0) or 0)))
        self.overlap_dropped_records.inc(max(0, int(getattr(outcome, "overlap_dropped", 0) or 0)))
        for tp, (start, end) in (getattr(outcome, "data_loss", None) or {}).items():
            self.record_data_loss(tp.topic, end - start)
        self.set_last_commit_time(self._clock())
        committed = getattr(outcome, "committed", None)
        if committed:
            self.update_committed_offsets(committed)

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

    def count_outcome(self, outcome: str, n: int = 1) -> None:
        """Bare ``commits_total{outcome} += n`` (e.g. instants rolled back in recovery),
        without records or readiness effects."""
        if outcome not in OUTCOMES:
            self._warn_once(f"outcome:{outcome}", "unknown outcome %r ignored", outcome)
            return
        self.commits.labels(outcome).inc(n)

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
        self.commits.labels("failed").inc()

    def mark_fenced(self, reason: BaseException | str = "") -> None:
        """A newer writer epoch owns the table: ``commits_total{fenced}`` +1 (once),
        ``writer_fenced`` 1, not ready from now on."""
        with self._lock:
            if self._fenced is not None:
                return
            self._fenced = one_line(reason) if reason else "a newer writer epoch owns the table"
        self.writer_fenced.set(1)
        self.commits.labels("fenced").inc()

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
        active, reason = self._query_state()
        if not active:
            return False, reason or "query not active"
        return True, ""

    # -- lag ---------------------------------------------------------------------------

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

    # -- helpers -------------------------------------------------------------------------

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


# -- wiring a Pipeline -----------------------------------------------------------------


def _ancestry(table: Any, limit: int) -> Iterator[Any]:
    snapshot = table.current_snapshot()
    for _ in range(limit):
        if snapshot is None:
            return
        yield snapshot
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None


def _summary(snapshot: Any) -> Mapping[str, str]:
    return snapshot.summary.additional_properties if snapshot.summary is not None else {}


def batch_snapshot_summary(
    pipeline: Pipeline, batch_id: int, depth: int = 16
) -> Mapping[str, str] | None:
    """Summary of the main-table snapshot that committed ``batch_id`` of this pipeline
    (searched among the newest ``depth`` snapshots), or None."""
    from pipeline.formats.iceberg.table import BATCH_ID_KEY, FENCE_KEY, PIPELINE_ID_KEY

    table = pipeline.sinks.main.table()
    if table is None:
        return None
    for snapshot in _ancestry(table, depth):
        s = _summary(snapshot)
        if (
            s.get(PIPELINE_ID_KEY) == pipeline.cfg.id
            and s.get(BATCH_ID_KEY) == str(batch_id)
            and FENCE_KEY not in s
        ):
            return s
    return None


def summary_data_loss(summary: Mapping[str, str]) -> dict[TopicPartition, tuple[int, int]]:
    """The ``ingest.data-loss`` ranges of a snapshot summary (empty when none)."""
    import json

    from pipeline.formats.iceberg.table import DATA_LOSS_KEY

    text = summary.get(DATA_LOSS_KEY)
    if not text:
        return {}
    out = {}
    for topic, parts in json.loads(text).items():
        for partition, (start, end) in parts.items():
            out[TopicPartition(topic, int(partition))] = (int(start), int(end))
    return out


def last_commit_time(pipeline: Pipeline, depth: int = 1000) -> float | None:
    """Unix time of the newest main-table snapshot carrying this pipeline's checkpoint."""
    from pipeline.formats.iceberg.table import FENCE_KEY, PIPELINE_ID_KEY

    table = pipeline.sinks.main.table()
    if table is None:
        return None
    for snapshot in _ancestry(table, depth):
        s = _summary(snapshot)
        if s.get(PIPELINE_ID_KEY) == pipeline.cfg.id and FENCE_KEY not in s:
            return float(snapshot.timestamp_ms) / 1000.0
    return None


def pending_instants(pipeline: Pipeline) -> int | None:
    """Pending instants in the pipeline's journal (None in at-least-once mode)."""
    timeline = getattr(pipeline, "timeline", None)
    return None if timeline is None else len(timeline.pending())


class KafkaLagSource:
    """``fetch()`` for :meth:`PipelineMetrics.start_lag_refresh`: the partitions the
    pipeline's source config selects and their broker offsets. The first call also seeds
    committed offsets and the last commit time from the table (authoritative); every call
    refreshes the pending-instant count from the journal and picks up ``stats.fenced``."""

    def __init__(self, pipeline: Pipeline, metrics: PipelineMetrics, timeout_s: float) -> None:
        self._pipeline = pipeline
        self._metrics = metrics
        self._timeout = timeout_s
        self._md: Any = None
        self._seeded = False

    def partitions(self) -> list[TopicPartition]:
        s = self._pipeline.cfg.source
        if s.assign:
            return sorted(TopicPartition(t, p) for t, ps in s.assign.items() for p in ps)
        md = self._metadata()
        topics = list(s.topics) if s.topics else md.topics_matching(s.topic_pattern or "")
        return md.partitions_of(topics) if topics else []

    def _metadata(self) -> Any:
        if self._md is None:
            from pipeline.kafka.client import KafkaMetadata

            self._md = KafkaMetadata(self._pipeline.sources_conf(), timeout_s=self._timeout)
        return self._md

    def _seed(self) -> None:
        committed = self._pipeline.sinks.main.committed_offsets(self._pipeline.cfg.id)
        if committed:
            self._metrics.update_committed_offsets(committed)
        ts = last_commit_time(self._pipeline)
        if ts is not None:
            self._metrics.set_last_commit_time(ts)
        self._seeded = True

    def __call__(self) -> Mapping[TopicPartition, BrokerOffsets]:
        if getattr(getattr(self._pipeline, "stats", None), "fenced", False):
            # Pipeline.run's idle epoch check fences outside any batch
            self._metrics.mark_fenced("a newer writer epoch took over the table")
        if not self._seeded:
            self._seed()
        try:
            pending = pending_instants(self._pipeline)
        except Exception as e:
            log.debug("pending instants unknown: %s", e)
        else:
            if pending is not None:
                self._metrics.set_pending_instants(pending)
        tps = self.partitions()
        return dict(self._metadata().offsets(tps)) if tps else {}


def attach(pipeline: Pipeline, *, serve: bool | None = None, wrap: bool = True) -> PipelineMetrics:
    """Wire a :class:`PipelineMetrics` to ``pipeline`` and start it; returns it.

    * ``pipeline.on_batch`` is wrapped (an existing callback still runs, after ours):
      every ``BatchOutcome`` is observed and logged as one JSON line on
      ``pipeline.batches``. Bytes and data-loss ranges the outcome does not carry are read
      from the summary of the snapshot that committed the batch; the pending-instant
      count from the journal; the writer epoch from ``pipeline.coordinator.epoch``.
    * ``wrap=True`` also wraps ``pipeline.process_batch`` (an exception marks the batch
      failed; a fencing error fences) and ``pipeline.start`` (the returned query is
      watched for readiness, the acquired epoch exported). Pass ``wrap=False`` when the
      caller reports these itself (``mark_failed``, ``watch_query``, ``set_writer_epoch``).
    * ``serve`` (default ``cfg.metrics.enabled``): start the HTTP endpoint and the lag
      thread (every ``cfg.metrics.lagRefreshSeconds``).

    Call :meth:`PipelineMetrics.stop` when done.
    """
    cfg = pipeline.cfg
    metrics = PipelineMetrics.from_config(cfg)
    s = cfg.source
    metrics.declare_topics(s.topics or list((s.assign or {}).keys()))

    def export_epoch() -> None:
        epoch = getattr(getattr(pipeline, "coordinator", None), "epoch", None)
        if isinstance(epoch, int):
            metrics.set_writer_epoch(epoch)

    export_epoch()
    batch_log = batch_logger()
    previous = pipeline.on_batch

    def on_batch(outcome: Any) -> None:
        nbytes: int | None = None
        try:
            if outcome.outcome in COMMITTING_OUTCOMES or outcome.outcome == "at_least_once":
                summary = batch_snapshot_summary(pipeline, outcome.batch_id)
                if summary is not None:
                    size = summary.get("added-files-size")
                    nbytes = int(size) if size is not None else None
                    if getattr(outcome, "data_loss", None) is None:
                        for tp, (start, end) in summary_data_loss(summary).items():
                            metrics.record_data_loss(tp.topic, end - start)
            metrics.observe_outcome(outcome, bytes_written=nbytes)
            if getattr(outcome, "epoch", None) is None:
                export_epoch()
            pending = pending_instants(pipeline)
            if pending is not None:
                metrics.set_pending_instants(pending)
        except Exception:
            log.warning("metrics: could not account batch %s", outcome.batch_id, exc_info=True)
        try:
            epoch = getattr(getattr(pipeline, "coordinator", None), "epoch", None)
            line = batch_log_line(
                outcome,
                pipeline_id=cfg.id,
                bytes_written=nbytes,
                epoch=epoch if isinstance(epoch, int) else None,
            )
            batch_log.info(line)
        except Exception:
            log.warning("could not log batch %s", outcome.batch_id, exc_info=True)
        if previous is not None:
            previous(outcome)

    pipeline.on_batch = on_batch

    if wrap:
        process_batch = pipeline.process_batch
        start = pipeline.start

        def process_batch_observed(df: Any, batch_id: int) -> None:
            try:
                process_batch(df, batch_id)
            except Exception as e:
                metrics.mark_failed(e, batch_id)
                raise

        def start_observed() -> Any:
            try:
                query = start()
            except Exception as e:
                if is_fencing_error(e):
                    metrics.mark_fenced(e)
                raise
            export_epoch()
            metrics.watch_query(query)
            return query

        pipeline.process_batch = process_batch_observed  # type: ignore[method-assign]
        pipeline.start = start_observed  # type: ignore[method-assign]

    if cfg.metrics.enabled if serve is None else serve:
        metrics.start()
        interval = cfg.metrics.lag_refresh_seconds
        source = KafkaLagSource(pipeline, metrics, timeout_s=min(30.0, max(5.0, interval)))
        metrics.start_lag_refresh(source, interval)
    pipeline.metrics = metrics  # Pipeline.run reuses it instead of starting another
    return metrics
