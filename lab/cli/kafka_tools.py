"""Kafka helpers: ``broker`` (real Apache Kafka on loopback) and ``produce`` (events)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from pipeline.cli.common import UsageError, out, require_broker, setup_logging

if TYPE_CHECKING:
    from lab.broker import KafkaCluster


def parse_topics(specs: list[str]) -> dict[str, int]:
    """``NAME[:PARTITIONS]`` each (8 partitions by default)."""
    topics: dict[str, int] = {}
    for spec in specs:
        name, _, n = spec.partition(":")
        try:
            topics[name] = int(n) if n else 8
        except ValueError:
            raise UsageError(f"--topic {spec!r}: expected NAME or NAME:PARTITIONS") from None
        if not name or topics[name] < 1:
            raise UsageError(f"--topic {spec!r}: expected NAME or NAME:PARTITIONS (at least 1)")
    return topics


def broker(
    topic: Annotated[list[str] | None, typer.Option(help="TOPIC[:PARTITIONS], repeatable")] = None,
    brokers: Annotated[int, typer.Option(help="number of Kafka nodes (KRaft)")] = 1,
    data_dir: Annotated[
        Path | None, typer.Option(help="keep the log here (default: a temporary directory)")
    ] = None,
) -> None:
    """Start real Apache Kafka (KRaft, broker+controller per node) on loopback until Ctrl-C.

    N nodes replicate topics min(N, 3) times (min.insync.replicas 2 from 3 nodes on);
    transactions are enabled. The jars come from the project's JVM manifest (fetched once)."""
    if brokers < 1:
        raise UsageError(f"--brokers {brokers}: at least 1")
    topics = parse_topics(topic or ["events:8"])
    if data_dir is not None and data_dir.exists() and not data_dir.is_dir():
        raise UsageError(f"--data-dir {data_dir}: is a file, not a directory")
    from lab.broker import KAFKA_VERSION, run_broker_forever

    setup_logging("broker", screen=logging.WARNING)

    def ready(cluster: KafkaCluster) -> None:
        out.print(
            f"Apache Kafka {KAFKA_VERSION}: {cluster.num_brokers} node(s), "
            f"replication factor {cluster.replication_factor}, data in {cluster.data_dir}"
        )
        out.print(f"bootstrap servers: {cluster.bootstrap_servers}")
        out.print(f"SASL/SCRAM bootstrap servers: {cluster.sasl_bootstrap_servers}")
        out.print(f"topics: {', '.join(f'{t} ({n} partitions)' for t, n in topics.items())}")
        out.print("press Ctrl-C to stop")
        sys.stdout.flush()

    run_broker_forever(brokers, topics, on_ready=ready, data_dir=data_dir)


def produce(
    bootstrap: Annotated[str, typer.Option(help="bootstrap servers")],
    topic: Annotated[str, typer.Option()] = "events",
    count: Annotated[int, typer.Option(min=0)] = 10_000,
    rate: Annotated[
        float | None, typer.Option(help="events/s; default: as fast as possible", min=0.001)
    ] = None,
    keys: Annotated[int, typer.Option(help="distinct keys (users)", min=1)] = 1_000,
    partitions: Annotated[int | None, typer.Option(help="round-robin over 0..N-1", min=1)] = None,
    malformed: Annotated[
        float, typer.Option(help="fraction of malformed records", min=0.0, max=1.0)
    ] = 0.0,
    seed: Annotated[int, typer.Option()] = 42,
    value_format: Annotated[
        str,
        typer.Option(
            "--format",
            help="json, or avro / protobuf: the Confluent wire format, the schema registered "
            "under <topic>-value at --registry (malformed records stay plain bytes)",
        ),
    ] = "json",
    registry: Annotated[
        str | None,
        typer.Option(help="Schema Registry URL (Confluent API) for --format avro|protobuf"),
    ] = None,
) -> None:
    """Produce generated events, JSON, Avro or Protobuf (idempotent producer)."""
    from lab.generator import GeneratorSpec
    from lab.generator import produce as do_produce

    if value_format not in ("json", "avro", "protobuf"):
        raise UsageError(f"--format must be json, avro or protobuf (got {value_format!r})")
    if value_format != "json" and not registry:
        raise UsageError(f"--format {value_format} needs --registry URL")
    require_broker(bootstrap)
    setup_logging("produce", screen=logging.WARNING)
    spec = GeneratorSpec(
        count=count, rate=rate, key_cardinality=keys, malformed_fraction=malformed, seed=seed
    )
    encode = None
    if value_format == "avro":
        from lab.avro_events import AvroEventEncoder

        encode = AvroEventEncoder(str(registry), topic).encode_value
    elif value_format == "protobuf":
        from lab.protobuf_events import ProtobufEventEncoder

        encode = ProtobufEventEncoder(str(registry), topic).encode_value
    result = do_produce(bootstrap, topic, spec, partitions=partitions, encode=encode)
    out.print(f"produced {result.produced} events ({result.malformed} malformed) to {topic}")
