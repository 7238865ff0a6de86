"""The benchmark's broker and pre-produced data set.

* :class:`BenchBroker` — the embedded librdkafka mock cluster running *inside the bench
  process* (its threads share the CPU with the pipeline under test; the raw ceiling runs
  against the same broker, so the ratio stays fair), or an external cluster.
* :func:`produce_dataset` writes ``N`` generated events (pipeline/tools/generator.py,
  ~260 B JSON each, no malformed records) round-robin over the partitions, zstd-compressed
  by the producer, and checks that every partition still starts at offset 0: the mock
  keeps only ~5 MB per partition, and a run over a truncated log would measure the wrong
  thing. :func:`partitions_for` sizes the topic so that this holds.
"""

from __future__ import annotations

import contextlib
import math
import uuid
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KTopicPartition

from pipeline.errors import PipelineError
from pipeline.kafka.client import consumer_config
from pipeline.tools.generator import GeneratorSpec, produce

#: Records per partition that fit the mock's 5 MB retention with room to spare (measured:
#: ~69k generated events per partition with zstd batches).
RECORDS_PER_PARTITION = 50_000
#: zstd-compressed bytes on the wire per record: ~72 for the plain events (5 MB / 69k), plus
#: ~0.36 per payload byte (the generator's text payload compresses about 3x; measured).
WIRE_BYTES_BASE, WIRE_BYTES_PER_PAYLOAD_BYTE = 72.0, 0.36
PRODUCER_CONFIG = {"compression.type": "zstd", "linger.ms": "20", "batch.size": "1000000"}


class RetentionError(PipelineError):
    code = "bench-retention"


def records_per_partition(payload_bytes: int = 0) -> int:
    """Records per partition that stay inside the mock's retention, for events with a
    ``payload_bytes`` payload (0: the plain ~270 B events)."""
    wire = WIRE_BYTES_BASE + WIRE_BYTES_PER_PAYLOAD_BYTE * payload_bytes
    return int(RECORDS_PER_PARTITION * WIRE_BYTES_BASE / wire)


def partitions_for(
    records: int, minimum: int = 8, payload_bytes: int = 0, headroom: float = 1.0
) -> int:
    """Partitions that hold ``records`` inside the mock's retention, each filled to at most
    ``headroom`` of :func:`records_per_partition`."""
    per_partition = headroom * records_per_partition(payload_bytes)
    return max(minimum, math.ceil(records / per_partition))


class BenchBroker:
    """Embedded mock cluster (default) or an external cluster at ``bootstrap``."""

    def __init__(self, bootstrap: str | None = None) -> None:
        self.embedded: Any = None
        if bootstrap is None:
            from pipeline.tools.broker import EmbeddedBroker

            self.embedded = EmbeddedBroker(num_brokers=1).start()
            self.bootstrap_servers: str = self.embedded.bootstrap_servers
        else:
            self.bootstrap_servers = bootstrap

    @property
    def kind(self) -> str:
        return (
            "embedded librdkafka mock cluster (in the bench process)"
            if self.embedded
            else ("external")
        )

    def create_topic(self, topic: str, partitions: int) -> None:
        if self.embedded is not None:
            self.embedded.create_topic(topic, partitions)
            return
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        for fut in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            fut.result(timeout=30)

    def watermarks(self, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
        consumer = Consumer(consumer_config(self.bootstrap_servers, client_id="bench-check"))
        try:
            return {
                p: consumer.get_watermark_offsets(KTopicPartition(topic, p), timeout=30)
                for p in range(partitions)
            }
        finally:
            consumer.close()

    def delete_topic(self, topic: str) -> None:
        """Free the embedded broker's memory of a data set no longer needed (external: no-op)."""
        if self.embedded is not None:
            # an older librdkafka without the symbol: keep it
            with contextlib.suppress(RuntimeError, NotImplementedError):
                self.embedded.delete_topic(topic)

    def stop(self) -> None:
        if self.embedded is not None:
            self.embedded.stop()


@dataclass(frozen=True)
class Dataset:
    topic: str
    partitions: int
    records: int
    produce_seconds: float
    payload_bytes: int = 0  # GeneratorSpec.payload_bytes: 0 = ~270 B events, 940 = ~1.2 KB

    def check_retained(self, broker: BenchBroker) -> None:
        """Every partition still starts at 0 and holds what was produced."""
        marks = broker.watermarks(self.topic, self.partitions)
        lost = {p: lo for p, (lo, _) in marks.items() if lo > 0}
        if lost:
            raise RetentionError(
                f"topic {self.topic}: the broker already deleted the head of partition(s) "
                f"{sorted(lost)} (log start {max(lost.values())}); use more partitions or "
                "fewer records (the embedded broker keeps ~5 MB per partition)"
            )
        total = sum(hi for _, hi in marks.values())
        if total != self.records:
            raise RetentionError(
                f"topic {self.topic} holds {total} records, {self.records} were produced"
            )


def produce_dataset(
    broker: BenchBroker,
    records: int,
    partitions: int | None = None,
    seed: int = 7,
    payload_bytes: int = 0,
) -> Dataset:
    import time

    parts = partitions or partitions_for(records, payload_bytes=payload_bytes)
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, parts)
    spec = GeneratorSpec(count=records, seed=seed, payload_bytes=payload_bytes)
    t0 = time.monotonic()
    result = produce(
        broker.bootstrap_servers, topic, spec, partitions=parts, extra_config=PRODUCER_CONFIG
    )
    elapsed = time.monotonic() - t0
    if result.produced != records:
        raise PipelineError(f"produced {result.produced} of {records} bench records")
    ds = Dataset(topic, parts, records, elapsed, payload_bytes)
    ds.check_retained(broker)
    return ds
