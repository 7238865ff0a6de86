"""A real Schema Registry for the tests (Apicurio Registry from Maven Central, started by
:mod:`lab.registry`), and Avro producers in the Confluent wire format.

When the registry cannot start the test skips naming why, or fails under
``INGEST_REQUIRE_REGISTRY=1`` (set by the test command: the project fetches it)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lab.registry import SchemaRegistryServer, start_registry
from pipeline.errors import EnvironmentProblem
from support.required import unavailable

Coord = tuple[str, int, int]


def registry_server(home: Path) -> Iterator[SchemaRegistryServer]:
    try:
        server = start_registry(home)
    except EnvironmentProblem as e:
        unavailable("INGEST_REQUIRE_REGISTRY", f"no Schema Registry: {e.message}")
    try:
        yield server
    finally:
        server.close()


def register(
    url: str, subject: str, schema: dict[str, Any] | str, schema_type: str = "AVRO"
) -> int:
    """Register ``schema`` (Avro or JSON Schema as parsed JSON, Protobuf as ``.proto``
    text) under ``subject``; its id."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": url})
    text = schema if isinstance(schema, str) else json.dumps(schema)
    return int(client.register_schema(subject, Schema(text, schema_type)))


def avro_bytes(schema_id: int, schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    """``record`` in the Confluent wire format: magic byte, schema id, Avro binary."""
    import io

    import fastavro

    buf = io.BytesIO()
    buf.write(b"\x00" + schema_id.to_bytes(4, "big"))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    return buf.getvalue()


def produce_values(
    bootstrap: str,
    topic: str,
    values: list[bytes],
    partitions: int = 2,
    keys: list[bytes | None] | None = None,
) -> list[Coord]:
    """Produce ``values`` (with ``keys``) round-robin over ``partitions``; their
    coordinates, in order."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": "5", "acks": "all"})
    out: list[Coord | None] = [None] * len(values)
    errors: list[Any] = []
    for i, value in enumerate(values):

        def cb(err: Any, msg: Any, i: int = i) -> None:
            if err is not None:
                errors.append(err)
            else:
                out[i] = (msg.topic(), msg.partition(), msg.offset())

        key = keys[i] if keys is not None else None
        producer.produce(topic, value=value, key=key, partition=i % partitions, on_delivery=cb)
    producer.flush(30)
    assert not errors and all(c is not None for c in out), errors
    return [c for c in out if c is not None]


def registry_sink(tmp: Path, table_format: str) -> dict[str, Any]:
    """The ``sink`` section of a registry test: ``db.orders`` on Iceberg or Hudi."""
    if table_format == "iceberg":
        return {"catalog": {"warehouse": str(tmp / "warehouse")}, "table": "db.orders"}
    return {"format": "hudi", "table": "db.orders", "hudi": {"basePath": str(tmp / "h")}}


def read_main_and_dead(pipeline: Any, tmp: Path, table_format: str) -> tuple[Any, Any]:
    """The main and dead-letter tables of :func:`registry_sink`, as Arrow."""
    if table_format == "iceberg":
        tables = pipeline.tables.main.table(), pipeline.tables.dead_letter.table()
        main, dead = (t.scan().to_arrow() for t in tables)
        return main, dead
    from support.drivers import hudi_read

    return hudi_read(tmp / "h"), hudi_read(tmp / "h_dead_letter")
