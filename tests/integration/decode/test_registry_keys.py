"""Record keys decoded through the Schema Registry (``decode.key``), into a column of the
table: an Avro record key (a struct column, two versions interleaved, null keys null), an
Avro primitive key (a string column), Protobuf and JSON Schema keys. A key that cannot be
decoded sends its record to the dead letters with the key's reason; every produced
(topic, partition, offset) is in the main or the dead-letter table exactly once, and
``ingest verify`` decodes the keys the same way."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from google.protobuf import message_factory
from support.drivers import arrow_coords, pipeline_config
from support.kafka_fixtures import KafkaTestBroker
from support.registry_fixtures import (
    avro_bytes,
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
from pipeline.decode.registry.table_schema import resolve_registry_schema
from pipeline.errors import ConfigError
from pipeline.ops.verify import verify_pipeline
from pipeline.source.reader import records_at

VALUE: dict[str, Any] = {
    "type": "record",
    "name": "Payment",
    "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}],
}
KEY_V1: dict[str, Any] = {
    "type": "record",
    "name": "PaymentKey",
    "fields": [{"name": "customer", "type": "string"}, {"name": "shard", "type": "int"}],
}
# v2 adds an optional field: keys written with v1 read it as null
KEY_V2: dict[str, Any] = {
    **KEY_V1,
    "fields": [*KEY_V1["fields"], {"name": "region", "type": ["null", "string"], "default": None}],
}
COORD = ("_kafka_topic", "_kafka_partition", "_kafka_offset")


def _key(n: int) -> dict[str, Any] | None:
    if n % 10 == 9:
        return None  # a record without a key
    key: dict[str, Any] = {"customer": f"c{n % 13}", "shard": n % 4}
    if n % 2 == 0:
        key["region"] = f"r{n % 3}" if n % 4 else None
    return key


def _reasons(dead: pa.Table) -> dict[tuple[Any, ...], str]:
    return {tuple(r[k] for k in COORD): r["error"] for r in dead.to_pylist()}


def test_avro_record_keys_land_in_a_struct_column_once_with_their_values(
    spark: Any,
    kafka_broker: KafkaTestBroker,
    schema_registry: SchemaRegistryServer,
    tmp_path: Path,
) -> None:
    url = schema_registry.url
    topic = kafka_broker.new_topic("avro-keys", 2)
    value_id = register(url, f"{topic}-value", VALUE)
    k1 = register(url, f"{topic}-key", KEY_V1)
    k2 = register(url, f"{topic}-key", KEY_V2)
    keys = [_key(n) for n in range(200)]
    key_bytes: list[bytes | None] = [
        None
        if k is None
        else avro_bytes(k2 if n % 2 == 0 else k1, KEY_V2 if n % 2 == 0 else KEY_V1, k)
        for n, k in enumerate(keys)
    ]
    values = [avro_bytes(value_id, VALUE, {"id": n, "amount": n / 4}) for n in range(200)]
    # bad keys beside good values: no magic byte, an id the registry does not know, a
    # truncated key
    bad = {
        b"plain-text-key": "key: not in the Confluent wire format",
        b"\x00"
        + (987654).to_bytes(4, "big")
        + b"\x02": "key: schema id 987654: not in the registry",
        key_bytes[0][:-3]: f"key: schema id {k2}: does not decode",  # type: ignore[index]
    }
    good_value = avro_bytes(value_id, VALUE, {"id": -1, "amount": 0.0})
    coords = produce_values(
        kafka_broker.bootstrap_servers,
        topic,
        values + [good_value] * len(bad),
        keys=key_bytes + list(bad),
    )
    produced = dict(zip(coords, keys, strict=False))
    reasons_wanted = dict(zip(coords[len(values) :], bad.values(), strict=True))

    data = pipeline_config(
        tmp_path, kafka_broker.bootstrap_servers, topic, registry_sink(tmp_path, "iceberg")
    )
    data["decode"] = {"format": "avro", "registry": {"url": url}, "key": {"format": "avro"}}
    pipeline = Pipeline(parse_config(data), spark)
    assert pipeline.cfg.decode.key is not None and pipeline.cfg.decode.key.schema_id == k2
    pipeline.run(timeout_s=180)

    main, dead = read_main_and_dead(pipeline, tmp_path, "iceberg")
    assert arrow_coords(main) + arrow_coords(dead) == Counter(coords)  # exactly once
    got = _reasons(dead)
    assert set(got) == set(reasons_wanted)
    for coord, reason in reasons_wanted.items():
        assert got[coord].startswith(reason), (coord, got[coord])
    key_type = main.schema.field("key").type
    assert [(f.name, f.type, f.nullable) for f in key_type] == [  # as pyiceberg reads it
        ("customer", pa.large_string(), False),
        ("shard", pa.int32(), False),
        ("region", pa.large_string(), True),
    ]
    rows = {tuple(r[k] for k in COORD): r for r in main.to_pylist()}
    expected = {c: None if k is None else {"region": None, **k} for c, k in produced.items()}
    assert {c: rows[c]["key"] for c in produced} == expected
    assert {c: rows[c]["id"] for c in produced} == {c: i for i, c in enumerate(produced)}
    # the verifier decodes the keys too: the key column compared, no mismatch
    unresolved = parse_config(data).decode  # as a user's config says it
    (report,) = verify_pipeline(pipeline.cfg.model_copy(update={"decode": unresolved}))
    totals = report.totals()
    assert report.ok and totals.mismatched == 0 and totals.missing == 0, totals
    assert {"id", "amount", "key"} <= set(report.payload_columns)

    # a key column named like a value field: refused at start, one line
    clash = {**data["decode"], "key": {"format": "avro", "column": "id"}}
    with pytest.raises(ConfigError, match="decode.key.column 'id' is also a field"):
        resolve_registry_schema(parse_config({**data, "decode": clash}))


def _decoder(url: str, topic: str, key: dict[str, Any]) -> Any:
    """The pipeline's Arrow decoder for an Avro-valued ``topic`` with ``key``."""
    from pipeline.decode.arrow import ArrowDecoder

    data = pipeline_config(
        Path("/nonexistent"), "127.0.0.1:1", topic, registry_sink(Path("/x"), "iceberg")
    )
    data["decode"] = {"format": "avro", "registry": {"url": url}, "key": key}
    return ArrowDecoder(resolve_registry_schema(parse_config(data)).decode, include_headers=False)


