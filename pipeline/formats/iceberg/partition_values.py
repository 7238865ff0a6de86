"""Partition values of Arrow rows under an Iceberg partition spec, for the workers' writer
(:mod:`pipeline.formats.iceberg.writer`).

pyiceberg 0.12 computes year/month/day/hour/bucket/truncate over Arrow only with the
optional ``pyiceberg-core`` package. The time transforms are done here in plain pyarrow
(checked against pyiceberg's reference functions in the tests); bucket and truncate use
``pyiceberg-core`` when installed, else pyiceberg's Python transform applied once per
distinct value.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    YearTransform,
)
from pyiceberg.types import DateType, IcebergType, PrimitiveType

from pipeline.errors import PipelineError

__all__ = ["DataFileWriteError", "split_by_partition", "transform_array"]

_HAS_PYICEBERG_CORE = importlib.util.find_spec("pyiceberg_core") is not None


class DataFileWriteError(PipelineError):
    """Incoming rows cannot be written to the table (schema mismatch, nulls in required)."""

    code = "write"


_MICROS_PER_HOUR = 3_600_000_000
_MICROS_PER_DAY = 86_400_000_000


def _floor_div(values: pa.Array, divisor: int) -> pa.Array:
    quotient = pc.divide(values, divisor)  # integer division truncates toward zero
    inexact_negative = pc.and_(
        pc.less(values, 0), pc.not_equal(pc.multiply(quotient, divisor), values)
    )
    return pc.if_else(inexact_negative, pc.subtract(quotient, 1), quotient)


def _time_transform(transform: Transform[Any, Any], source: IcebergType, arr: pa.Array) -> pa.Array:
    """year/month/day/hour in pure pyarrow (pyiceberg's versions need pyiceberg-core)."""
    if isinstance(source, DateType):
        naive = arr
        days = arr.cast(pa.int32()).cast(pa.int64())
        if isinstance(transform, HourTransform):
            raise DataFileWriteError("hour() cannot be applied to a date column")
        micros = pc.multiply(days, _MICROS_PER_DAY)
    else:
        naive = arr.cast(pa.timestamp("us"))  # same instants, UTC wall clock
        micros = naive.cast(pa.int64())
        days = _floor_div(micros, _MICROS_PER_DAY)
    if isinstance(transform, DayTransform):
        out = days
    elif isinstance(transform, HourTransform):
        out = _floor_div(micros, _MICROS_PER_HOUR)
    elif isinstance(transform, YearTransform):
        out = pc.subtract(pc.year(naive), 1970)
    else:  # MonthTransform
        years = pc.subtract(pc.year(naive), 1970)
        out = pc.add(pc.multiply(years, 12), pc.subtract(pc.month(naive), 1))
    return out.cast(pa.int32())


def transform_array(transform: Transform[Any, Any], source: IcebergType, arr: pa.Array) -> pa.Array:
    if isinstance(transform, IdentityTransform):
        return arr
    if isinstance(transform, (YearTransform, MonthTransform, DayTransform, HourTransform)):
        return _time_transform(transform, source, arr)
    if _HAS_PYICEBERG_CORE:
        return transform.pyarrow_transform(source)(arr)
    # bucket / truncate without pyiceberg-core: apply pyiceberg's Python transform to each
    # distinct value (dictionary-encoded), then expand back to rows.
    func = transform.transform(source)
    encoded = arr.dictionary_encode()
    result_type = schema_to_pyarrow(transform.result_type(source), include_field_ids=False)
    mapped = pa.array([func(v) for v in encoded.dictionary.to_pylist()], type=result_type)
    return mapped.take(encoded.indices)


def split_by_partition(
    batch: pa.RecordBatch, spec: PartitionSpec, schema: Schema
) -> list[tuple[tuple[Any, ...], pa.RecordBatch]]:
    """``[(partition values, rows)]`` for the rows of ``batch`` (table column names)."""
    columns: dict[str, pa.Array] = {}
    for i, field in enumerate(spec.fields):
        source = schema.find_field(field.source_id)
        name = schema.find_column_name(field.source_id)
        if name is None or not isinstance(source.field_type, PrimitiveType):
            raise DataFileWriteError(f"partition field {field.name}: bad source column")
        values = _column_by_path(batch, name)
        columns[f"p{i}"] = transform_array(field.transform, source.field_type, values)
    keys = list(columns)
    if all(_single_value(columns[k]) for k in keys):
        return [(tuple(columns[k][0].as_py() for k in keys), batch)]
    columns["row"] = pa.array(range(batch.num_rows), type=pa.int64())
    grouped = pa.table(columns).group_by(keys, use_threads=False).aggregate([("row", "list")])
    out: list[tuple[tuple[Any, ...], pa.RecordBatch]] = []
    key_values = [grouped.column(k).to_pylist() for k in keys]
    rows = grouped.column("row_list")
    for g in range(grouped.num_rows):
        indices = rows[g].values
        out.append((tuple(kv[g] for kv in key_values), batch.take(indices)))
    return out


def _single_value(values: pa.Array) -> bool:
    """True when ``values`` holds one non-null value in every row (the common case)."""
    return values.null_count == 0 and bool(pc.all(pc.equal(values, values[0])).as_py())


def _column_by_path(batch: pa.RecordBatch, path: str) -> pa.Array:
    if path in batch.schema.names:
        return batch.column(path)
    head, *rest = path.split(".")
    return pc.struct_field(batch.column(head), rest)
