"""The columns of a pipeline's tables, independent of any table format.

Every format builds its own table schema from these (Iceberg: a pyiceberg ``Schema`` with
field ids, :mod:`pipeline.formats.iceberg.schema`; Hudi: Arrow and Avro schemas,
:mod:`pipeline.formats.hudi.schema`), so both hold the same columns with the same types.
Plain data only: no pyiceberg, no pyarrow.

* :class:`FieldSpec` is one configured column (``name``, Iceberg-style ``type`` name).
* :func:`parse_type` turns a type name into a :data:`ColumnType` (:class:`Primitive`,
  :class:`Decimal`, :class:`ListOf`, :class:`StructOf`).
* :func:`table_columns` validates the configured fields and appends the Kafka coordinate
  columns (:data:`KAFKA_COLUMNS`); :func:`dead_letter_columns` is the dead-letter table.
* :func:`spark_ddl` is the Spark DDL the decoder hands to ``from_json``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

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
    "Primitive",
    "StructOf",
    "data_columns",
    "dead_letter_columns",
    "parse_type",
    "spark_ddl",
    "table_columns",
]


@dataclass(frozen=True)
class FieldSpec:
    """One configured column: ``name``, Iceberg type name, nullability, documentation."""

    name: str
    type: str
    required: bool = False
    doc: str | None = None


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
class StructOf:
    fields: tuple[Column, ...]

    def __str__(self) -> str:
        return "struct<" + ", ".join(f"{f.name}: {f.type}" for f in self.fields) + ">"


ColumnType = Primitive | Decimal | ListOf | StructOf


@dataclass(frozen=True)
class Column:
    """One table column: name, type, nullability (``required``), documentation."""

    name: str
    type: ColumnType
    required: bool = False
    doc: str | None = None


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


def parse_type(type_name: str, field_name: str = "?") -> ColumnType:
    """The column type for a configured type name; ConfigError naming the field otherwise."""
    text = type_name.strip().lower() if isinstance(type_name, str) else ""
    if text in _PRIMITIVES:
        return _PRIMITIVES[text]
    if m := _DECIMAL.fullmatch(text):
        precision, scale = int(m.group(1)), int(m.group(2))
        if not 1 <= precision <= 38 or scale > precision:
            raise ConfigError(
                f"field {field_name!r}: {type_name!r} is not a valid decimal "
                "(need 1 <= precision <= 38 and 0 <= scale <= precision)"
            )
        return Decimal(precision, scale)
    raise ConfigError(
        f"field {field_name!r}: unknown type {type_name!r}; "
        f"allowed types: {', '.join(ALLOWED_TYPES)}"
    )


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
        out.append(Column(f.name, parse_type(f.type, f.name), f.required, f.doc))
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
