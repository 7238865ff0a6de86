"""Table schemas for ingested topics: user fields + Kafka coordinates, in Iceberg terms.

Everything here is pure pyiceberg/pyarrow so that the driver and Spark's Python workers
build the very same schema (same field ids) from the same configuration.

* :class:`FieldSpec` is one configured column (``name``, Iceberg-style ``type``).
* :func:`build_schema` appends the Kafka coordinate columns (:data:`KAFKA_COLUMNS`) and
  assigns field ids ``1..n`` the way ``new_table_metadata`` does (top-level fields first,
  then nested ones), so the schema equals the one the catalog will store.
* :func:`build_partition_spec` parses ``"day(ts)"``, ``"bucket(16, user_id)"``, ...
* :func:`arrow_schema` / :func:`spark_ddl` give the Arrow schema workers write and the
  Spark DDL the decoder hands to ``from_json``.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    UUIDType,
)

from pipeline.errors import ConfigError

__all__ = [
    "HEADERS_TYPE_NAME",
    "KAFKA_COLUMNS",
    "KAFKA_COLUMN_NAMES",
    "FieldSpec",
    "arrow_schema",
    "build_partition_spec",
    "build_schema",
    "dead_letter_schema",
    "parse_type",
    "spark_ddl",
]


@dataclass(frozen=True)
class FieldSpec:
    """One configured column: ``name``, Iceberg type name, nullability, documentation."""

    name: str
    type: str
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

_PRIMITIVES: dict[str, IcebergType] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "string": StringType(),
    "binary": BinaryType(),
    "date": DateType(),
    "timestamp": TimestampType(),
    "timestamptz": TimestamptzType(),
    # Spark has no UUID type and from_json reads UUIDs as strings: store them as strings.
    "uuid": StringType(),
}
ALLOWED_TYPES: tuple[str, ...] = (*_PRIMITIVES, "decimal(p,s)")
_DECIMAL = re.compile(r"decimal\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)")


def parse_type(type_name: str, field_name: str = "?") -> IcebergType:
    """The Iceberg type for a configured type name; ConfigError naming the field otherwise."""
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
        return DecimalType(precision, scale)
    raise ConfigError(
        f"field {field_name!r}: unknown type {type_name!r}; "
        f"allowed types: {', '.join(ALLOWED_TYPES)}"
    )


def _headers_type(ids: itertools.count[int]) -> ListType:
    return ListType(
        element_id=next(ids),
        element=StructType(
            NestedField(next(ids), "key", StringType(), required=True),
            NestedField(next(ids), "value", BinaryType(), required=False),
        ),
        element_required=True,
    )


def _kafka_fields(ids: itertools.count[int]) -> list[NestedField]:
    return [
        NestedField(next(ids), f.name, parse_type(f.type, f.name), required=f.required, doc=f.doc)
        for f in KAFKA_COLUMNS
    ]


def _raw_fields(ids: itertools.count[int]) -> list[NestedField]:
    return [
        NestedField(next(ids), "key", BinaryType(), required=False, doc="Kafka record key"),
        NestedField(next(ids), "value", BinaryType(), required=False, doc="Kafka record value"),
        NestedField(next(ids), "headers", _headers_type(ids), required=False, doc="Kafka headers"),
    ]


def _fresh(fields: list[NestedField]) -> Schema:
    # Same id assignment as new_table_metadata (top-level fields first, then nested).
    return assign_fresh_schema_ids(Schema(*fields))


def build_schema(fields: list[FieldSpec], raw: bool = False) -> Schema:
    """The table schema: user fields (or raw key/value/headers) then the Kafka columns."""
    ids = itertools.count(1)
    if raw:
        if fields:
            raise ConfigError("raw mode stores key, value and headers as bytes: it takes no fields")
        return _fresh([*_raw_fields(ids), *_kafka_fields(ids)])
    if not fields:
        raise ConfigError("schema has no fields (configure fields, or use raw mode)")
    seen: set[str] = set()
    out: list[NestedField] = []
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
        out.append(NestedField(next(ids), f.name, parse_type(f.type, f.name), f.required, f.doc))
    return _fresh([*out, *_kafka_fields(ids)])


def dead_letter_schema() -> Schema:
    """Dead-letter rows: raw key/value/headers, the decode error, and the Kafka columns."""
    ids = itertools.count(1)
    error = NestedField(next(ids), "error", StringType(), required=True, doc="why decoding failed")
    raw = _raw_fields(ids)
    return _fresh([*raw, error, *_kafka_fields(ids)])


_TRANSFORM = re.compile(r"(?P<name>[A-Za-z_]+)\s*\((?P<args>.*)\)", re.DOTALL)
_TIME_TRANSFORMS: dict[str, Transform[Any, Any]] = {
    "year": YearTransform(),
    "years": YearTransform(),
    "month": MonthTransform(),
    "months": MonthTransform(),
    "day": DayTransform(),
    "days": DayTransform(),
    "date": DayTransform(),
    "hour": HourTransform(),
    "hours": HourTransform(),
}
_ALLOWED_PARTITIONS = (
    "column, identity(col), year(col), month(col), day(col), hour(col), "
    "bucket(N, col), truncate(W, col)"
)


def _parse_partition(expr: str) -> tuple[Transform[Any, Any], str, str]:
    """``(transform, source column, partition field suffix)`` for one expression."""
    text = expr.strip()
    m = _TRANSFORM.fullmatch(text)
    if m is None:
        if not text or "(" in text or ")" in text or "," in text:
            raise ConfigError(f"partition expression {expr!r} is not one of: {_ALLOWED_PARTITIONS}")
        return IdentityTransform(), text, ""
    name = m.group("name").lower()
    args = [a.strip() for a in m.group("args").split(",")]
    if name == "identity" and len(args) == 1:
        return IdentityTransform(), args[0], ""
    if name in _TIME_TRANSFORMS and len(args) == 1:
        transform = _TIME_TRANSFORMS[name]
        return transform, args[0], f"_{transform}"
    if name in ("bucket", "truncate") and len(args) == 2:
        try:
            n = int(args[0])
        except ValueError:
            raise ConfigError(
                f"partition expression {expr!r}: {name} needs an integer first argument, "
                f"e.g. {name}(16, col)"
            ) from None
        if n <= 0:
            raise ConfigError(f"partition expression {expr!r}: {name} width must be positive")
        if name == "bucket":
            return BucketTransform(num_buckets=n), args[1], f"_bucket_{n}"
        return TruncateTransform(width=n), args[1], f"_trunc_{n}"
    raise ConfigError(f"partition expression {expr!r} is not one of: {_ALLOWED_PARTITIONS}")


def build_partition_spec(schema: Schema, partition_by: list[str]) -> PartitionSpec:
    """A PartitionSpec from expressions like ``"day(ts)"``, ``"country"``, ``"bucket(16, id)"``."""
    fields: list[PartitionField] = []
    names: set[str] = set()
    for i, expr in enumerate(partition_by):
        transform, column, suffix = _parse_partition(expr)
        try:
            source = schema.find_field(column, case_sensitive=True)
        except ValueError:
            columns = ", ".join(f.name for f in schema.fields)
            raise ConfigError(
                f"partition expression {expr!r}: unknown column {column!r}; columns: {columns}"
            ) from None
        if not source.field_type.is_primitive or not transform.can_transform(source.field_type):
            raise ConfigError(
                f"partition expression {expr!r}: transform {transform} cannot be applied to "
                f"column {column!r} of type {source.field_type}"
            )
        name = f"{column}{suffix}"
        if name in names:
            raise ConfigError(f"partition expression {expr!r} repeats partition field {name!r}")
        names.add(name)
        fields.append(
            PartitionField(
                source_id=source.field_id, field_id=1000 + i, transform=transform, name=name
            )
        )
    return PartitionSpec(*fields)


def arrow_schema(schema: Schema) -> pa.Schema:
    """The Arrow schema pyiceberg writes for ``schema`` (with Parquet field ids)."""
    return schema_to_pyarrow(schema)


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _spark_type(t: IcebergType) -> str:
    if isinstance(t, BooleanType):
        return "BOOLEAN"
    if isinstance(t, IntegerType):
        return "INT"
    if isinstance(t, LongType):
        return "BIGINT"
    if isinstance(t, FloatType):
        return "FLOAT"
    if isinstance(t, DoubleType):
        return "DOUBLE"
    if isinstance(t, (StringType, UUIDType)):
        return "STRING"
    if isinstance(t, (BinaryType, FixedType)):
        return "BINARY"
    if isinstance(t, DateType):
        return "DATE"
    if isinstance(t, TimestamptzType):
        return "TIMESTAMP"
    if isinstance(t, TimestampType):
        return "TIMESTAMP_NTZ"
    if isinstance(t, DecimalType):
        return f"DECIMAL({t.precision},{t.scale})"
    if isinstance(t, ListType):
        return f"ARRAY<{_spark_type(t.element_type)}>"
    if isinstance(t, MapType):
        return f"MAP<{_spark_type(t.key_type)}, {_spark_type(t.value_type)}>"
    if isinstance(t, StructType):
        inner = ", ".join(f"{_quote(f.name)}: {_spark_type(f.field_type)}" for f in t.fields)
        return f"STRUCT<{inner}>"
    raise ConfigError(f"type {t} has no Spark SQL equivalent")


def spark_ddl(schema: Schema) -> str:
    """Spark DDL for ``schema`` (e.g. for ``from_json``): ``"`id` BIGINT, `ts` TIMESTAMP"``.

    Column names are back-quoted so reserved words and odd characters parse. Nullability is
    not expressed: ``from_json`` makes every column nullable anyway.
    """
    return ", ".join(f"{_quote(f.name)} {_spark_type(f.field_type)}" for f in schema.fields)
