"""Topic, record, config and SCRAM-user operations through Kafka's admin API, each
returning once the cluster shows its effect (:class:`~lab.broker.KafkaCluster`
offers them as methods); :func:`await_leaders` works on any cluster, ours or an external
one."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import ElectionType, KafkaError
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

ADMIN_TIMEOUT_S = 30.0


def create_topic(
    admin: AdminClient,
    topic: str,
    partitions: int,
    replication_factor: int,
    config: Mapping[str, str] | None = None,
) -> None:
    """Create ``topic`` and return once every partition has a leader. An existing
    topic raises ``KafkaException`` (TOPIC_ALREADY_EXISTS)."""
    new = NewTopic(topic, partitions, replication_factor, config=dict(config or {}))
    _result(admin.create_topics([new], operation_timeout=ADMIN_TIMEOUT_S)[topic])
    _await_topic(admin, topic, lambda t: t is not None and _led(t, partitions))


def delete_topic(admin: AdminClient, topic: str) -> None:
    """Delete ``topic`` and return once no broker lists it."""
    _result(admin.delete_topics([topic], operation_timeout=ADMIN_TIMEOUT_S)[topic])
    _await_topic(admin, topic, lambda t: t is None)


def add_partitions(admin: AdminClient, topic: str, total: int) -> None:
    """Grow ``topic`` to ``total`` partitions (Kafka never shrinks one)."""
    _result(admin.create_partitions([NewPartitions(topic, total)])[topic])
    _await_topic(admin, topic, lambda t: t is not None and _led(t, total))


def delete_records(admin: AdminClient, topic: str, partition: int, before_offset: int) -> None:
    """Move the log start of ``topic``/``partition`` up to ``before_offset``
    (the admin API's DeleteRecords: what retention does, on demand)."""
    tp = KTopicPartition(topic, partition, before_offset)
    _result(next(iter(admin.delete_records([tp]).values())))


def set_topic_config(admin: AdminClient, topic: str, config: Mapping[str, str]) -> None:
    """Set topic-level configs (``retention.ms``, ``segment.ms`` ...) incrementally."""
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in config.items()
    ]
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    for fut in admin.incremental_alter_configs([res]).values():
        _result(fut)


def add_scram_user(admin: AdminClient, user: str, password: str) -> None:
    """Create (or update) a SCRAM-SHA-256 and -512 user for the SASL listeners."""
    for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        # one alteration per user and request (DUPLICATE_RESOURCE otherwise)
        upsert: list[UserScramCredentialAlteration] = [
            UserScramCredentialUpsertion(
                user, ScramCredentialInfo(mechanism, 4096), password.encode()
            )
        ]
        for fut in admin.alter_user_scram_credentials(upsert).values():
            _result(fut)


def leader(admin: AdminClient, topic: str, partition: int) -> int:
    """Node id leading ``topic``/``partition`` now (-1: none)."""
    md = admin.list_topics(topic, timeout=ADMIN_TIMEOUT_S)
    t = md.topics.get(topic)
    if t is None or partition not in t.partitions:
        return -1
    return int(t.partitions[partition].leader)


def replicas(admin: AdminClient, topic: str, partition: int) -> tuple[list[int], list[int]]:
    """(replicas, in-sync replicas) of ``topic``/``partition`` now."""
    md = admin.list_topics(topic, timeout=ADMIN_TIMEOUT_S)
    p = md.topics[topic].partitions[partition]
    return [int(r) for r in p.replicas], [int(r) for r in p.isrs]


def elect_unclean(admin: AdminClient, topic: str, partition: int, running: set[int]) -> None:
    """Let an out-of-sync replica lead ``topic``/``partition`` (it may lack records the old
    leader had: the log is truncated to what it holds); returns once one of the ``running``
    nodes leads it."""
    tp = KTopicPartition(topic, partition)
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    while True:
        # no request_timeout: confluent-kafka 2.16's elect_leaders raises SystemError with it.
        # The answer is per partition: a replica restarted a moment ago may not be eligible
        # yet, and a leader SIGKILLed a moment ago is still named until the controller
        # fences it (the election is then "not needed"), so retry until a running node leads.
        errors = _result(admin.elect_leaders(ElectionType.UNCLEAN, [tp]))
        error = next(iter(errors.values()), None) if errors else None
        md = admin.list_topics(topic, timeout=ADMIN_TIMEOUT_S)
        if md.topics[topic].partitions[partition].leader in running:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"unclean election of {topic}[{partition}] gave no leader within "
                f"{ADMIN_TIMEOUT_S:.0f}s: {error}"
            )
        time.sleep(0.5)


def _await_topic(admin: AdminClient, topic: str, done: Callable[[Any], bool]) -> None:
    deadline = time.monotonic() + ADMIN_TIMEOUT_S
    while True:
        md = admin.list_topics(timeout=ADMIN_TIMEOUT_S)
        t = md.topics.get(topic)
        if (
            t is not None
            and t.error is not None
            and t.error.code()
            in (
                KafkaError.UNKNOWN_TOPIC_OR_PART,
                KafkaError._UNKNOWN_TOPIC,
            )
        ):
            t = None
        if done(t):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {topic!r} did not reach the wanted state in time")
        time.sleep(0.1)


def _led(t: Any, partitions: int) -> bool:
    return (
        t.error is None
        and len(t.partitions) >= partitions
        and all(p.leader >= 0 and p.error is None for p in t.partitions.values())
    )


def await_leaders(
    admin: AdminClient, topic: str, partitions: int, timeout_s: float = ADMIN_TIMEOUT_S
) -> None:
    """Return once ``topic`` has at least ``partitions`` partitions, each with a leader (any
    cluster: ours or an external one); ``TimeoutError`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        t = admin.list_topics(topic, timeout=10).topics.get(topic)
        if t is not None and _led(t, partitions):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"topic {topic!r}: no leader for every partition after {timeout_s:.0f}s"
            )
        time.sleep(0.1)


def _result(fut: Any) -> Any:
    return fut.result(timeout=ADMIN_TIMEOUT_S)
