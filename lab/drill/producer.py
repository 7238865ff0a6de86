"""``RateProducer`` — a thread writing generated events (lab/generator.py) at a
set rate, round-robin over its topics and their partitions (a routed drill's topics;
``add_topic`` adds one mid-run), idempotent with ``acks=all`` (a record counts once
every in-sync replica has it), remembering every acknowledged (partition, offset): that set
is what the tables must hold exactly once.

Invariant: a drill never reads from Kafka to decide what was produced — only the
producer's delivery reports count. (A record in the tables at an offset no report named is
looked up in Kafka, to tell a record the pipeline invented from one whose acknowledgement
an outage lost: lab/drill/verdict.py.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from pipeline.commit.offsets import TopicPartition


class RateProducer:
    """Writes generated events at ``rate``/s until stopped; remembers acknowledged offsets."""

    def __init__(
        self,
        bootstrap: str,
        topic: str | Sequence[str],
        partitions: int,
        rate: float,
        seed: int,
        conf: dict[str, str] | None = None,
    ):
        self.topics = [topic] if isinstance(topic, str) else list(topic)
        self.topic = self.topics[0]
        self.bootstrap, self.partitions, self.rate = bootstrap, partitions, rate
        self.seed = seed
        self.conf = dict(conf or {})  # librdkafka settings over the defaults below
        self.acked: dict[TopicPartition, list[int]] = {}
        # Acknowledged without an offset, per partition: librdkafka reports a retried batch
        # the broker already had (DUPLICATE_SEQUENCE_NUMBER, e.g. after every node was
        # SIGKILLed before its acknowledgement got out) as delivered, offset unknown.
        self.unplaced: dict[TopicPartition, int] = {}
        self._trailing: dict[TopicPartition, int] = {}  # unplaced after the last known offset
        for t in self.topics:
            self._track(t)
        self.errors: list[str] = []
        # re-encodes each generated JSON value (value, malformed) -> bytes: Avro for the
        # registry drill, whose scenario swaps it for a new schema version mid-drill
        self.encode: Callable[[bytes, bool], bytes] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._flushed = threading.Event()  # set by the producer thread once paused and flushed
        self._thread = threading.Thread(target=self._run, name="drill-producer", daemon=True)

    def _track(self, topic: str) -> None:
        for p in range(self.partitions):
            tp = TopicPartition(topic, p)
            self.acked[tp], self.unplaced[tp], self._trailing[tp] = [], 0, 0

    def add_topic(self, topic: str) -> None:
        """Produce to ``topic`` too from now on (its ``partitions`` partitions exist)."""
        with self._lock:
            self._track(topic)
            self.topics.append(topic)

    @property
    def produced(self) -> int:
        with self._lock:
            return sum(len(v) for v in self.acked.values()) + sum(self.unplaced.values())

    def ends(self) -> dict[TopicPartition, int]:
        """Per partition: one past the highest acknowledged offset, plus the records
        acknowledged without an offset after it (an idempotent producer's deliveries come
        in offset order per partition)."""
        with self._lock:
            ends = {
                tp: (max(v) + 1 if v else 0) + self._trailing[tp] for tp, v in self.acked.items()
            }
        return {tp: end for tp, end in ends.items() if end}

    def expected(self) -> dict[TopicPartition, list[int]]:
        with self._lock:
            return {tp: sorted(v) for tp, v in self.acked.items() if v}

    def unplaced_counts(self) -> dict[TopicPartition, int]:
        """Per partition: records acknowledged without their offset (counted by
        :func:`~lab.drill.count.count_against` against the tables' records at
        offsets no acknowledgement named)."""
        with self._lock:
            return {tp: n for tp, n in self.unplaced.items() if n}

    def delivered(self, partition: int, offset: int | None, topic: str | None = None) -> None:
        """A delivery report without an error: at ``offset``, or at an offset librdkafka
        did not report (None; see ``unplaced``); ``topic``: the first one unless named."""
        tp = TopicPartition(topic or self.topic, partition)
        with self._lock:
            if offset is None or offset < 0:
                self.unplaced[tp] += 1
                self._trailing[tp] += 1
            else:
                self.acked[tp].append(offset)
                self._trailing[tp] = 0

    def start(self) -> None:
        self._thread.start()

    def pause(self, timeout: float = 30.0) -> None:
        """Stop producing; returns once the records in flight are flushed (acknowledged)."""
        self._flushed.clear()
        self._running.clear()
        self._flushed.wait(timeout)

    def resume(self) -> None:
        self._running.set()

    def stop(self) -> None:
        self._stop.set()
        self._running.set()
        self._thread.join(timeout=120)

    def _run(self) -> None:
        from confluent_kafka import KafkaError, Message, Producer

        from lab.generator import GeneratorSpec, generate_flagged, send_paced

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": "true",
                "acks": "all",
                "linger.ms": "5",
                "client.id": "drill-producer",
                "log_level": "2",  # broker outages are the point: no connection-refused spam
                **self.conf,
            }
        )

        def report(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                self.errors.append(f"{err.name()}: {err.str()}")
                return
            part = msg.partition()
            if part is not None:
                self.delivered(part, msg.offset(), msg.topic())

        spec = GeneratorSpec(count=10**9, malformed_fraction=0.01, seed=self.seed)
        next_slot = time.monotonic()
        for i, (key, generated, bad) in enumerate(generate_flagged(spec)):
            encode = self.encode
            value = generated if encode is None else encode(generated, bad)
            if self._stop.is_set():
                break
            if not self._running.is_set():
                producer.flush(5)
                self._flushed.set()
                self._running.wait()
                next_slot = time.monotonic()
            with self._lock:
                topics = list(self.topics)
            # topic by topic, then partition by partition: every partition of every topic
            # gets records at the same pace
            topic = topics[i % len(topics)]
            part = (i // len(topics)) % self.partitions
            next_slot = send_paced(producer, topic, key, value, part, report, next_slot, self.rate)
        while producer.flush(1.0) > 0:
            pass
