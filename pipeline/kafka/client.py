"""confluent-kafka adapter: consumer settings and broker metadata for planning.

Nothing here joins a consumer group or commits offsets (docs/design.md invariant 1): the
consumer is configured with auto-commit and offset storing off and only ever ``assign()``s.

Broker outages: :class:`KafkaMetadata` built with ``retry_s > 0`` (the planner:
``source.brokerRetrySeconds``) retries metadata and offset requests that fail because no
broker answers, logging one warning per attempt, and raises ``BrokerUnavailableError``
once ``retry_s`` has passed. A missing topic or partition is never retried.
"""

from __future__ import annotations

import concurrent.futures
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from confluent_kafka import (
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
)
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from pipeline.commit.offsets import BrokerOffsets, TopicPartition
from pipeline.errors import BrokerUnavailableError, ConfigError, PartitionStateError

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# Settings the reader relies on; users cannot override them through kafka.* options.
_FORCED = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
    "auto.offset.reset": "error",  # we detect out-of-range ourselves (failOnDataLoss)
    "enable.partition.eof": "false",
}
# librdkafka's default fetch back-off pauses fetching for a second once 100k messages are
# queued, which capped throughput far below what the reader takes (figures:
# docs/bench.md, "Figures behind the code's choices"). How much a read prefetches is set
# per read from its range (``fetch_sizing``).
_DEFAULTS = {
    "fetch.queue.backoff.ms": "10",
    "fetch.wait.max.ms": "10",
    "socket.keepalive.enable": "true",
}
# (most records a read takes from one partition, queued.min.messages,
#  max.partition.fetch.bytes). With librdkafka's defaults each partition prefetches up to
# 100k messages past a read's range, so a small read fetched many times the bytes it
# delivered; these buckets bound the prefetch by the range. Every record fetched is
# decompressed and parsed in the task, so the small buckets matter most with many
# partitions. The limits allow about 128 B a record on the wire, the best of the sizes
# tried for small and large records alike; the broker returns a whole record batch
# however small the limit, so a low limit never slows a read of large batches (figures:
# docs/bench.md, "Figures behind the code's choices"). Buckets, not exact sizes: a pooled
# consumer is reused only by an equal config.
_FETCH_BUCKETS = (
    (32, 1_000, 4_096),
    (256, 1_000, 32_768),
    (1_000, 1_000, 262_144),
    (10_000, 10_000, 262_144),
    (100_000, 100_000, 1_048_576),
)
_QUEUE_KBYTES = 65_536
_UNKNOWN_TOPIC = (
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._UNKNOWN_TOPIC,
)


def fetch_sizing(records_per_partition: int) -> dict[str, str]:
    """Prefetch settings for a read that takes at most ``records_per_partition`` records
    from any one partition (the reader lets a user's ``source.kafka`` values win)."""
    _, qmin, partition_bytes = _FETCH_BUCKETS[-1]
    for bound, queued, size in _FETCH_BUCKETS:
        if records_per_partition <= bound:
            qmin, partition_bytes = queued, size
            break
    return {
        "queued.min.messages": str(qmin),
        "max.partition.fetch.bytes": str(partition_bytes),
        "queued.max.messages.kbytes": str(_QUEUE_KBYTES),
    }


_RETRIED_ATTEMPT_S = 5.0
_FORBIDDEN = {"group.instance.id", "enable.auto.commit", "auto.offset.reset"}


def consumer_config(
    bootstrap_servers: str,
    kafka_options: Mapping[str, str] | None = None,
    *,
    isolation_level: str = "read_committed",
    client_id: str = "ingest",
) -> dict[str, Any]:
    """librdkafka settings for an assign-only consumer.

    ``group.id`` is set to a random, never-used value because the client requires one for
    ``Consumer``; no group request is ever made because we never subscribe or commit.
    """
    extra = dict(kafka_options or {})
    bad = sorted(k for k in extra if k in _FORBIDDEN)
    if bad:
        raise ConfigError(
            f"kafka option(s) {', '.join(bad)} cannot be set: offsets are managed by the "
            "pipeline checkpoint, never by Kafka consumer groups"
        )
    if isolation_level not in ("read_committed", "read_uncommitted"):
        raise ConfigError(
            f"isolationLevel={isolation_level!r}; allowed: read_committed, read_uncommitted"
        )
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "client.id": client_id,
        "group.id": f"ingest-assign-only-{uuid.uuid4().hex}",
        "isolation.level": isolation_level,
        **_DEFAULTS,
        **extra,
        **_FORCED,
    }
    return conf


def admin_config(consumer_conf: Mapping[str, Any]) -> dict[str, Any]:
    """The connection part of a consumer config (security settings included)."""
    skip = set(_FORCED) | set(_DEFAULTS) | {"group.id", "isolation.level"}
    skip |= {"fetch.min.bytes", "fetch.max.bytes", "max.partition.fetch.bytes"}
    skip |= {"queued.min.messages", "queued.max.messages.kbytes"}
    skip |= {"session.timeout.ms", "max.poll.interval.ms"}
    return {k: v for k, v in consumer_conf.items() if k not in skip}


