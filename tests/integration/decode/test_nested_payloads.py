"""Nested JSON payloads (struct, list of structs, map, three levels deep) end to end into
Iceberg and Hudi, on both decode engines.

Exactly-once is shown by counting: every produced (topic, partition, offset) is in the main
table or the dead-letter table, once. The nested values read back (pyiceberg, hudi-rs)
equal what was produced; records of the wrong shape are dead letters whose reason names
the path (``items[1].price``); records with a field the schema lacks are counted for
``ingest status``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.drivers import arrow_coords, hudi_read, pipeline_config
from support.kafka_fixtures import KafkaTestBroker

from pipeline.app import Pipeline
from pipeline.config import parse_config
from pipeline.observe.runstate import read_run_state
from pipeline.ops.status import unknown_fields_line

Coord = tuple[str, int, int]

SCHEMA: list[dict[str, Any]] = [
    {"name": "id", "type": "long", "required": True},
    {"name": "ts", "type": "timestamptz", "required": True},
    {
        "name": "device",
        "type": {
            "type": "struct",
            "fields": [
                {"name": "id", "type": "string", "required": True, "doc": "device id"},
                {
                    "name": "os",
                    "type": {
                        "type": "struct",
                        "fields": [
                            {"name": "name", "type": "string"},
                            {"name": "patches", "type": {"type": "list", "element": "int"}},
                        ],
                    },
                },
            ],
        },
    },
    {
        "name": "items",
        "type": {
            "type": "list",
            "element": {
                "type": "struct",
                "fields": [
                    {"name": "sku", "type": "string", "required": True},
                    {"name": "price", "type": "double"},
                    {"name": "added", "type": "timestamptz"},
                ],
            },
        },
    },
    {"name": "tags", "type": {"type": "map", "value": "string"}},
]


def _event(n: int) -> dict[str, Any]:
    return {
        "id": n,
        "ts": f"2024-06-0{1 + n % 3}T10:00:00Z",
        "device": {"id": f"d{n % 7}", "os": {"name": "linux", "patches": [n % 5, n % 11]}},
        "items": [
            {"sku": f"s{n}", "price": n / 4, "added": "2024-06-01T09:00:00Z"},
            {"sku": f"t{n}", "price": None},
        ],
        "tags": {"env": "prod", "n": str(n)} if n % 2 else {},
        # a field the schema lacks: counted, shown by ingest status
        **({"debug": {"trace": n}} if n % 10 == 3 else {}),
    }


BAD: dict[int, tuple[dict[str, Any], str]] = {
    # n % 50 -> (record, reason)
    7: (
        {
            "id": 7,
            "ts": "2024-06-01T10:00:00Z",
            "items": [{"sku": "a"}, {"sku": "b", "price": "x"}],
        },
        "malformed JSON or a value of the wrong type: items[1].price is not double",
    ),
    19: (
        {"id": 19, "ts": "2024-06-01T10:00:00Z", "device": {"os": {"name": "x"}}},
        "required field 'device.id' is missing or null",
    ),
    33: (
        {"id": 33, "ts": "2024-06-01T10:00:00Z", "tags": ["a"]},
        "malformed JSON or a value of the wrong type: tags is not an object",
    ),
}


def _produce(bootstrap: str, topic: str, count: int) -> dict[Coord, dict[str, Any]]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": "5", "acks": "all"})
    out: dict[Coord, dict[str, Any]] = {}
    errors: list[Any] = []
    for n in range(count):
        record = BAD[n % 50][0] | {"id": n} if n % 50 in BAD else _event(n)

        def cb(err: Any, msg: Any, record: dict[str, Any] = record) -> None:
            if err is not None:
                errors.append(err)
            else:
                out[(msg.topic(), msg.partition(), msg.offset())] = record

        producer.produce(topic, value=json.dumps(record).encode(), partition=n % 2, on_delivery=cb)
    producer.flush(30)
    assert not errors and len(out) == count, errors
    return out


def _expected_row(record: dict[str, Any]) -> dict[str, Any]:
    """What the table must hold for a good record (timestamps as ISO text, maps as pairs)."""
    items = [
        {"sku": i["sku"], "price": i.get("price"), "added": i.get("added")} for i in record["items"]
    ]
    device = record["device"]
    return {
        "id": record["id"],
        "device": {"id": device["id"], "os": dict(device["os"])},
        "items": items,
        "tags": sorted(record["tags"].items()),
    }


def _row_of(table_row: dict[str, Any]) -> dict[str, Any]:
    def ts(v: Any) -> Any:
        return None if v is None else v.strftime("%Y-%m-%dT%H:%M:%SZ")

    items = [{**i, "added": ts(i["added"])} for i in table_row["items"]]
    tags = table_row["tags"]
    pairs = sorted(tags.items()) if isinstance(tags, dict) else sorted(tags)
    return {
        "id": table_row["id"],
        "device": table_row["device"],
        "items": items,
        "tags": pairs,
    }


@pytest.mark.parametrize(
    ("table_format", "engine"),
    [("iceberg", "arrow"), ("hudi", "arrow"), ("iceberg", "spark")],
)
def test_nested_records_land_once_with_their_values(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path, table_format: str, engine: str
) -> None:
    topic = kafka_broker.new_topic(f"nested-{table_format}-{engine}", 2)
    produced = _produce(kafka_broker.bootstrap_servers, topic, 400)
    if table_format == "iceberg":
        sink: dict[str, Any] = {
            "catalog": {"warehouse": str(tmp_path / "warehouse")},
            "table": "db.events",
            "partitionBy": ["day(ts)"],
        }
    else:
        sink = {"format": "hudi", "table": "db.events", "hudi": {"basePath": str(tmp_path / "h")}}
    data = pipeline_config(tmp_path, kafka_broker.bootstrap_servers, topic, sink)
    data["decode"] = {"schema": SCHEMA, "engine": engine}
    pipeline = Pipeline(parse_config(data), spark)
    pipeline.run(timeout_s=180)

    if table_format == "iceberg":
        main_table = pipeline.tables.main.table()
        dead_table = pipeline.tables.dead_letter.table()
        assert main_table is not None and dead_table is not None
        main, dead = main_table.scan().to_arrow(), dead_table.scan().to_arrow()
    else:
        main, dead = hudi_read(tmp_path / "h"), hudi_read(tmp_path / "h_dead_letter")
    # every produced record once, across the main table and the dead letters
    assert arrow_coords(main) + arrow_coords(dead) == Counter(list(produced))
    bad = {c for c, r in produced.items() if r["id"] % 50 in BAD}
    assert set(arrow_coords(dead)) == bad
    reasons = {
        (t, p, o): e
        for t, p, o, e in zip(
            *(dead[c].to_pylist() for c in ("_kafka_topic", "_kafka_partition", "_kafka_offset")),
            dead["error"].to_pylist(),
            strict=True,
        )
    }
    assert {c: reasons[c] for c in bad} == {c: BAD[produced[c]["id"] % 50][1] for c in bad}
    # nested values read back exactly
    coords = zip(
        *(main[c].to_pylist() for c in ("_kafka_topic", "_kafka_partition", "_kafka_offset")),
        strict=True,
    )
    rows = main.select(["id", "device", "items", "tags"]).to_pylist()
    mismatched = [
        (c, got, _expected_row(produced[c]))
        for c, got in zip(coords, (_row_of(r) for r in rows), strict=True)
        if got != _expected_row(produced[c])
    ]
    assert not mismatched, mismatched[:3]
    # the records that carried a field decode.schema lacks: counted for ingest status
    state = read_run_state(pipeline.cfg)
    assert state.unknown_field_records == sum("debug" in r for r in produced.values()) > 0
    assert state.unknown_fields == ("debug",)
    line = unknown_fields_line(pipeline.cfg)
    assert line is not None and "(this run, ignored)" in line and "(debug)" in line
