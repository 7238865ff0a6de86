"""JSON Schema topics in the Confluent wire format (magic byte, schema id, JSON text), the
schema in a real Schema Registry: the table's columns come from the subject's JSON Schema
(nested object, array of objects, a map through additionalProperties, a date-time), every
record is in the main or dead-letter table once with its values, and bad input is a dead
letter with its reason (no magic byte, an unknown schema id, an Avro id, malformed JSON)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from support.drivers import arrow_coords, pipeline_config
from support.kafka_fixtures import KafkaTestBroker
from support.registry_fixtures import produce_values, register

from lab.registry import SchemaRegistryServer
from pipeline.app import Pipeline
from pipeline.config import parse_config

SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "ts": {"type": "string", "format": "date-time"},
        "device": {
            "type": "object",
            "properties": {"id": {"type": "string"}, "model": {"type": ["string", "null"]}},
            "required": ["id"],
        },
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "price": {"type": "number"}},
                "required": ["sku"],
            },
        },
        "tags": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["id", "ts", "device"],
}


def _wire(schema_id: int, payload: bytes) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


def test_json_schema_records_land_once_with_their_values(
    spark: Any,
    kafka_broker: KafkaTestBroker,
    schema_registry: SchemaRegistryServer,
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_broker.new_topic("jsonschema", 2)
    sid = register(schema_registry.url, f"{topic}-value", SCHEMA, "JSON")
    avro_id = register(
        schema_registry.url,
        f"{topic}-avro",
        {"type": "record", "name": "A", "fields": [{"name": "x", "type": "int"}]},
    )
    records = [
        {
            "id": n,
            "ts": f"2024-06-01T10:00:{n % 60:02d}Z",
            "device": {"id": f"d{n}", "model": None if n % 3 else f"m{n}"},
            "items": [{"sku": f"s{n}-{i}", "price": n + i / 4} for i in range(n % 3)],
            "tags": {"k": str(n)},
        }
        for n in range(200)
    ]
    good = [_wire(sid, json.dumps(r).encode()) for r in records]
    bad = {
        json.dumps(records[0]).encode(): "not in the Confluent wire format",
        _wire(987654, b"{}"): "schema id 987654: not in the registry",
        _wire(avro_id, b"{}"): f"schema id {avro_id}: is a AVRO schema, not JSON",
        _wire(sid, b'{"id": 1, "ts": '): "malformed",
        _wire(sid, b'{"ts": "2024-06-01T00:00:00Z", "device": {"id": "x"}}'): "required field",
    }
    coords = produce_values(bootstrap, topic, good + list(bad))
    produced = dict(zip(coords, records, strict=False))
    want_reasons = dict(zip(coords[len(good) :], bad.values(), strict=True))

    data = pipeline_config(
        tmp_path,
        bootstrap,
        topic,
        {"catalog": {"warehouse": str(tmp_path / "warehouse")}, "table": "db.orders"},
    )
    data["decode"] = {"format": "json-schema", "registry": {"url": schema_registry.url}}
    pipeline = Pipeline(parse_config(data), spark)
    pipeline.run(timeout_s=180)
    main_t, dead_t = pipeline.tables.main.table(), pipeline.tables.dead_letter.table()  # type: ignore[attr-defined]
    main, dead = main_t.scan().to_arrow(), dead_t.scan().to_arrow()
    assert arrow_coords(main) + arrow_coords(dead) == Counter(coords)  # exactly once
    reasons = {
        (r["_kafka_topic"], r["_kafka_partition"], r["_kafka_offset"]): r["error"]
        for r in dead.to_pylist()
    }
    assert set(reasons) == set(want_reasons)
    for coord, start in want_reasons.items():
        assert reasons[coord].lower().startswith(start.lower()), (coord, reasons[coord])
    by_coord = {
        (r["_kafka_topic"], r["_kafka_partition"], r["_kafka_offset"]): r for r in main.to_pylist()
    }
    for coord, r in produced.items():
        row = by_coord[coord]
        assert (row["id"], row["device"], row["items"]) == (r["id"], r["device"], r["items"])
        assert dict(row["tags"]) == r["tags"]
        assert row["ts"].isoformat().replace("+00:00", "Z") == r["ts"]
