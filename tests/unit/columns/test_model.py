"""Nested column types (``struct``, ``list``, ``map``) from the configuration to each
format's schema: Iceberg field ids, Hudi's Avro and Arrow, Spark DDL; one-line errors
that name the path of a bad nested type."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyiceberg.schema import index_by_id

from pipeline.columns import (
    Column,
    FieldSpec,
    MapOf,
    StructOf,
    parse_type,
    spark_ddl,
    table_columns,
)
from pipeline.errors import ConfigError
from pipeline.formats.hudi.schema import HudiTableSpec
from pipeline.formats.iceberg.schema import build_schema

DEVICE: dict[str, Any] = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "string", "required": True, "doc": "device id"},
        {"name": "tags", "type": {"type": "map", "value": "long", "valueRequired": True}},
        {
            "name": "parts",
            "type": {
                "type": "list",
                "element": {"type": "struct", "fields": [{"name": "n", "type": "int"}]},
            },
        },
    ],
}


def test_a_nested_type_parses_with_required_and_doc() -> None:
    t = parse_type(DEVICE, "device")
    assert isinstance(t, StructOf)
    assert [c.name for c in t.fields] == ["id", "tags", "parts"]
    assert t.fields[0].required and t.fields[0].doc == "device id"
    assert t.fields[1].type == MapOf(parse_type("long"), value_required=True)
    assert str(t) == "struct<id: string, tags: map<string, long>, parts: list<struct<n: int>>>"
    ddl = spark_ddl([Column("device", t)])
    assert ddl == (
        "`device` STRUCT<`id`: STRING, `tags`: MAP<STRING, BIGINT>, "
        "`parts`: ARRAY<STRUCT<`n`: INT>>>"
    )


def test_iceberg_gets_nested_types_with_fresh_field_ids() -> None:
    schema = build_schema([FieldSpec("id", "long", True), FieldSpec("device", DEVICE)])
    device = schema.find_field("device")
    assert schema.find_field("device.id").required
    assert schema.find_field("device.id").doc == "device id"
    tags = schema.find_field("device.tags").field_type
    assert tags.value_required and str(tags.value_type) == "long"
    # ids 1..n, top-level fields first (as the catalog assigns them), nested ones after
    ids = sorted(index_by_id(schema))
    assert ids == list(range(1, len(ids) + 1))
    assert device.field_id == 2 and schema.find_field("device.id").field_id > len(schema.fields)


def test_hudi_gets_the_equivalent_avro_and_arrow() -> None:
    columns = table_columns([FieldSpec("id", "long", True), FieldSpec("device", DEVICE)])
    spec = HudiTableSpec.build("/tmp/none", "db", "events", columns)
    avro = json.loads(spec.avro_schema)
    device = next(f for f in avro["fields"] if f["name"] == "device")
    record = device["type"][1]
    assert record["type"] == "record" and record["name"] == "device"
    fields = {f["name"]: f["type"] for f in record["fields"]}
    assert fields["id"] == "string"
    assert fields["tags"] == ["null", {"type": "map", "values": "long"}]
    assert fields["parts"][1]["type"] == "array"
    arrow = spec.file_schema.field("device").type
    tags = arrow.field("tags").type
    assert str(tags) == "map<string, int64>" and not tags.item_field.nullable


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"type": "lst"}, "field 'f': a nested type needs 'type: struct'"),
        ({"type": "list"}, "field 'f': a list type needs element"),
        ({"type": "list", "element": "strin"}, "field 'f.element': unknown type 'strin'"),
        ({"type": "map", "key": "int", "value": "string"}, "the key type is string"),
        ({"type": "map", "value": "int", "size": 3}, "unknown key(s) size"),
        ({"type": "struct", "fields": []}, "needs a non-empty list of fields"),
        (
            {
                "type": "struct",
                "fields": [{"name": "a", "type": "int"}, {"name": "A", "type": "int"}],
            },
            "'A' is defined twice",
        ),
        (
            {"type": "struct", "fields": [{"name": "a", "type": {"type": "list", "element": "x"}}]},
            "field 'f.a.element': unknown type 'x'",
        ),
        ({"type": "list", "element": "int", "elementRequired": "yes"}, "must be true or false"),
    ],
)
def test_a_bad_nested_type_is_one_line_naming_its_path(spec: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_type(spec, "f")
    assert message in str(err.value) and "\n" not in str(err.value)
