"""A Hudi table's shape: the Arrow columns workers write, the Avro schema commits carry,
the key generator, record keys and partition paths.

Everything here is plain data or pure pyarrow, so the driver and Spark's Python workers
compute the same names and values from the same :class:`HudiTableSpec`.

* Columns come from the pipeline's format-neutral columns (:mod:`pipeline.columns`:
  the same type names and Kafka columns as the Iceberg tables). Timestamps are written as
  microseconds, UTC-adjusted (``timestamp`` without zone too: its wall clock is stored as UTC), ints
  stay int32/int64, decimals are fixed-length byte arrays (pyarrow's default, minimal size).
* The Avro schema (``extraMetadata.schema`` of every commit) has no meta fields: record
  ``<table>_record`` in namespace ``hoodie.<table>``; nullable fields are
  ``["null", T]`` with default null, required ones plain ``T``. hudi-rs casts the Parquet
  columns to this schema, so it must match the written Arrow types exactly.
* Record key (``_hoodie_record_key``): one key field -> its value; several ->
  ``f1:v1,f2:v2`` with ``__null__``/``__empty__`` for null/empty values, as Hudi's
  ``ComplexKeyGenerator`` builds it. Default fields: the Kafka coordinates
  ``_kafka_topic,_kafka_partition,_kafka_offset`` (unique per record).
* Partition path (``_hoodie_partition_path``): hive style ``f1=v1/f2=v2``, values
  escaped like Hudi's ``PartitionPathEncodeUtils`` (``partitionpath.urlencode=true``),
  null/empty -> ``__HIVE_DEFAULT_PARTITION__``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.columns import (
    Column,
    ColumnType,
    Decimal,
    ListOf,
    MapOf,
    Primitive,
    StructOf,
)
from pipeline.errors import ConfigError
from pipeline.storage.s3_settings import S3Settings

__all__ = [
    "DEFAULT_PARTITION",
    "KAFKA_KEY_FIELDS",
    "META_COLUMNS",
    "HudiTableSpec",
    "escape_partition_value",
    "partition_path",
    "record_keys",
]

#: The five meta columns every base file starts with (all nullable UTF-8 strings).
META_COLUMNS: tuple[str, ...] = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)
META_SCHEMA = pa.schema([pa.field(name, pa.string(), nullable=True) for name in META_COLUMNS])

#: Record key fields when none are configured: unique per Kafka record.
KAFKA_KEY_FIELDS: tuple[str, ...] = ("_kafka_topic", "_kafka_partition", "_kafka_offset")
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
NULL_KEY, EMPTY_KEY = "__null__", "__empty__"

_KEYGEN = "org.apache.hudi.keygen."
_AVRO_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Types whose string form is unambiguous in a path and in a key (what Hudi's key
# generators produce for them: toString / LocalDate.toString).
_KEY_TYPES = frozenset(("string", "int", "long", "boolean", "date"))
# Hive's escapePathName set (Hudi's PartitionPathEncodeUtils): control chars and these.
_ESCAPED = frozenset([chr(c) for c in range(1, 0x20)] + list("\"#%'*/:=?\\\x7f{[]^"))


def escape_partition_value(value: str) -> str:
    """A partition value as a path segment (``%XX`` for Hive's special characters)."""
    if not any(c in _ESCAPED for c in value):
        return value
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


def _value_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def partition_path(fields: Sequence[str], values: Sequence[Any]) -> str:
    """``f1=v1/f2=v2`` for one row's partition values ('' when unpartitioned)."""
    parts = []
    for name, value in zip(fields, values, strict=True):
        text = _value_text(value)
        segment = escape_partition_value(text) if text else DEFAULT_PARTITION
        parts.append(f"{name}={segment}")
    return "/".join(parts)


def _as_text(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    if pa.types.is_boolean(column.type):
        return pc.if_else(column, "true", "false")
    return pc.cast(column, pa.string())  # dates cast to ISO yyyy-MM-dd


def record_keys(batch: pa.RecordBatch | pa.Table, fields: Sequence[str]) -> pa.Array:
    """``_hoodie_record_key`` for every row (see the module docstring for the format)."""
    if len(fields) == 1:
        keys = _as_text(batch.column(fields[0]))
        if keys.null_count:
            raise ValueError(f"record key field {fields[0]!r} is null in {keys.null_count} rows")
        return keys if isinstance(keys, pa.Array) else keys.combine_chunks()
    pieces: list[Any] = []
    for i, name in enumerate(fields):
        text = _as_text(batch.column(name))
        text = pc.if_else(pc.equal(text, ""), EMPTY_KEY, text)
        text = pc.fill_null(text, NULL_KEY)
        pieces += [("," if i else "") + name + ":", text]
    joined = pc.binary_join_element_wise(*pieces, "")
    return joined if isinstance(joined, pa.Array) else joined.combine_chunks()


def _min_fixed_bytes(precision: int) -> int:
    n = 1
    while 2 ** (8 * n - 1) - 1 < 10**precision - 1:
        n += 1
    return n


_ARROW_PRIMITIVES: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
}
_AVRO_PRIMITIVES: dict[str, Any] = {
    "boolean": "boolean",
    "int": "int",
    "long": "long",
    "float": "float",
    "double": "double",
    "string": "string",
    "binary": "bytes",
    "date": {"type": "int", "logicalType": "date"},
    "timestamp": {"type": "long", "logicalType": "timestamp-micros"},
    "timestamptz": {"type": "long", "logicalType": "timestamp-micros"},
}


def _arrow_type(t: ColumnType) -> pa.DataType:
    if isinstance(t, Primitive) and t.name in _ARROW_PRIMITIVES:
        return _ARROW_PRIMITIVES[t.name]
    if isinstance(t, Decimal):
        return pa.decimal128(t.precision, t.scale)
    if isinstance(t, ListOf):
        return pa.list_(
            pa.field("element", _arrow_type(t.element), nullable=not t.element_required)
        )
    if isinstance(t, MapOf):
        value = pa.field("value", _arrow_type(t.value), nullable=not t.value_required)
        return pa.map_(pa.field("key", pa.string(), nullable=False), value)
    if isinstance(t, StructOf):
        return pa.struct([_arrow_field(f) for f in t.fields])
    raise ConfigError(f"type {t} cannot be written to a Hudi table")


def _arrow_field(f: Column) -> pa.Field:
    return pa.field(f.name, _arrow_type(f.type), nullable=not f.required)


def _avro_type(t: ColumnType, name: str, namespace: str) -> Any:
    """Avro for ``t`` (field ``name`` of the record whose full name is ``namespace``)."""
    if isinstance(t, Primitive) and t.name in _AVRO_PRIMITIVES:
        return _AVRO_PRIMITIVES[t.name]
    if isinstance(t, Decimal):
        # named like Spark's SchemaConverters: <record namespace>.<field>.fixed
        return {
            "type": "fixed",
            "name": "fixed",
            "namespace": f"{namespace}.{name}",
            "size": _min_fixed_bytes(t.precision),
            "logicalType": "decimal",
            "precision": t.precision,
            "scale": t.scale,
        }
    if isinstance(t, ListOf):
        item = _avro_type(t.element, name, namespace)
        return {"type": "array", "items": item if t.element_required else ["null", item]}
    if isinstance(t, MapOf):  # Avro map keys are strings, as JSON's are
        value = _avro_type(t.value, name, namespace)
        return {"type": "map", "values": value if t.value_required else ["null", value]}
    if isinstance(t, StructOf):
        return _avro_record(list(t.fields), name, namespace)
    raise ConfigError(f"type {t} cannot be written to a Hudi table")


def _avro_record(fields: list[Column], name: str, namespace: str) -> dict[str, Any]:
    full = f"{namespace}.{name}"
    out: list[dict[str, Any]] = []
    for f in fields:
        if not _AVRO_NAME.match(f.name):
            raise ConfigError(
                f"field {f.name!r}: Hudi (Avro) field names must match [A-Za-z_][A-Za-z0-9_]*"
            )
        t = _avro_type(f.type, f.name, full)
        if f.required:
            out.append({"name": f.name, "type": t})
        else:
            out.append({"name": f.name, "type": ["null", t], "default": None})
    return {"type": "record", "name": name, "namespace": namespace, "fields": out}


_AVRO_PRIMITIVE_NAMES = {"boolean", "int", "long", "float", "double", "string"}


def _from_avro(t: Any, hint: ColumnType | None, path: str) -> tuple[ColumnType, bool]:
    """(column type, required) of an Avro type; ``hint`` (the configured type at the same
    place) tells ``timestamp`` from ``timestamptz``, which Avro writes alike."""
    required = True
    if isinstance(t, list):  # ["null", T]: optional
        others = [x for x in t if x != "null"]
        if len(others) != 1:
            raise ConfigError(f"column {path!r}: the table's Avro union {t} is not ['null', T]")
        t, required = others[0], len(others) == len(t)
    if isinstance(t, str):
        if t in _AVRO_PRIMITIVE_NAMES:
            return Primitive(t), required
        if t == "bytes":
            return Primitive("binary"), required
    elif isinstance(t, dict):
        kind, logical = t.get("type"), t.get("logicalType")
        if logical == "decimal":
            return Decimal(int(t["precision"]), int(t.get("scale", 0))), required
        if logical == "date":
            return Primitive("date"), required
        if logical in ("timestamp-micros", "local-timestamp-micros"):
            naive = isinstance(hint, Primitive) and hint.name == "timestamp"
            return Primitive("timestamp" if naive else "timestamptz"), required
        if kind == "array":
            inner = hint.element if isinstance(hint, ListOf) else None
            element, element_required = _from_avro(t["items"], inner, f"{path}.element")
            return ListOf(element, element_required), required
        if kind == "map":
            inner = hint.value if isinstance(hint, MapOf) else None
            value, value_required = _from_avro(t["values"], inner, f"{path}.value")
            return MapOf(value, value_required), required
        if kind == "record":
            kids = hint.fields if isinstance(hint, StructOf) else ()
            return StructOf(columns_of_avro(t, kids, path)), required
        if isinstance(kind, str) and logical is None:
            return _from_avro(kind, hint, path)
    raise ConfigError(f"column {path!r}: the table's Avro type {t} is not one this pipeline writes")


def columns_of_avro(
    record: dict[str, Any], hints: Sequence[Column] = (), parent: str = ""
) -> tuple[Column, ...]:
    """The columns of a commit's Avro record schema (the inverse of ``_avro_record``).
    Hudi's schema has no column docs: a configured doc is taken as the table's."""
    by_name = {c.name: c for c in hints}
    out = []
    for f in record.get("fields", []):
        path = f"{parent}.{f['name']}" if parent else f["name"]
        hint = by_name.get(f["name"])
        t, required = _from_avro(f["type"], hint.type if hint else None, path)
        out.append(Column(f["name"], t, required, f.get("doc", hint.doc if hint else None)))
    return tuple(out)


@dataclass(frozen=True)
class HudiTableSpec:
    """What a Hudi table of this pipeline is: location, names, columns, keys, partitions.

    Small and picklable: it travels to the workers inside the write context.
    """

    base_path: str  # absolute local path, or s3://bucket/key
    database: str
    name: str
    arrow_schema: pa.Schema  # data columns as written (no meta columns)
    avro_schema: str  # JSON, no meta fields
    record_key_fields: tuple[str, ...]
    partition_fields: tuple[str, ...]
    s3: S3Settings | None = None  # how to reach an s3:// base (None: local, or AWS defaults)
    columns: tuple[Column, ...] = ()  # what the schemas were built from (schema evolution)

    @classmethod
    def build(
        cls,
        base_path: str,
        database: str,
        name: str,
        columns: Sequence[Column],
        record_key_fields: Sequence[str] = (),
        partition_fields: Sequence[str] = (),
        s3: S3Settings | None = None,
    ) -> HudiTableSpec:
        """Validate the key/partition fields against ``columns`` (ConfigError naming the
        field) and derive the Arrow and Avro schemas."""
        for label, text in (("database", database), ("table", name)):
            if not _AVRO_NAME.match(text):
                raise ConfigError(f"Hudi {label} name {text!r} must match [A-Za-z_][A-Za-z0-9_]*")
        by_name = {c.name: c for c in columns}
        keys = tuple(record_key_fields) or KAFKA_KEY_FIELDS
        parts = tuple(partition_fields)
        for label, names in (("recordKeyFields", keys), ("partitionFields", parts)):
            if len(set(names)) != len(names):
                raise ConfigError(f"sink.hudi.{label} lists a field twice: {list(names)}")
            for n in names:
                field = by_name.get(n)
                if field is None:
                    raise ConfigError(
                        f"sink.hudi.{label}: unknown column {n!r}; columns: {', '.join(by_name)}"
                    )
                if not (isinstance(field.type, Primitive) and field.type.name in _KEY_TYPES):
                    raise ConfigError(
                        f"sink.hudi.{label}: column {n!r} is {field.type}; allowed: "
                        "string, int, long, boolean, date"
                    )
        for n in keys:
            if not by_name[n].required:
                raise ConfigError(
                    f"sink.hudi.recordKeyFields: column {n!r} must be required (a null "
                    "record key is not valid in Hudi); set required: true in decode.schema"
                )
        arrow = pa.schema([_arrow_field(c) for c in columns])
        avro = _avro_record(list(columns), f"{name}_record", f"hoodie.{name}")
        return cls(
            base_path=base_path,
            database=database,
            name=name,
            arrow_schema=arrow,
            avro_schema=json.dumps(avro, separators=(",", ":")),
            record_key_fields=keys,
            partition_fields=parts,
            s3=s3,
            columns=tuple(columns),
        )

    @property
    def file_schema(self) -> pa.Schema:
        """Columns of a base file: the meta columns, then the data columns."""
        return pa.schema([*META_SCHEMA, *self.arrow_schema])

    @property
    def partition_depth(self) -> int:
        return len(self.partition_fields)

    @property
    def key_generator(self) -> str:
        if not self.partition_fields:
            return _KEYGEN + "NonpartitionedKeyGenerator"
        if len(self.record_key_fields) == 1 and len(self.partition_fields) == 1:
            return _KEYGEN + "SimpleKeyGenerator"
        return _KEYGEN + "ComplexKeyGenerator"
