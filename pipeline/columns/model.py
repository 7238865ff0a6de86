"""The columns of a pipeline's tables, independent of any table format.

Every format builds its own table schema from these (Iceberg: a pyiceberg ``Schema`` with
field ids, :mod:`pipeline.formats.iceberg.schema`; Hudi: Arrow and Avro schemas,
:mod:`pipeline.formats.hudi.schema`), so both hold the same columns with the same types.
Plain data only: no pyiceberg, no pyarrow.

* :class:`FieldSpec` is one configured column (``name``, Iceberg-style ``type`` name).
* :func:`parse_type` turns a configured type (a name, or a mapping for the nested types
  ``struct``, ``list`` and ``map``) into a :data:`ColumnType` (:class:`Primitive`,
  :class:`Decimal`, :class:`ListOf`, :class:`MapOf`, :class:`StructOf`).
* :func:`table_columns` validates the configured fields and appends the Kafka coordinate
  columns (:data:`KAFKA_COLUMNS`); :func:`dead_letter_columns` is the dead-letter table.
* :func:`spark_ddl` is the Spark DDL the decoder hands to ``from_json``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.errors import ConfigError

__all__ = [
    "ALLOWED_TYPES",
    "HEADERS_TYPE_NAME",
    "KAFKA_COLUMNS",
    "KAFKA_COLUMN_NAMES",
    "Column",
    "ColumnType",
    "Decimal",
    "FieldSpec",
    "ListOf",
    "MapOf",
    "Primitive",
    "StructOf",
    "TypeSpec",
    "data_columns",
    "dead_letter_columns",
    "parse_type",
    "spark_ddl",
    "table_columns",
]


#: A configured type: a primitive's name (``"long"``, ``"decimal(9, 2)"``) or a mapping
#: for a nested type (``{"type": "struct", "fields": [...]}``, ``{"type": "list",
#: "element": ...}``, ``{"type": "map", "value": ...}``).
TypeSpec = str | Mapping[str, Any]


@dataclass(frozen=True)
class FieldSpec:
    """One configured column: ``name``, type (:data:`TypeSpec`), nullability, documentation."""

    name: str
    type: TypeSpec
    required: bool = False
    doc: str | None = None
    renamed_from: str | None = None  # the column's previous name (schema evolution)


def struct_spec(fields: Iterable[FieldSpec]) -> dict[str, Any]:
    """``fields`` as one nested ``struct`` type mapping, as ``decode.schema`` takes it (what
    the registry schemas' records, objects and messages become)."""
    members = []
    for f in fields:
        member: dict[str, Any] = {"name": f.name, "type": f.type, "required": f.required}
        if f.doc is not None:
            member["doc"] = f.doc
        members.append(member)
    return {"type": "struct", "fields": members}


@dataclass(frozen=True)
class Primitive:
    """``boolean``, ``int``, ``long``, ``float``, ``double``, ``string``, ``binary``,
    ``date``, ``timestamp`` (no zone) or ``timestamptz``."""

    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Decimal:
    precision: int
    scale: int

    def __str__(self) -> str:
        return f"decimal({self.precision}, {self.scale})"


@dataclass(frozen=True)
class ListOf:
    element: ColumnType
    element_required: bool

    def __str__(self) -> str:
        return f"list<{self.element}>"


@dataclass(frozen=True)
class MapOf:
    """A JSON object with free keys: the keys are strings (JSON has no other)."""

    value: ColumnType
    value_required: bool

    def __str__(self) -> str:
        return f"map<string, {self.value}>"


@dataclass(frozen=True)
class StructOf:
    fields: tuple[Column, ...]

    def __str__(self) -> str:
        return "struct<" + ", ".join(f"{f.name}: {f.type}" for f in self.fields) + ">"


ColumnType = Primitive | Decimal | ListOf | MapOf | StructOf


@dataclass(frozen=True)
class Column:
    """One table column: name, type, nullability (``required``), documentation, and the
    name it had before (``renamed_from``: a rename the configuration asks for)."""

    name: str
    type: ColumnType
    required: bool = False
    doc: str | None = None
    renamed_from: str | None = None


#: Kafka coordinates every row carries, appended after the user's fields.
KAFKA_COLUMNS: tuple[FieldSpec, ...] = (
    FieldSpec("_kafka_topic", "string", required=True, doc="Kafka topic the record came from"),
    FieldSpec("_kafka_partition", "int", required=True, doc="Kafka partition"),
    FieldSpec("_kafka_offset", "long", required=True, doc="Kafka offset within the partition"),
    FieldSpec("_kafka_timestamp", "timestamptz", required=False, doc="Kafka record timestamp"),
)
KAFKA_COLUMN_NAMES: tuple[str, ...] = tuple(f.name for f in KAFKA_COLUMNS)

#: Type of the ``headers`` column in raw and dead-letter tables.
HEADERS_TYPE_NAME = "list<struct<key: string, value: binary>>"

_PRIMITIVES: dict[str, Primitive] = {
    name: Primitive(name)
    for name in (
        "boolean",
        "int",
        "long",
        "float",
        "double",
        "string",
        "binary",
        "date",
        "timestamp",
        "timestamptz",
    )
}
# Spark has no UUID type and from_json reads UUIDs as strings: store them as strings.
_PRIMITIVES["uuid"] = _PRIMITIVES["string"]
ALLOWED_TYPES: tuple[str, ...] = (*_PRIMITIVES, "decimal(p,s)")
_DECIMAL = re.compile(r"decimal\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)")


def parse_type(spec: TypeSpec, field_name: str = "?") -> ColumnType:
    """The column type for a configured type; ConfigError naming the field (its path for
    a nested one, e.g. ``items.element.price``) otherwise."""
    if isinstance(spec, Mapping):
        return _parse_nested(spec, field_name)
    text = spec.strip().lower() if isinstance(spec, str) else ""
    if text in _PRIMITIVES:
        return _PRIMITIVES[text]
    if m := _DECIMAL.fullmatch(text):
        precision, scale = int(m.group(1)), int(m.group(2))
        if not 1 <= precision <= 38 or scale > precision:
            raise ConfigError(
                f"field {field_name!r}: {spec!r} is not a valid decimal "
                "(need 1 <= precision <= 38 and 0 <= scale <= precision)"
            )
        return Decimal(precision, scale)
    raise ConfigError(
        f"field {field_name!r}: unknown type {spec!r}; allowed types: "
        f"{', '.join(ALLOWED_TYPES)}, or a mapping with type struct, list or map"
    )


_NESTED_KEYS: dict[str, tuple[set[str], set[str]]] = {
    # kind: (required keys, optional keys)
    "struct": ({"fields"}, set()),
    "list": ({"element"}, {"elementRequired"}),
    "map": ({"value"}, {"key", "valueRequired"}),
}


def _parse_nested(spec: Mapping[str, Any], path: str) -> ColumnType:
    kind = spec.get("type")
    if kind not in _NESTED_KEYS:
        raise ConfigError(
            f"field {path!r}: a nested type needs 'type: struct', 'type: list' or "
            f"'type: map' (got {kind!r})"
        )
    needed, optional = _NESTED_KEYS[kind]
    keys = set(spec) - {"type"}
    if missing := sorted(needed - keys):
        raise ConfigError(f"field {path!r}: a {kind} type needs {', '.join(missing)}")
    if unknown := sorted(keys - needed - optional):
        allowed = ", ".join(sorted(needed | optional))
        raise ConfigError(
            f"field {path!r}: unknown key(s) {', '.join(unknown)} (allowed: {allowed})"
        )
    if kind == "list":
        return ListOf(
            parse_type(spec["element"], f"{path}.element"),
            _flag(spec, "elementRequired", path),
        )
    if kind == "map":
        if str(spec.get("key", "string")).strip().lower() != "string":
            raise ConfigError(
                f"field {path!r}: map keys are JSON object keys, so the key type is string "
                f"(got {spec['key']!r})"
            )
        return MapOf(parse_type(spec["value"], f"{path}.value"), _flag(spec, "valueRequired", path))
    fields = spec["fields"]
    if not isinstance(fields, list) or not fields:
        raise ConfigError(f"field {path!r}: a struct type needs a non-empty list of fields")
    return StructOf(_parse_fields(fields, path))


def _flag(spec: Mapping[str, Any], key: str, path: str) -> bool:
    value = spec.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(f"field {path!r}: {key} must be true or false (got {value!r})")
    return value


_FIELD_KEYS = {"name", "type", "required", "doc", "renamedFrom"}


def _parse_fields(fields: list[Any], path: str) -> tuple[Column, ...]:
    seen: set[str] = set()
    out: list[Column] = []
    for i, f in enumerate(fields):
        where = f"{path}.fields[{i}]"
        if not isinstance(f, Mapping) or not isinstance(f.get("name"), str) or "type" not in f:
            raise ConfigError(f"field {where!r}: each struct field needs a name and a type")
        if unknown := sorted(set(f) - _FIELD_KEYS):
            raise ConfigError(
                f"field {where!r}: unknown key(s) {', '.join(unknown)} "
                f"(allowed: {', '.join(sorted(_FIELD_KEYS))})"
            )
        name = f["name"]
        if not name.strip():
            raise ConfigError(f"field {where!r}: the name is empty")
        if name.lower() in seen:
            raise ConfigError(
                f"field {path!r}: {name!r} is defined twice (names are case-insensitive)"
            )
        seen.add(name.lower())
        doc = f.get("doc")
        if doc is not None and not isinstance(doc, str):
            raise ConfigError(f"field '{path}.{name}': doc must be a string")
        child = f"{path}.{name}"
        renamed = f.get("renamedFrom")
        if renamed is not None and (not isinstance(renamed, str) or not renamed.strip()):
            raise ConfigError(f"field {child!r}: renamedFrom must be a column name")
        required = _flag(f, "required", child)
        out.append(Column(name, parse_type(f["type"], child), required, doc, renamed))
    return tuple(out)


HEADERS_TYPE = ListOf(
    StructOf(
        (
            Column("key", Primitive("string"), required=True),
            Column("value", Primitive("binary"), required=False),
        )
    ),
    element_required=True,
)


def _kafka_columns() -> list[Column]:
    return [Column(f.name, parse_type(f.type, f.name), f.required, f.doc) for f in KAFKA_COLUMNS]


def _raw_columns() -> list[Column]:
    return [
        Column("key", Primitive("binary"), required=False, doc="Kafka record key"),
        Column("value", Primitive("binary"), required=False, doc="Kafka record value"),
        Column("headers", HEADERS_TYPE, required=False, doc="Kafka headers"),
    ]


def table_columns(fields: Sequence[FieldSpec], raw: bool = False) -> tuple[Column, ...]:
    """The main table's columns: user fields (or raw key/value/headers), then Kafka's."""
    if raw:
        if fields:
            raise ConfigError("raw mode stores key, value and headers as bytes: it takes no fields")
        return (*_raw_columns(), *_kafka_columns())
    if not fields:
        raise ConfigError("schema has no fields (configure fields, or use raw mode)")
    seen: set[str] = set()
    out: list[Column] = []
    for f in fields:
        if not isinstance(f.name, str) or not f.name.strip():
            raise ConfigError(f"field name {f.name!r} is empty")
        if f.name.lower() in seen:
            raise ConfigError(f"field {f.name!r} is defined twice (names are case-insensitive)")
        if f.name.lower().startswith("_kafka_"):
            raise ConfigError(
                f"field {f.name!r}: names starting with '_kafka_' are reserved for "
                f"the Kafka columns {', '.join(KAFKA_COLUMN_NAMES)}"
            )
        seen.add(f.name.lower())
        out.append(Column(f.name, parse_type(f.type, f.name), f.required, f.doc, f.renamed_from))
    return (*out, *_kafka_columns())


def dead_letter_columns() -> tuple[Column, ...]:
    """Dead-letter rows: raw key/value/headers, the decode error, and the Kafka columns."""
    error = Column("error", Primitive("string"), required=True, doc="why decoding failed")
    return (*_raw_columns(), error, *_kafka_columns())


def data_columns(columns: Iterable[Column]) -> tuple[Column, ...]:
    """The decoded columns: all but the Kafka coordinates."""
    return tuple(c for c in columns if c.name not in KAFKA_COLUMN_NAMES)


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


_SPARK_PRIMITIVES = {
    "boolean": "BOOLEAN",
    "int": "INT",
    "long": "BIGINT",
    "float": "FLOAT",
    "double": "DOUBLE",
    "string": "STRING",
    "binary": "BINARY",
    "date": "DATE",
    "timestamptz": "TIMESTAMP",
    "timestamp": "TIMESTAMP_NTZ",
}


def _spark_type(t: ColumnType) -> str:
    if isinstance(t, Primitive) and t.name in _SPARK_PRIMITIVES:
        return _SPARK_PRIMITIVES[t.name]
    if isinstance(t, Decimal):
        return f"DECIMAL({t.precision},{t.scale})"
    if isinstance(t, ListOf):
        return f"ARRAY<{_spark_type(t.element)}>"
    if isinstance(t, MapOf):
        return f"MAP<STRING, {_spark_type(t.value)}>"
    if isinstance(t, StructOf):
        inner = ", ".join(f"{_quote(f.name)}: {_spark_type(f.type)}" for f in t.fields)
        return f"STRUCT<{inner}>"
    raise ConfigError(f"type {t} has no Spark SQL equivalent")


def spark_ddl(columns: Iterable[Column]) -> str:
    """Spark DDL for ``columns`` (e.g. for ``from_json``): ``"`id` BIGINT, `ts` TIMESTAMP"``.

    Column names are back-quoted so reserved words and odd characters parse. Nullability is
    not expressed: ``from_json`` makes every column nullable anyway.
    """
    return ", ".join(f"{_quote(c.name)} {_spark_type(c.type)}" for c in columns)
