"""Many tables from one Connect job: Iceberg's Kafka Connect sink routing N filled topics
into N tables, measured like every peer, for the many-tables bench to compare against.

:func:`run_connect_tables` takes topics already filled on a broker, reads their
watermarks (the truth the count is held to), prepares the ``iceberg-kafka-connect`` peer
with one table per topic (:mod:`.kafka_connect_config` writes the static routes), runs it
in its own cgroup through the peers harness (:func:`~lab.peers.runner.run_peer`: CPU of
the whole process tree and peak resident memory) until the tables together hold every
record, then counts each table's (topic, partition, offset) triples against its topic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KTopicPartition

from lab.peers import kafka_connect_config as conf
from lab.peers.checker import Tally, tally_routed, total
from lab.peers.kafka_connect import IcebergKafkaConnectPeer
from lab.peers.model import PeerJob
from lab.peers.runner import PeerRun, run_peer
from pipeline.kafka.client import consumer_config

Ranges = dict[str, dict[int, tuple[int, int]]]  # topic -> partition -> (low, high)


@dataclass(frozen=True)
class TablesRun:
    """One measured run of the sink over many topics, and its count."""

    run: PeerRun  # records, wall and CPU at the moment every record was visible, peak RSS
    tables: dict[str, str]  # topic -> its table
    table_records: dict[str, int]  # table -> rows it holds
    tallies: dict[str, Tally]  # topic -> its records counted in its own table

    @property
    def exactly_once(self) -> bool:
        return all(t.exactly_once for t in self.tallies.values())

    def summary(self) -> dict[str, Any]:
        out = self.run.summary()
        out["tables"] = len(self.tables)
        out["table_records"] = dict(self.table_records)
        out["tally"] = total(self.tallies).as_dict()
        out["exactly_once"] = self.exactly_once
        return out


def watermarks(bootstrap: str, topics: Sequence[str]) -> Ranges:
    """Every partition's (low, high) watermarks of each topic, read now."""
    consumer = Consumer(consumer_config(bootstrap, client_id="bench-check"))
    try:
        meta = consumer.list_topics(timeout=30).topics
        out: Ranges = {}
        for topic in topics:
            if topic not in meta or meta[topic].error is not None:
                raise ValueError(f"topic {topic!r} is not on the broker at {bootstrap}")
            out[topic] = {
                p: consumer.get_watermark_offsets(KTopicPartition(topic, p), timeout=30)
                for p in sorted(meta[topic].partitions)
            }
        return out
    finally:
        consumer.close()


def many_tables_job(
    bootstrap: str,
    topics: Sequence[str],
    work: Path,
    ranges: Mapping[str, Mapping[int, tuple[int, int]]],
    payload: bool = False,
    batch: int | None = 200_000,
) -> PeerJob:
    return PeerJob(
        bootstrap=bootstrap,
        topic=topics[0],
        partitions=max(len(r) for r in ranges.values()),
        payload=payload,
        work=work,
        max_records_per_trigger=batch,
        topics=tuple(topics),
    )


def run_connect_tables(
    bootstrap: str,
    topics: Sequence[str],
    work: Path,
    *,
    payload: bool = False,
    batch: int | None = 200_000,
    timeout_s: float = 900.0,
) -> TablesRun:
    """Run the sink from the earliest offsets of ``topics`` (filled, no longer written)
    into a table per topic under ``work`` until every record is committed; count them.
    Raises :class:`~lab.peers.runner.PeerRunError` when it does not get there."""
    if not topics:
        raise ValueError("no topics to read")
    ranges = watermarks(bootstrap, topics)
    job = many_tables_job(bootstrap, topics, work, ranges, payload, batch)
    peer = IcebergKafkaConnectPeer()
    peer.prepare(job)
    expected = sum(hi - lo for r in ranges.values() for lo, hi in r.values())
    run = run_peer(peer, job, expected, timeout_s, tag="tables")
    rows = peer.table_rows(job)
    tables = conf.tables(job)
    return TablesRun(
        run=run,
        tables=tables,
        table_records={tables[t]: r.num_rows for t, r in rows.items()},
        tallies=tally_routed(rows, ranges),
    )
