"""End-to-end freshness and recovery time on a live, steadily fed pipeline.

A :class:`RateProducer` thread writes generated events at a steady rate below capacity;
the pipeline runs with a 1-second processing-time trigger. After a warm-up of a few
commits the measurement window opens; when it closes the driver is SIGKILLed (the whole
process group) and restarted on the same checkpoint while the producer keeps going:
*recovery time* is restart → first new commit, and kill → first new commit.

Freshness per record is read back **from the table**: every Iceberg snapshot of the
pipeline carries its offset ranges (``ingest.ranges``) and its timestamp (the commit's
visibility time, set by the committing driver); every row carries ``_kafka_timestamp``
(the producer's CreateTime). freshness = snapshot time - Kafka timestamp, for the rows of
the snapshots committed inside the window. :func:`freshness_and_recovery` measures both
and returns the ``freshness`` and ``recovery`` sections of the report.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterable
from typing import Any

import numpy as np

from lab.bench import stats
from lab.bench.context import WARMUP_COMMITS, WINDOW_COMMITS, Context
from lab.bench.context import rounded as _round
from lab.bench.driver import BenchRunError, DriverRun, write_config
from lab.bench.presets import EO
from lab.bench.runs import RunSpec, pipeline_config
from pipeline.commit.offsets import TopicPartition


class RateProducer:
    """Generated events at ``rate``/s, round-robin over partitions, until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float, seed: int = 11):
        self.bootstrap, self.topic, self.partitions, self.rate = bootstrap, topic, partitions, rate
        self.seed = seed
        self.acked = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-producer", daemon=True)

    def start(self) -> RateProducer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)

    def _run(self) -> None:
        from confluent_kafka import KafkaError, Message, Producer

        from lab.bench.dataset import PRODUCER_CONFIG
        from lab.generator import GeneratorSpec, generate_events, send_paced

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": "true",
                "acks": "all",
                **PRODUCER_CONFIG,
                "linger.ms": "10",  # freshness: hold records back little
                "client.id": "bench-producer",
            }
        )

        def report(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                self.errors.append(f"{err.name()}: {err.str()}")
            else:
                self.acked += 1

        next_slot = time.monotonic()
        events = generate_events(GeneratorSpec(count=10**9, seed=self.seed))
        for i, (key, value) in enumerate(events):
            if self._stop.is_set():
                break
            next_slot = send_paced(
                producer, self.topic, key, value, i % self.partitions, report, next_slot, self.rate
            )
        producer.flush(30)


def freshness_from_table(
    table: Any, pipeline_id: str, window: tuple[float, float]
) -> tuple[np.ndarray, int]:
    """Seconds from Kafka timestamp to commit visibility for the rows of the pipeline's
    snapshots committed inside ``window`` (epoch seconds); also the snapshot count."""
    from pipeline.commit.checkpoint import CommitCheckpoint

    # (partition -> list of (start, end, commit time)) for snapshots inside the window
    spans: dict[TopicPartition, list[tuple[int, int, float]]] = {}
    snapshots = 0
    for snap in table.metadata.snapshots:
        summary = snap.summary.additional_properties if snap.summary is not None else {}
        cp = CommitCheckpoint.from_summary(summary)
        t = snap.timestamp_ms / 1000.0
        if cp is None or cp.pipeline_id != pipeline_id or not window[0] <= t <= window[1]:
            continue
        if not cp.ranges:
            continue  # a fence snapshot
        snapshots += 1
        for tp, (s, e) in cp.ranges.items():
            spans.setdefault(TopicPartition(*tp), []).append((s, e, t))
    if not spans:
        return np.array([], dtype=float), 0
    rows = table.scan(
        selected_fields=("_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp")
    ).to_arrow()
    out: list[np.ndarray] = []
    topics = rows.column("_kafka_topic").to_numpy(zero_copy_only=False)
    parts = rows.column("_kafka_partition").to_numpy()
    offsets = rows.column("_kafka_offset").to_numpy()
    stamps = rows.column("_kafka_timestamp").cast("int64").to_numpy() / 1e6
    for tp, ranges in spans.items():
        mine = (topics == tp.topic) & (parts == tp.partition)
        offs, ts = offsets[mine], stamps[mine]
        for s, e, t in ranges:
            sel = (offs >= s) & (offs < e)
            out.append(t - ts[sel])
    return np.concatenate(out) if out else np.array([], dtype=float), snapshots


def cdf_points(values: Iterable[float], points: int = 101) -> list[float]:
    """Quantiles 0, 1, …, 100 % (enough to redraw the CDF from report.json)."""
    arr = np.asarray(list(values), dtype=float)
    if arr.size == 0:
        return []
    return [float(x) for x in np.percentile(arr, np.linspace(0, 100, points))]


def freshness_and_recovery(ctx: Context) -> tuple[dict[str, Any], dict[str, Any]]:
    from pipeline.app import Pipeline
    from pipeline.config import parse_config

    p = ctx.preset
    # The producer starts once the query is active, so the pipeline never has a backlog to
    # drain: the preset's partition count, like the throughput data set.
    parts = p.partitions
    topic = f"bench-fresh-{int(time.time())}"
    ctx.broker.create_topic(topic, parts)
    spec = RunSpec(
        format="iceberg", mode=EO, cores=2, trigger="1 second", starting_offsets="earliest"
    )
    name = ctx.next_name("freshness")
    workdir = ctx.work / name
    cfg = pipeline_config(spec, name, workdir, ctx.broker.bootstrap_servers, topic)
    path = write_config(workdir / "pipeline.yaml", cfg)
    ctx.say(
        f"freshness: {p.freshness_rate:,.0f} records/s for {p.freshness_seconds:.0f}s, "
        "1 s trigger; then SIGKILL and restart"
    )
    producer = RateProducer(ctx.broker.bootstrap_servers, topic, parts, p.freshness_rate)
    run: DriverRun | None = None
    restart: DriverRun | None = None
    try:
        run = DriverRun(name, path, ctx.work / "logs")
        deadline = time.monotonic() + p.timeout_s
        while not run.ready():
            if not run.alive() or time.monotonic() > deadline:
                raise BenchRunError(f"freshness run never became ready (log: {run.err_path})")
            time.sleep(0.2)
        producer.start()
        while run.committed_count() < WARMUP_COMMITS:
            if not run.alive() or time.monotonic() > deadline:
                raise BenchRunError(
                    f"freshness run made {run.committed_count()} commits in "
                    f"{p.timeout_s:.0f}s (log: {run.err_path})"
                )
            time.sleep(0.2)
        window_start = time.time()
        in_window = run.committed_count()
        time.sleep(p.freshness_seconds)
        # a slow host: keep the window open until it holds a few commits
        while run.committed_count() - in_window < WINDOW_COMMITS and run.alive():
            if time.monotonic() > deadline:
                raise BenchRunError(f"freshness run stalled (log: {run.err_path})")
            time.sleep(0.2)
        if not run.alive():
            raise BenchRunError(f"freshness run stopped early: {run.tail(600)}")
        t_kill = time.time()
        run.kill()
        first_result = run.finish()
        restart = DriverRun(f"{name}-restart", path, ctx.work / "logs")
        t_restart = time.time()
        while restart.committed_count() < 1:
            if not restart.alive() or time.monotonic() > deadline + 300:
                raise BenchRunError(f"restarted run did not commit (log: {restart.err_path})")
            time.sleep(0.1)
        first_new = min(restart.batches, key=lambda b: b.ts)
        restart.stop()
        restart_result = restart.finish()
    finally:
        producer.stop()
        for driver in (run, restart):
            if driver is not None and driver.alive():
                driver.kill()
    pipe = Pipeline(parse_config(cfg))
    iceberg: Any = pipe.tables.commit_tables().main  # an Iceberg run: its pyiceberg table
    table = iceberg.table()
    values, snapshots = freshness_from_table(table, cfg["id"], (window_start, t_kill))
    if values.size == 0:
        raise BenchRunError("freshness: no committed rows inside the measurement window")
    ctx.eo_batches.setdefault("iceberg", []).extend(
        b for b in first_result.committed if b.ts >= window_start
    )
    shutil.rmtree(workdir, ignore_errors=True)
    fresh = {
        "format": "iceberg",
        "rate_records_per_s": p.freshness_rate,
        "trigger": "processing-time 1 second",
        "window_seconds": _round(t_kill - window_start, 2),
        "records": int(values.size),
        "snapshots": snapshots,
        "p50_s": _round(float(stats.percentile(values.tolist(), 50)), 3),
        "p99_s": _round(float(stats.percentile(values.tolist(), 99)), 3),
        "max_s": _round(float(values.max()), 3),
        "cdf_s": cdf_points(values.tolist()),
        "producer_acked": producer.acked,
        "producer_errors": producer.errors[:5],
    }
    recovery = {
        "format": "iceberg",
        "kill": "SIGKILL of the driver's process group mid-stream",
        "restart_to_first_commit_s": _round(first_new.ts - t_restart, 2),
        "kill_to_first_commit_s": _round(first_new.ts - t_kill, 2),
        "first_outcome": first_new.outcome,
        "first_batch_records": first_new.records,
        "restart_process_cpu_seconds": _round(restart_result.cpu_seconds, 2),
    }
    return fresh, recovery