class KafkaMetadata:
    """Partition discovery and offsets, batched per request (used by the planner)."""

    def __init__(
        self, consumer_conf: Mapping[str, Any], timeout_s: float = 30.0, retry_s: float = 0.0
    ) -> None:
        self._conf = dict(consumer_conf)
        self._retry_s = max(0.0, retry_s)  # 0: one attempt (status, metrics, start-up)
        # Retried attempts are short: a request to a leader that just died waits for it
        # until the attempt times out, while a new attempt asks the new leader (drills on
        # real Kafka: a 30 s attempt held planning 30 s after a leader's SIGKILL).
        self._timeout = min(timeout_s, _RETRIED_ATTEMPT_S) if self._retry_s else timeout_s
        # Connection failures surface as our own one-line errors; librdkafka's per-retry
        # log lines on stderr would bury them.
        self._admin = AdminClient({**admin_config(self._conf), "log_level": 2})
        self._isolation = (
            IsolationLevel.READ_COMMITTED
            if self._conf.get("isolation.level") == "read_committed"
            else IsolationLevel.READ_UNCOMMITTED
        )

    @property
    def bootstrap_servers(self) -> str:
        return str(self._conf["bootstrap.servers"])

    def check_reachable(self) -> None:
        try:
            self._admin.list_topics(timeout=self._timeout)
        except KafkaException as e:
            raise BrokerUnavailableError(
                f"cannot reach Kafka at {self.bootstrap_servers} within {self._timeout:.0f}s "
                f"({_kerr(e)})"
            ) from None

    def topic_partitions(self, topics: Iterable[str]) -> dict[str, int]:
        """Number of partitions per topic; a missing topic is an error that names it."""
        names = list(topics)
        md = self._patiently("listing topics", self._list_topics)
        out = {}
        for name in names:
            t = md.topics.get(name)
            if t is None or t.error is not None or not t.partitions:
                raise PartitionStateError(
                    f"topic {name!r} does not exist on {self.bootstrap_servers} "
                    f"(or has no partitions)"
                )
            out[name] = len(t.partitions)
        return out

    def topics_matching(self, pattern: str) -> list[str]:
        rx = re.compile(pattern)
        md = self._patiently("listing topics", self._list_topics)
        return sorted(
            t
            for t, m in md.topics.items()
            if rx.fullmatch(t) and not t.startswith("__") and m.error is None
        )

    def partitions_of(self, topics: Iterable[str]) -> list[TopicPartition]:
        return [
            TopicPartition(t, p)
            for t, n in sorted(self.topic_partitions(topics).items())
            for p in range(n)
        ]

    def subscribed(
        self,
        assign: Mapping[str, Iterable[int]] | None,
        topics: Iterable[str] | None,
        topic_pattern: str | None,
    ) -> list[TopicPartition]:
        """The partitions a source reads now: ``assign``'s as given, else every partition
        of ``topics``, else of the topics ``topic_pattern`` matches."""
        if assign is not None:
            return sorted(TopicPartition(t, p) for t, ps in assign.items() for p in ps)
        names = list(topics or []) or self.topics_matching(topic_pattern or "")
        return self.partitions_of(names) if names else []

    def offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, BrokerOffsets]:
        """Log start and end per partition (end = last stable offset for read_committed)."""
        tps = list(tps)
        if not tps:
            return {}
        low = self._list_offsets(tps, OffsetSpec.earliest())
        high = self._list_offsets(tps, OffsetSpec.latest())
        return {tp: BrokerOffsets(low[tp], high[tp]) for tp in tps}

    def offsets_for_timestamp(
        self, tps: Iterable[TopicPartition], timestamp_ms: int
    ) -> dict[TopicPartition, int | None]:
        """First offset with a timestamp >= ``timestamp_ms``; None where no record has one."""
        tps = list(tps)
        found = self._list_offsets(tps, OffsetSpec.for_timestamp(timestamp_ms), none_found_ok=True)
        return {tp: (found[tp] if found[tp] >= 0 else None) for tp in tps}

    def _list_topics(self) -> Any:
        try:
            return self._admin.list_topics(timeout=self._timeout)
        except KafkaException as e:
            raise BrokerUnavailableError(
                f"cannot list topics on {self.bootstrap_servers}: {_kerr(e)}"
            ) from None

    def _patiently(self, what: str, attempt: Callable[[], _T]) -> _T:
        """``attempt()``, retried while it raises BrokerUnavailableError and ``retry_s``
        has not passed since the first failure."""
        started = time.monotonic()
        pause = 0.1  # a leader change heals in a metadata refresh; an outage takes longer
        while True:
            try:
                return attempt()
            except BrokerUnavailableError as e:
                waited = time.monotonic() - started
                if waited >= self._retry_s:
                    if self._retry_s <= 0:
                        raise
                    raise BrokerUnavailableError(
                        f"Kafka at {self.bootstrap_servers} unreachable for {waited:.0f}s "
                        f"while {what} (limit source.brokerRetrySeconds={self._retry_s:g}): "
                        f"{e.message}"
                    ) from None
                log.warning(
                    "Kafka at %s unreachable while %s (%s); waited %.0fs of %.0fs, retrying",
                    self.bootstrap_servers,
                    what,
                    e.message,
                    waited,
                    self._retry_s,
                )
                time.sleep(min(pause, max(0.0, self._retry_s - waited)))
                pause = min(2 * pause, 1.0)
                if waited > 1.0:
                    # librdkafka can keep a leader it learned during the outage as unknown
                    # ("Failed to query partition leader") after the broker is back; a new
                    # client starts from fresh metadata (a drill found this).
                    self._admin = AdminClient({**admin_config(self._conf), "log_level": 2})

    def _list_offsets(
        self, tps: list[TopicPartition], spec: OffsetSpec, *, none_found_ok: bool = False
    ) -> dict[TopicPartition, int]:
        return self._patiently(
            "listing offsets", lambda: self._list_offsets_once(tps, spec, none_found_ok)
        )

    def _list_offsets_once(
        self, tps: list[TopicPartition], spec: OffsetSpec, none_found_ok: bool
    ) -> dict[TopicPartition, int]:
        request = {KTopicPartition(tp.topic, tp.partition): spec for tp in tps}
        topics = sorted({tp.topic for tp in tps})  # named when the broker no longer knows one
        try:
            futures = self._admin.list_offsets(
                request, isolation_level=self._isolation, request_timeout=self._timeout
            )
            out = {}
            for ktp, fut in futures.items():
                topics = [ktp.topic]
                info = fut.result(timeout=self._timeout)
                offset = int(info.offset)
                # A broker going down mid-request can answer without an error but with
                # OFFSET_INVALID (-1001); taken as an end offset it reads as "topic
                # recreated". Only a timestamp look-up has a legitimate -1 (none found).
                if offset < 0 and not (none_found_ok and offset == -1):
                    raise BrokerUnavailableError(
                        f"listing offsets on {self.bootstrap_servers}: partition "
                        f"{ktp.topic}[{ktp.partition}] answered with no offset ({offset})"
                    )
                out[TopicPartition(ktp.topic, ktp.partition)] = offset
            return out
        except KafkaException as e:
            if _unknown_topic(e):  # deleted since it was looked up (a re-creation under way)
                raise PartitionStateError(
                    f"topic {', '.join(map(repr, topics))} does not exist on "
                    f"{self.bootstrap_servers} (listing offsets: {_kerr(e)})"
                ) from None
            raise BrokerUnavailableError(
                f"cannot list offsets on {self.bootstrap_servers}: {_kerr(e)}"
            ) from None
        except concurrent.futures.TimeoutError:
            # a partition whose leader is down: the request never completes
            raise BrokerUnavailableError(
                f"listing offsets on {self.bootstrap_servers} timed out after "
                f"{self._timeout:.0f}s (broker down or partition leader unavailable)"
            ) from None

    def topic_ids(self, topics: Iterable[str]) -> dict[str, str]:
        """Each topic's id (a new one whenever a topic is deleted and created again).
        A topic the broker does not know is left out: the offset listing names it."""
        names = sorted(set(topics))
        if not names:
            return {}
        return self._patiently("describing topics", lambda: self._topic_ids_once(names))

    def _topic_ids_once(self, names: list[str]) -> dict[str, str]:
        try:
            futures = self._admin.describe_topics(
                TopicCollection(names), request_timeout=self._timeout
            )
        except KafkaException as e:
            raise BrokerUnavailableError(
                f"cannot describe topics on {self.bootstrap_servers}: {_kerr(e)}"
            ) from None
        out = {}
        for name, fut in futures.items():
            try:
                out[name] = str(fut.result(timeout=self._timeout).topic_id)
            except KafkaException as e:
                if _unknown_topic(e):
                    continue
                raise BrokerUnavailableError(
                    f"cannot describe topic {name} on {self.bootstrap_servers}: {_kerr(e)}"
                ) from None
            except concurrent.futures.TimeoutError:
                raise BrokerUnavailableError(
                    f"describing topics on {self.bootstrap_servers} timed out after "
                    f"{self._timeout:.0f}s"
                ) from None
        return out


def _unknown_topic(e: KafkaException) -> bool:
    err = e.args[0] if e.args else None
    return isinstance(err, KafkaError) and err.code() in _UNKNOWN_TOPIC


def _kerr(e: KafkaException) -> str:
    err = e.args[0] if e.args else None
    if isinstance(err, KafkaError):
        return f"{err.name()}: {err.str()}"
    return str(e)
