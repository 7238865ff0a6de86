"""Table columns from an Avro record schema (``decode.format: avro``: the registry's schema).

The result is the same configured fields ``decode.schema`` would list (:class:`FieldSpec`
with nested :data:`TypeSpec` mappings), so everything after it — the column model, both
formats, schema evolution — treats a registry schema like a written one.

Mapping (Avro → column type):
  * ``boolean int long float double string`` → the same; ``bytes``/``fixed`` → ``binary``;
    ``enum`` → ``string``.
  * Logical types: ``date`` → ``date``; ``timestamp-millis``/``-micros`` → ``timestamptz``;
    ``local-timestamp-millis``/``-micros`` → ``timestamp``; ``decimal`` → ``decimal(p, s)``;
    ``uuid`` → ``uuid``; ``time-millis`` → ``int`` and ``time-micros`` → ``long`` (no time
    type), both as the Avro value.
  * ``record`` → ``struct``; ``array`` → ``list``; ``map`` → ``map`` (Avro map keys are
    strings too).
  * A union of ``null`` and one type is that type, optional. A field with a ``default`` is
    optional too: records written before it existed read as the default under Avro's
    resolution, and a later version may add it (evolution adds only optional columns).
    Other unions have no column type: refused, naming the field.
  * A record seen again by name (recursion) is refused: a table's depth is finite.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.columns.model import FieldSpec, TypeSpec, struct_spec
from pipeline.errors import ConfigError

__all__ = ["avro_fields", "avro_type"]

_PRIMITIVE = {
    "boolean": "boolean",
    "int": "int",
    "long": "long",
    "float": "float",
    "double": "double",
    "string": "string",
    "bytes": "binary",
}
_LOGICAL = {
    "date": "date",
    "timestamp-millis": "timestamptz",
    "timestamp-micros": "timestamptz",
    "local-timestamp-millis": "timestamp",
    "local-timestamp-micros": "timestamp",
    "uuid": "uuid",
    "time-millis": "int",
    "time-micros": "long",
}


def avro_fields(schema: Any) -> list[FieldSpec]:
    """The columns of an Avro ``record`` schema (parsed JSON); ConfigError naming the path
    of what has no column type."""
    if not isinstance(schema, Mapping) or schema.get("type") != "record":
        raise ConfigError("an Avro value schema must be a record to become table columns")
    return [_field(f, str(schema.get("name", "record")), set()) for f in schema["fields"]]


def avro_type(schema: Any, path: str) -> TypeSpec:
    """The column type of a whole Avro schema (a record key: ``struct``; or a primitive)."""
    _, inner = _unwrap(schema, path)
    return _type(inner, path, set())


def _field(f: Mapping[str, Any], path: str, seen: set[str]) -> FieldSpec:
    name = f["name"]
    optional, inner = _unwrap(f["type"], f"{path}.{name}")
    return FieldSpec(
        name,
        _type(inner, f"{path}.{name}", seen),
        required=not optional and "default" not in f,
        doc=f.get("doc"),
    )


def _unwrap(avro: Any, path: str) -> tuple[bool, Any]:
    """(nullable, the one non-null branch) of a type that may be a union with null."""
    if not isinstance(avro, list):
        return False, avro
    branches = [b for b in avro if b != "null"]
    if len(branches) != 1:
        raise ConfigError(
            f"Avro field {path!r}: a union of {len(branches)} non-null types has no column "
            "type (only a union of null and one type)"
        )
    return len(branches) < len(avro), branches[0]


def _type(avro: Any, path: str, seen: set[str]) -> TypeSpec:
    if isinstance(avro, str):
        if avro in _PRIMITIVE:
            return _PRIMITIVE[avro]
        raise ConfigError(f"Avro field {path!r}: type {avro!r} is unknown or a named reference")
    if not isinstance(avro, Mapping):
        raise ConfigError(f"Avro field {path!r}: {avro!r} is not an Avro type")
    logical, kind = avro.get("logicalType"), avro.get("type")
    if logical == "decimal":
        return f"decimal({int(avro['precision'])}, {int(avro.get('scale', 0))})"
    if logical in _LOGICAL:
        return _LOGICAL[logical]
    if kind == "record":
        name = str(avro.get("namespace", "")) + "." + str(avro.get("name"))
        if name in seen:
            raise ConfigError(f"Avro field {path!r}: record {avro.get('name')!r} is recursive")
        inner = seen | {name}
        return struct_spec(_field(f, path, inner) for f in avro["fields"])
    if kind == "array":
        optional, element = _unwrap(avro["items"], f"{path}[]")
        return {
            "type": "list",
            "element": _type(element, f"{path}[]", seen),
            "elementRequired": not optional,
        }
    if kind == "map":
        optional, value = _unwrap(avro["values"], f"{path}{{}}")
        return {
            "type": "map",
            "value": _type(value, f"{path}{{}}", seen),
            "valueRequired": not optional,
        }
    if kind == "enum":
        return "string"
    if kind == "fixed":
        return "binary"
    return _type(kind, path, seen)  # {"type": "long"} and the like
