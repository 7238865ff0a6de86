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
the snapshots committed inside the window.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

import numpy as np

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
