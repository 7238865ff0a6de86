"""Make a worker's Arrow batch match a table's file schema exactly (both table formats)."""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.errors import PipelineError


def conform_batch(
    batch: pa.RecordBatch,
    target: pa.Schema,
    error: type[PipelineError],
    schema_name: str = "the table schema",
    hint: str = "",
) -> pa.RecordBatch:
    """Select/cast ``batch``'s columns (by name) to exactly ``target``; missing optional
    columns become nulls. Extra columns, missing or null required ones, and impossible
    casts raise ``error`` naming the column."""
    names = set(batch.schema.names)
    extra = names - set(target.names)
    if extra:
        raise error(
            f"columns {sorted(extra)} are not in {schema_name} ({', '.join(target.names)}){hint}"
        )
    arrays: list[pa.Array] = []
    for field in target:
        if field.name not in names:
            if not field.nullable:
                raise error(f"required column {field.name!r} is missing from the rows")
            arrays.append(pa.nulls(batch.num_rows, type=field.type))
            continue
        column = batch.column(field.name)
        if not field.nullable and column.null_count:
            raise error(f"required column {field.name!r} has {column.null_count} null value(s)")
        if not column.type.equals(field.type):
            column = fill_unread(column, field.type)
            try:
                column = column.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise error(
                    f"column {field.name!r}: cannot convert {column.type} to {field.type}: {e}"
                ) from e
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def fill_unread(column: pa.Array, target: pa.DataType) -> pa.Array:
    """``column`` with placeholders where a required field of ``target``'s structs is null
    only because its struct (or the list element holding it) is null. The decoders leave
    those children null; Parquet refuses a null in a required column even where no reader
    looks, and so does Arrow's cast. A null under a present struct stays (and is refused)."""
    if pa.types.is_struct(column.type) and pa.types.is_struct(target):
        parent_null = pc.is_null(column)
        children, fields, changed = [], [], False
        for i, field in enumerate(column.type):
            child = column.field(i)
            at = target.get_field_index(field.name)
            if at >= 0:
                want = target.field(at)
                filled = fill_unread(child, want.type)
                if not want.nullable and filled.null_count:
                    unread = pc.and_(parent_null, pc.is_null(filled))
                    filled = pc.if_else(unread, _placeholder(filled.type), filled)
                changed = changed or filled is not child
                child = filled
            children.append(child)
            fields.append(field.with_type(child.type))
        if not changed:
            return column
        return pa.StructArray.from_arrays(children, fields=fields, mask=parent_null)
    if _is_list(column.type) and _is_list(target):
        values = column.values
        filled = fill_unread(values, target.value_type)
        if filled is values:
            return column
        return type(column).from_arrays(column.offsets, filled, mask=pc.is_null(column))
    return column


def _is_list(typ: pa.DataType) -> bool:
    return bool(pa.types.is_list(typ) or pa.types.is_large_list(typ))


def _placeholder(typ: pa.DataType) -> pa.Scalar:
    """Any valid value of ``typ`` (never read: it sits under a null)."""
    if pa.types.is_struct(typ):
        return pa.scalar({f.name: _placeholder(f.type).as_py() for f in typ}, typ)
    if _is_list(typ) or pa.types.is_map(typ):
        return pa.scalar([], typ)
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return pa.scalar("", typ)
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return pa.scalar(b"", typ)
    if pa.types.is_fixed_size_binary(typ):
        return pa.scalar(bytes(typ.byte_width), typ)
    if pa.types.is_boolean(typ):
        return pa.scalar(False, typ)
    if pa.types.is_decimal(typ):
        return pa.scalar(Decimal(0), typ)
    if pa.types.is_date(typ):
        return pa.scalar(0, pa.int32()).cast(pa.date32()).cast(typ)
    return pa.scalar(0, pa.int64()).cast(typ)  # numbers, times, timestamps
