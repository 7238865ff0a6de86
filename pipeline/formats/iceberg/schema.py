"""Table schemas for ingested topics, in Iceberg terms.

The columns themselves (user fields, Kafka coordinates, dead-letter columns) are format
neutral (:mod:`pipeline.columns`); this module makes pyiceberg schemas of them.
Everything here is pure pyiceberg/pyarrow so that the driver and Spark's Python workers
build the very same schema (same field ids) from the same configuration.

* :func:`build_schema` assigns field ids ``1..n`` the way ``new_table_metadata`` does
  (top-level fields first, then nested ones), so the schema equals the one the catalog
  will store.
* :func:`build_partition_spec` parses ``"day(ts)"``, ``"bucket(16, user_id)"``, ...
* :func:`arrow_schema` gives the Arrow schema workers write.
* :func:`columns_of` reads a table's schema back as columns (what schema evolution
  compares with the configured ones); :func:`apply_changes` applies planned changes
  (:mod:`pipeline.columns.evolution`) to one pyiceberg ``UpdateSchema``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
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
)

from pipeline import columns as cols
from pipeline.columns import (
    HEADERS_TYPE_NAME,
    KAFKA_COLUMN_NAMES,
    KAFKA_COLUMNS,
    Column,
    ColumnType,
    FieldSpec,
)
from pipeline.columns.evolution import (
    AddColumn,
    Change,
    MakeOptional,
    RenameColumn,
    Rules,
    UpdateDoc,
    WidenType,
    plan_changes,
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
    "iceberg_schema",
    "parse_type",
]

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
}


def _iceberg_type(t: ColumnType, ids: itertools.count[int]) -> IcebergType:
    if isinstance(t, cols.Primitive):
        return _PRIMITIVES[t.name]
    if isinstance(t, cols.Decimal):
        return DecimalType(t.precision, t.scale)
    if isinstance(t, cols.ListOf):
        return ListType(
            element_id=next(ids),
            element=_iceberg_type(t.element, ids),
            element_required=t.element_required,
        )
    if isinstance(t, cols.MapOf):
        key_id = next(ids)
        return MapType(
            key_id=key_id,
            key_type=StringType(),
            value_id=next(ids),
            value_type=_iceberg_type(t.value, ids),
            value_required=t.value_required,
        )
    return StructType(*[_field(c, ids) for c in t.fields])


_PRIMITIVE_NAMES = {type(t): name for name, t in _PRIMITIVES.items()}


def _column_type(t: IcebergType, path: str) -> ColumnType:
    """The column type of an Iceberg type (the inverse of ``_iceberg_type``)."""
    if isinstance(t, DecimalType):
        return cols.Decimal(t.precision, t.scale)
    if isinstance(t, ListType):
        return cols.ListOf(_column_type(t.element_type, f"{path}.element"), t.element_required)
    if isinstance(t, MapType) and isinstance(t.key_type, StringType):
        return cols.MapOf(_column_type(t.value_type, f"{path}.value"), t.value_required)
    if isinstance(t, StructType):
        return cols.StructOf(tuple(_column(f, path) for f in t.fields))
    if type(t) in _PRIMITIVE_NAMES:
        return cols.Primitive(_PRIMITIVE_NAMES[type(t)])
    raise ConfigError(f"column {path!r}: the table's type {t} is not one this pipeline writes")


def _column(f: NestedField, parent: str = "") -> Column:
    path = f"{parent}.{f.name}" if parent else f.name
    return Column(f.name, _column_type(f.field_type, path), f.required, f.doc)


def columns_of(schema: Schema) -> tuple[Column, ...]:
    """The table's columns as the column model has them (no field ids)."""
    return tuple(_column(f) for f in schema.fields)


def planned_changes(table: Any, columns: Sequence[Column], name: str) -> list[Change]:
    """The changes ``columns`` make to the pyiceberg ``table``'s current schema
    (SchemaChangeRefused naming ``name`` for what no restart may change)."""
    return plan_changes(columns_of(table.schema()), columns, Rules(f"table {name}"))


def apply_changes(update: Any, changes: list[Change]) -> None:
    """Apply planned changes to a pyiceberg ``UpdateSchema`` (paths are the old names, as
    ``UpdateSchema`` resolves them against the schema it started from)."""
    for c in changes:
        if isinstance(c, RenameColumn):
            update.rename_column(c.path, c.new_name)
        elif isinstance(c, WidenType):
            update.update_column(c.path, field_type=_iceberg_type(c.new, itertools.count(1)))
        elif isinstance(c, MakeOptional):
            update.make_column_optional(c.path)
        elif isinstance(c, UpdateDoc):
            update.update_column(c.path, doc=c.doc)
        elif isinstance(c, AddColumn):
            new_type = _iceberg_type(c.column.type, itertools.count(1))
            update.add_column(c.path, new_type, doc=c.column.doc, required=False)


def _field(c: Column, ids: itertools.count[int]) -> NestedField:
    field_id = next(ids)
    return NestedField(field_id, c.name, _iceberg_type(c.type, ids), c.required, c.doc)


def parse_type(spec: cols.TypeSpec, field_name: str = "?") -> IcebergType:
    """The Iceberg type for a configured type; ConfigError naming the field otherwise."""
    return _iceberg_type(cols.parse_type(spec, field_name), itertools.count(1))


def iceberg_schema(columns: Iterable[Column]) -> Schema:
    """The pyiceberg schema of ``columns``, field ids assigned as ``new_table_metadata``
    does (top-level fields first, then nested)."""
    ids = itertools.count(1)
    return assign_fresh_schema_ids(Schema(*[_field(c, ids) for c in columns]))


def build_schema(fields: list[FieldSpec], raw: bool = False) -> Schema:
    """The table schema: user fields (or raw key/value/headers) then the Kafka columns."""
    return iceberg_schema(cols.table_columns(fields, raw=raw))


def dead_letter_schema() -> Schema:
    """Dead-letter rows: raw key/value/headers, the decode error, and the Kafka columns."""
    return iceberg_schema(cols.dead_letter_columns())


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
