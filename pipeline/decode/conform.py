"""Make a worker's Arrow batch match a table's file schema exactly (both table formats)."""

from __future__ import annotations

import pyarrow as pa

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
            try:
                column = column.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise error(
                    f"column {field.name!r}: cannot convert {column.type} to {field.type}: {e}"
                ) from e
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, schema=target)
