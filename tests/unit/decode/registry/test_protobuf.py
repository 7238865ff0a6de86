"""Protobuf schemas without a registry: the columns a message becomes, the wire format's
message index path, which writer versions the table's message can read, and nulls for the
fields a writer's version lacks (not Protobuf's zero defaults)."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import message_factory

from pipeline.columns.protobuf import protobuf_fields
from pipeline.decode.registry.client import RegistrySchema
from pipeline.decode.registry.proto_files import ProtoCompileError, ProtoFile, compile_schema
from pipeline.decode.registry.protobuf import _converter, _incompatible, message_indexes
from pipeline.errors import ConfigError

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
  optional string note = 8;
  uint64 big = 9;
}
message Device { string id = 1; repeated int32 patches = 2; }
message Item { string sku = 1; double price = 2; }
enum Kind { WEB = 0; APP = 1; }
"""
)


def _compiled(text: str, schema_id: int = 1) -> ProtoFile:
    # no references: the registry client is not asked
    return compile_schema(None, RegistrySchema(schema_id, "PROTOBUF", text))  # type: ignore[arg-type]


def test_a_message_becomes_nested_optional_columns() -> None:
    fields = {f.name: f for f in protobuf_fields(_compiled(V1).message(None))}
    assert {n: f.type for n, f in fields.items() if isinstance(f.type, str)} == {
        "id": "long",
        "ts": "timestamptz",
        "kind": "string",
        "count": "int",
        "note": "string",
        "big": "decimal(20, 0)",
    }
    assert fields["items"].type == {
        "type": "list",
        "element": {
            "type": "struct",
            "fields": [
                {"name": "sku", "type": "string", "required": False},
                {"name": "price", "type": "double", "required": False},
            ],
        },
        "elementRequired": True,
    }
    assert fields["tags"].type == {"type": "map", "value": "string", "valueRequired": False}
    assert not any(f.required for f in fields.values())


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("message M { map<int32, string> m = 1; }", "'M.m': a map with int32 keys"),
        ("message M { M next = 1; }", "'M.next': message 'M' is recursive"),
    ],
)
def test_messages_without_a_column_type_are_refused_by_path(body: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        protobuf_fields(_compiled(HEAD + body).message(None))


def test_a_schema_that_does_not_compile_names_protocs_error() -> None:
    with pytest.raises(ProtoCompileError, match="registered.proto:.*"):
        _compiled(HEAD + "message M { nosuchtype x = 1; }")


@pytest.mark.parametrize(
    ("raw", "want"),
    [(b"\x00", ((0,), 1)), (b"\x02\x02", ((1,), 2)), (b"\x04\x02\x00", ((1, 0), 3))],
)
def test_message_index_paths(raw: bytes, want: tuple[tuple[int, ...], int]) -> None:
    assert message_indexes(b"\x00\x00\x00\x00\x01" + raw, 5) == (want[0], want[1] + 5)


def test_a_truncated_index_path_is_an_error() -> None:
    with pytest.raises(ValueError, match="truncated"):
        message_indexes(b"\x00\x00\x00\x00\x01\x04\x02", 5)


@pytest.mark.parametrize(
    ("writer_field", "why"),
    [
        ("int32 count = 7;", None),  # the same
        ("sint32 count = 7;", "field Order.count (number 7) is sint32, the table's is int32"),
        ("float count = 7;", "is float, the table's is int32"),
        ("repeated int32 count = 7;", "changed between single, repeated and map"),
    ],
)
def test_writer_types_the_table_can_read(writer_field: str, why: str | None) -> None:
    reader = _compiled(V1).message(None)
    writer = _compiled(HEAD + f"message Order {{ {writer_field} }}", 2).message(None)
    got = _incompatible(writer, reader, "Order")
    assert (got is None) if why is None else (why in str(got)), got


def test_widening_reads_and_narrowing_is_refused() -> None:
    wide = _compiled(HEAD + "message Order { int64 count = 7; }", 3).message(None)
    narrow = _compiled(HEAD + "message Order { int32 count = 7; }", 4).message(None)
    assert _incompatible(narrow, wide, "Order") is None
    assert "is int64, the table's is int32" in str(_incompatible(wide, narrow, "Order"))


def test_fields_a_writer_lacks_read_as_null_at_any_depth() -> None:
    reader = _compiled(V1).message(None)
    old = _compiled(
        HEAD + "message Order { int64 id = 1; Device device = 3; }\n"
        "message Device { string id = 1; }",
        5,
    ).message(None)
    cls: Any = message_factory.GetMessageClass(reader)
    msg = cls(id=7, device={"id": "d", "patches": []}, kind=1)
    row = _converter(reader, old)(msg)
    assert row["id"] == 7 and row["device"] == {"id": "d", "patches": None}
    assert row["count"] is None and row["kind"] is None and row["tags"] is None
    same = _converter(reader, reader)(msg)
    assert same["count"] == 0 and same["kind"] == "APP" and same["note"] is None
    assert same["ts"] is None and same["tags"] == {} and same["items"] == []
