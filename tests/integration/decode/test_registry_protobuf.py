"""Protobuf topics in the Confluent wire format (magic byte, schema id, message index path,
message), the schemas registered as ``.proto`` text in a real Schema Registry, into Iceberg
and Hudi.

Two versions produced interleaved: the second adds a field inside a nested message and one
at the top level, and widens ``int32`` to ``int64``. The table's columns come from the
latest version; records of the first are read by field number, the fields their version
lacks null (not Protobuf's zero defaults). Every (topic, partition, offset) is in the main or
the dead-letter table once, values equal to what was produced; bad input is a dead letter
with its reason.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import message_factory
from support.drivers import arrow_coords, pipeline_config
from support.kafka_fixtures import KafkaTestBroker
from support.registry_fixtures import (
    produce_values,
    read_main_and_dead,
    register,
    registry_sink,
)

from lab.registry import SchemaRegistryServer
from pipeline.app import Pipeline
from pipeline.config import parse_config
from pipeline.decode.registry.client import RegistrySchema
from pipeline.decode.registry.proto_files import compile_schema
from pipeline.ops.verify import verify_pipeline

HEAD = 'syntax = "proto3";\npackage shop;\nimport "google/protobuf/timestamp.proto";\n'
V1 = (
    HEAD
    + """
message Order {
  int64 id = 1;
  google.protobuf.Timestamp ts = 2;
  Device device = 3;
  repeated Item items = 4;
  map<string, string> tags = 5;
  Kind kind = 6;
  int32 count = 7;
}
message Device { string id = 1; repeated int32 patches = 2; }
message Item { string sku = 1; double price = 2; }
enum Kind { WEB = 0; APP = 1; }
"""
)
# v2: a field added inside Device and one at the top level; count widened to int64
V2 = V1.replace("int32 count = 7;", "int64 count = 7;\n  optional string source = 8;").replace(
    "repeated int32 patches = 2;", "repeated int32 patches = 2; string model = 3;"
)
OTHER = HEAD + "message Order { float count = 7; }"  # count as float: misread, refused
T0 = datetime(2024, 6, 1, tzinfo=UTC)


def _record(n: int, v2: bool) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": n,
        "ts": T0 + timedelta(seconds=n, microseconds=n),
        "device": {"id": f"d{n % 7}", "patches": list(range(n % 3))},
        "items": [{"sku": f"s{n}-{i}", "price": n + i / 4} for i in range(n % 3)],
        "tags": {"k": str(n % 5)} if n % 4 else {},
        "kind": "APP" if n % 2 else "WEB",
        "count": n * 10,
    }
    if v2:
        record["device"]["model"] = f"m{n}"
        record["source"] = "app" if n % 3 else None
        record["count"] = 3_000_000_000 + n  # needs the int64
    return record


def _encoder(schema_id: int, text: str) -> Any:
    compiled = compile_schema(None, RegistrySchema(schema_id, "PROTOBUF", text))  # type: ignore[arg-type]
    cls: Any = message_factory.GetMessageClass(compiled.message(None))
    prefix = b"\x00" + schema_id.to_bytes(4, "big") + b"\x00"  # index path [0]

    def encode(record: dict[str, Any]) -> bytes:
        fields = {k: v for k, v in record.items() if v is not None and k != "ts"}
        message = cls(**fields)
        message.ts.FromDatetime(record["ts"])
        return prefix + message.SerializeToString()

    return encode


def _expected(record: dict[str, Any]) -> dict[str, Any]:
    device = {"model": None, **record["device"]}
    return {**record, "device": device, "source": record.get("source")}


def _as_read(row: dict[str, Any]) -> dict[str, Any]:
    tags = row["tags"]
    names = ("id", "ts", "device", "items", "kind", "count", "source")
    out = {k: row[k] for k in names}
    out["ts"] = row["ts"].astimezone(UTC)
    out["tags"] = dict(tags) if not isinstance(tags, dict) else tags
    return out


@pytest.mark.parametrize(
    "table_format", ["iceberg", pytest.param("hudi", marks=pytest.mark.extended)]
)
def test_protobuf_records_of_two_versions_land_once_with_their_values(
    spark: Any,
    kafka_broker: KafkaTestBroker,
    schema_registry: SchemaRegistryServer,
    tmp_path: Path,
    table_format: str,
) -> None:
    url = schema_registry.url
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_broker.new_topic(f"proto-{table_format}", 2)
    v1 = register(url, f"{topic}-value", V1, "PROTOBUF")
    v2 = register(url, f"{topic}-value", V2, "PROTOBUF")
    other = register(url, f"{topic}-other", OTHER, "PROTOBUF")
    avro = register(url, f"{topic}-avro", {"type": "record", "name": "A", "fields": []})
    encode = {1: _encoder(v1, V1), 2: _encoder(v2, V2)}
    records = [_record(n, v2=n % 2 == 0) for n in range(300)]
    good = [encode[2 if n % 2 == 0 else 1](r) for n, r in enumerate(records)]
    bad = {
        b'{"id": 1}': "not in the Confluent wire format",
        b"\x00"
        + (987654).to_bytes(4, "big")
        + b"\x00\x08\x01": "schema id 987654: not in the registry",
        good[3][:-3]: f"schema id {v1}: does not decode",
        b"\x00" + other.to_bytes(4, "big") + b"\x00\x3d\x00\x00\x80\x3f": (
            f"schema id {other}: cannot be read as the table's schema: field Order.count "
            "(number 7) is float, the table's is int64"
        ),
        b"\x00" + avro.to_bytes(4, "big") + b"\x00": f"schema id {avro}: is a AVRO schema",
    }
    coords = produce_values(bootstrap, topic, good + list(bad))
    produced = dict(zip(coords, records, strict=False))
    reasons_wanted = dict(zip(coords[len(good) :], bad.values(), strict=True))

    data = pipeline_config(tmp_path, bootstrap, topic, registry_sink(tmp_path, table_format))
    data["decode"] = {"format": "protobuf", "registry": {"url": url}}
    data_decode = parse_config(data).decode  # as a user's config says it: not resolved
    pipeline = Pipeline(parse_config(data), spark)
    assert pipeline.cfg.decode.registry is not None and pipeline.cfg.decode.registry.schema_id == v2
    pipeline.run(timeout_s=180)

    main, dead = read_main_and_dead(pipeline, tmp_path, table_format)
    assert arrow_coords(main) + arrow_coords(dead) == Counter(coords)  # exactly once
    keys = ("_kafka_topic", "_kafka_partition", "_kafka_offset")
    reasons = {tuple(r[k] for k in keys): r["error"] for r in dead.to_pylist()}
    assert set(reasons) == set(reasons_wanted)
    for coord, reason in reasons_wanted.items():
        assert reasons[coord].startswith(reason), (coord, reasons[coord])
    rows = {tuple(r[k] for k in keys): r for r in main.to_pylist()}
    assert {c: _as_read(rows[c]) for c in produced} == {
        c: _expected(r) for c, r in produced.items()
    }
    # the independent verifier decodes every record the same way: the data columns
    # compared, no mismatch
    (report,) = verify_pipeline(pipeline.cfg.model_copy(update={"decode": data_decode}))
    totals = report.totals()
    assert report.ok and totals.mismatched == 0 and totals.missing == 0, totals
    assert {"id", "device", "items", "tags", "count", "source"} <= set(report.payload_columns)


def test_produced_protobuf_events_decode_to_the_generated_values(
    schema_registry: SchemaRegistryServer,
) -> None:
    """``ingest produce --format protobuf``'s encoder: its schema registers, and the
    pipeline's decoder reads every generated event back to its values (optional fields a
    generated event leaves out are null, not zero)."""
    import json

    from lab.generator import GeneratorSpec, generate_events
    from lab.protobuf_events import ProtobufEventEncoder
    from pipeline.columns import data_columns, table_columns
    from pipeline.columns.protobuf import protobuf_fields
    from pipeline.config import RegistryConfig
    from pipeline.decode.registry.client import SchemaRegistry
    from pipeline.decode.registry.protobuf import ProtobufValues

    encoder = ProtobufEventEncoder(schema_registry.url, "produced-protobuf")
    events = [json.loads(v) for _, v in generate_events(GeneratorSpec(count=60, seed=3))]
    reg = RegistryConfig(url=schema_registry.url, schema_id=encoder.schema_id)
    client = SchemaRegistry(reg)
    message = compile_schema(client, client.by_id(encoder.schema_id)).message(None)
    columns = data_columns(table_columns(protobuf_fields(message)))
    values = [encoder.encode_event(e) for e in events]
    data, errors, _ = ProtobufValues(reg, columns).decode(values, [False] * len(values), "")
    assert errors.null_count == len(values), errors
    rows = [
        dict(zip([c.name for c in columns], r, strict=True))
        for r in zip(*(d.to_pylist() for d in data), strict=True)
    ]
    for row, event in zip(rows, events, strict=True):
        want = {k: event.get(k) for k in row if k != "ts"}
        assert {k: v for k, v in row.items() if k != "ts"} == want
        assert row["ts"].astimezone(UTC) == datetime.fromisoformat(
            event["ts"].replace("Z", "+00:00")
        )