def test_primitive_protobuf_and_json_schema_keys_decode_like_values(
    schema_registry: SchemaRegistryServer, kafka_broker: KafkaTestBroker
) -> None:
    """The decoder alone (no Spark): an Avro ``string`` key is a string column; Protobuf and
    JSON Schema keys are struct columns; a key of the wrong format is the record's error."""
    url = schema_registry.url
    topic = kafka_broker.new_topic("keys-kinds", 1)
    value_id = register(url, f"{topic}-value", VALUE)
    values = [avro_bytes(value_id, VALUE, {"id": n, "amount": 1.0}) for n in range(3)]

    string_id = register(url, f"{topic}-key", '"string"')
    keys: list[bytes | None] = [avro_bytes(string_id, "string", f"k{n}") for n in range(2)]  # type: ignore[arg-type]
    out = _decoder(url, topic, {"format": "avro"}).decode(records_at(values, [*keys, None]))
    assert out.schema.field("key").type == pa.string()
    assert out.column("key").to_pylist() == ["k0", "k1", None]
    assert out.column("_error").to_pylist() == [None, None, None]

    proto = 'syntax = "proto3";\nmessage OrderKey { string customer = 1; int64 shard = 2; }\n'
    proto_topic = kafka_broker.new_topic("keys-proto", 1)
    register(url, f"{proto_topic}-value", VALUE)
    proto_id = register(url, f"{proto_topic}-key", proto, "PROTOBUF")
    compiled = compile_schema(None, RegistrySchema(proto_id, "PROTOBUF", proto))  # type: ignore[arg-type]
    cls: Any = message_factory.GetMessageClass(compiled.message(None))
    prefix = b"\x00" + proto_id.to_bytes(4, "big") + b"\x00"  # index path [0]
    pkeys: list[bytes | None] = [
        prefix + cls(customer=f"c{n}", shard=n).SerializeToString() for n in range(2)
    ]
    # the third record's key: a JSON Schema id where a Protobuf key is configured
    json_key = {"type": "object", "properties": {"customer": {"type": "string"}}}
    json_id = register(url, f"{proto_topic}-other-key", json_key, "JSON")
    wrong = b"\x00" + json_id.to_bytes(4, "big") + b'{"customer": "c2"}'
    out = _decoder(url, proto_topic, {"format": "protobuf"}).decode(
        records_at(values, [*pkeys, wrong])
    )
    assert out.column("key").to_pylist() == [
        {"customer": "c0", "shard": 0},
        {"customer": "c1", "shard": 1},
        None,
    ]
    errors = out.column("_error").to_pylist()
    assert errors[:2] == [None, None]
    assert errors[2] == f"key: schema id {json_id}: is a JSON schema, not PROTOBUF", errors

    json_topic = kafka_broker.new_topic("keys-json", 1)
    register(url, f"{json_topic}-value", VALUE)
    register(url, f"{json_topic}-key", json_key, "JSON")
    jkeys: list[bytes | None] = [
        b"\x00" + json_id.to_bytes(4, "big") + b'{"customer": "c0"}',
        b"\x00" + json_id.to_bytes(4, "big") + b'{"customer": 5',
        None,
    ]
    out = _decoder(url, json_topic, {"format": "json-schema"}).decode(records_at(values, jkeys))
    assert out.column("key").to_pylist() == [{"customer": "c0"}, None, None]
    errors = out.column("_error").to_pylist()
    assert errors[0] is None and errors[2] is None
    assert errors[1].startswith("key: malformed JSON"), errors
