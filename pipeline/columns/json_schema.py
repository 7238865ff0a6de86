"""Table columns from a JSON Schema (``decode.format: json-schema``: the registry's schema).

Like :mod:`pipeline.columns.avro`, the result is the configured fields ``decode.schema``
would list, so the rest of the pipeline treats it as a written schema.

Mapping (JSON Schema → column type), for an ``object`` with ``properties``:
  * ``string`` → ``string``; with ``format`` ``date-time`` → ``timestamptz``, ``date`` →
    ``date``, ``uuid`` → ``uuid``; ``integer`` → ``long``; ``number`` → ``double``;
    ``boolean`` → ``boolean``.
  * ``object`` with ``properties`` → ``struct``; ``object`` with only
    ``additionalProperties: <schema>`` → ``map``; ``array`` with ``items`` → ``list``.
  * A property is required when the object's ``required`` lists it and its ``type`` does not
    allow ``null`` (``["string", "null"]`` is optional).
  * ``$ref``, ``oneOf``/``anyOf``/``allOf`` and several non-null types have no column type:
    refused, naming the property.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.columns.model import FieldSpec, TypeSpec, struct_spec
from pipeline.errors import ConfigError

__all__ = ["json_schema_fields"]

_FORMATS = {"date-time": "timestamptz", "date": "date", "uuid": "uuid"}
_SIMPLE = {"integer": "long", "number": "double", "boolean": "boolean"}


def json_schema_fields(schema: Any) -> list[FieldSpec]:
    if not isinstance(schema, Mapping) or _kind(schema, "$")[1] != "object":
        raise ConfigError("a JSON Schema must describe an object to become table columns")
    required = set(schema.get("required", []))
    return [
        _field(name, prop, name in required, f"$.{name}")
        for name, prop in (schema.get("properties") or {}).items()
    ]


def _field(name: str, prop: Any, listed: bool, path: str) -> FieldSpec:
    nullable, _ = _kind(prop, path)
    doc = prop.get("description") if isinstance(prop, Mapping) else None
    return FieldSpec(name, _type(prop, path), required=listed and not nullable, doc=doc)


def _kind(prop: Any, path: str) -> tuple[bool, str]:
    """(null allowed, the one non-null type) of a property."""
    if not isinstance(prop, Mapping):
        raise ConfigError(f"JSON Schema property {path!r}: {prop!r} is not a schema")
    for key in ("$ref", "oneOf", "anyOf", "allOf"):
        if key in prop:
            raise ConfigError(f"JSON Schema property {path!r}: {key} has no column type")
    kind = prop.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    other = [k for k in kinds if k != "null"]
    if len(other) != 1 or not isinstance(other[0], str):
        raise ConfigError(
            f"JSON Schema property {path!r}: type {kind!r} has no column type "
            "(one type, or one type and null)"
        )
    return len(other) < len(kinds), other[0]


def _type(prop: Mapping[str, Any], path: str) -> TypeSpec:
    _, kind = _kind(prop, path)
    if kind == "string":
        return _FORMATS.get(str(prop.get("format", "")), "string")
    if kind in _SIMPLE:
        return _SIMPLE[kind]
    if kind == "array":
        items = prop.get("items")
        if not isinstance(items, Mapping):
            raise ConfigError(f"JSON Schema property {path!r}: an array needs items")
        nullable, _ = _kind(items, f"{path}[]")
        return {
            "type": "list",
            "element": _type(items, f"{path}[]"),
            "elementRequired": not nullable,
        }
    if kind == "object":
        props = prop.get("properties")
        if props:
            required = set(prop.get("required", []))
            return struct_spec(
                _field(name, sub, name in required, f"{path}.{name}") for name, sub in props.items()
            )
        values = prop.get("additionalProperties")
        if isinstance(values, Mapping):
            nullable, _ = _kind(values, f"{path}{{}}")
            return {
                "type": "map",
                "value": _type(values, f"{path}{{}}"),
                "valueRequired": not nullable,
            }
        raise ConfigError(
            f"JSON Schema property {path!r}: an object needs properties or an "
            "additionalProperties schema"
        )
    raise ConfigError(f"JSON Schema property {path!r}: type {kind!r} has no column type")
