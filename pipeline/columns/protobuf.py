"""Table columns from a Protobuf message (``decode.format: protobuf``: the registry's schema).

The result is the same configured fields ``decode.schema`` would list (:class:`FieldSpec`
with nested :data:`TypeSpec` mappings), so the column model, both formats and schema
evolution treat a registry schema like a written one.

Mapping (Protobuf → column type):
  * ``double float bool string bytes`` → ``double float boolean string binary``;
    ``int32 sint32 sfixed32`` → ``int``; ``uint32 fixed32 int64 sint64 sfixed64`` →
    ``long``; ``uint64 fixed64`` → ``decimal(20, 0)`` (no long holds them); an ``enum`` →
    ``string`` (the value's name).
  * A message → ``struct``; ``repeated`` → ``list`` (elements never null); a ``map`` with
    string keys → ``map`` (other keys have no column type: refused, naming the field).
  * Well-known types: ``google.protobuf.Timestamp`` → ``timestamptz``; the wrappers
    (``Int64Value`` …) → their value's type.
  * Every column is optional. Proto3 gives every field a default, so no record lacks one,
    but a later version may add fields (evolution adds only optional columns), and a
    message field may be absent (null).
  * A message seen again inside itself (recursion) and ``group`` fields are refused.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from pipeline.columns.model import FieldSpec, TypeSpec
from pipeline.errors import ConfigError

__all__ = ["WELL_KNOWN", "protobuf_fields", "scalar_type", "type_name"]

_F = FieldDescriptor
_SCALAR: dict[int, str] = {
    _F.TYPE_DOUBLE: "double",
    _F.TYPE_FLOAT: "float",
    _F.TYPE_BOOL: "boolean",
    _F.TYPE_STRING: "string",
    _F.TYPE_BYTES: "binary",
    _F.TYPE_INT32: "int",
    _F.TYPE_SINT32: "int",
    _F.TYPE_SFIXED32: "int",
    _F.TYPE_UINT32: "long",
    _F.TYPE_FIXED32: "long",
    _F.TYPE_INT64: "long",
    _F.TYPE_SINT64: "long",
    _F.TYPE_SFIXED64: "long",
    _F.TYPE_UINT64: "decimal(20, 0)",
    _F.TYPE_FIXED64: "decimal(20, 0)",
    _F.TYPE_ENUM: "string",
}
#: well-known message types read as one value: their full name → the column type
WELL_KNOWN: dict[str, str] = {
    "google.protobuf.Timestamp": "timestamptz",
    "google.protobuf.DoubleValue": "double",
    "google.protobuf.FloatValue": "float",
    "google.protobuf.Int64Value": "long",
    "google.protobuf.UInt64Value": "decimal(20, 0)",
    "google.protobuf.Int32Value": "int",
    "google.protobuf.UInt32Value": "long",
    "google.protobuf.BoolValue": "boolean",
    "google.protobuf.StringValue": "string",
    "google.protobuf.BytesValue": "binary",
}


def protobuf_fields(message: Descriptor) -> list[FieldSpec]:
    """The columns of a message; ConfigError naming the path of what has no column type."""
    seen = {message.full_name}
    return [FieldSpec(f.name, _type(f, f"{message.name}.{f.name}", seen)) for f in message.fields]


def scalar_type(field: FieldDescriptor) -> str | None:
    """The column type of a non-message field's values; None for a message field."""
    return _SCALAR.get(field.type)


def _type(field: FieldDescriptor, path: str, seen: set[str]) -> TypeSpec:
    if field.type == _F.TYPE_GROUP:
        raise ConfigError(f"Protobuf field {path!r}: groups have no column type")
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key, value = (
            field.message_type.fields_by_name["key"],
            field.message_type.fields_by_name["value"],
        )
        if key.type != _F.TYPE_STRING:
            raise ConfigError(
                f"Protobuf field {path!r}: a map with {type_name(key)} keys has no column type "
                "(only string keys)"
            )
        return {"type": "map", "value": _value(value, f"{path}{{}}", seen), "valueRequired": False}
    element = _value(field, f"{path}[]" if field.is_repeated else path, seen)
    if field.is_repeated:
        return {"type": "list", "element": element, "elementRequired": True}
    return element


def _value(field: FieldDescriptor, path: str, seen: set[str]) -> TypeSpec:
    """The type of one value of ``field`` (an element, when it is repeated)."""
    scalar = scalar_type(field)
    if scalar is not None:
        return scalar
    message = field.message_type
    if message.full_name in WELL_KNOWN:
        return WELL_KNOWN[message.full_name]
    if message.full_name in seen:
        raise ConfigError(f"Protobuf field {path!r}: message {message.name!r} is recursive")
    inner = seen | {message.full_name}
    members: list[dict[str, Any]] = [
        {"name": f.name, "type": _type(f, f"{path}.{f.name}", inner), "required": False}
        for f in message.fields
    ]
    return {"type": "struct", "fields": members}


def type_name(field: FieldDescriptor) -> str:
    """The field's type as a .proto file spells it (``int32``, ``shop.Item``)."""
    return field.message_type.full_name if field.message_type else _TYPE_NAMES[field.type]


_TYPE_NAMES = {v: k[5:].lower() for k, v in vars(_F).items() if k.startswith("TYPE_")}
