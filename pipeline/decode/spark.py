"""Decode Kafka records into table rows with Spark's native JSON parser.

Every output row keeps its Kafka coordinates (``_kafka_topic``, ``_kafka_partition``,
``_kafka_offset``, ``_kafka_timestamp``). A record that cannot be decoded (not JSON, a
value of the wrong type, a missing required field, over-size, null value) is never
dropped: it gets a non-null ``_error`` and keeps its raw key/value/headers so the sink can
route it to the dead-letter table. For decoded rows the raw bytes are nulled, so they
do not travel to the writers twice.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline import columns as cols
from pipeline.config import DecodeConfig
from pipeline.decode.json_values import MALFORMED, required_message
from pipeline.decode.unknown_fields import UNKNOWN_COL

ERROR_COL = "_error"
CORRUPT_COL = "_corrupt_record"
KAFKA_COLS = ["_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp"]


def decoded_columns(cfg: DecodeConfig) -> tuple[cols.Column, ...]:
    """The decoded (non-Kafka) columns of ``decode.schema``; ConfigError if it is invalid."""
    return cols.data_columns(cols.table_columns(cfg.field_specs()))


def _coordinates() -> list[Column]:
    return [
        F.col("topic").alias("_kafka_topic"),
        F.col("partition").alias("_kafka_partition"),
        F.col("offset").alias("_kafka_offset"),
        F.col("timestamp").alias("_kafka_timestamp"),
    ]


def decode(df: DataFrame, cfg: DecodeConfig, data_ddl: str, include_headers: bool) -> DataFrame:
    """Rows of ``data_ddl`` columns + Kafka columns + ``_error`` + raw columns for errors."""
    headers = (
        F.col("headers")
        if include_headers
        else F.lit(None).cast("array<struct<key: string, value: binary>>")
    )
    too_big = F.length(F.col("value")) > F.lit(cfg.max_record_bytes)
    if cfg.raw:
        too_large = F.when(too_big, F.lit(f"record larger than {cfg.max_record_bytes} bytes"))
        # the raw table always has a headers column (null without includeHeaders)
        return df.select(
            F.col("key"),
            F.col("value"),
            headers.alias("headers"),
            *_coordinates(),
            too_large.alias(ERROR_COL),
            F.when(too_large.isNotNull(), F.col("key")).alias("_raw_key"),
            F.when(too_large.isNotNull(), F.col("value")).alias("_raw_value"),
            F.when(too_large.isNotNull(), headers).alias("_raw_headers"),
            F.lit(None).cast("array<string>").alias(UNKNOWN_COL),
        )

    schema = f"{data_ddl}, {CORRUPT_COL} STRING"
    parsed = F.from_json(
        F.col("value").cast("string"),
        schema,
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COL},
    )
    staged = df.select("*", parsed.alias("_p"))
    columns = decoded_columns(cfg)
    error: Column = (
        F.when(F.col("value").isNull(), F.lit("null value"))
        .when(too_big, F.lit(f"record larger than {cfg.max_record_bytes} bytes"))
        .when(
            F.col(f"_p.{CORRUPT_COL}").isNotNull() | F.col("_p").isNull(),
            F.lit(MALFORMED),
        )
    )
    # the first missing required value in schema order, as json_values.RecordParser says
    for pattern, missing in _missing_checks(columns):
        error = error.when(missing, F.lit(required_message(pattern)))
    unknown = _unknown_fields(columns, too_big)
    if cfg.unknown_fields == "dead-letter":
        error = error.when(
            unknown.isNotNull(), F.concat(F.lit("unknown field(s): "), F.array_join(unknown, ", "))
        )
    data_cols = [F.col(f"_p.`{c.name}`").alias(c.name) for c in columns]
    return staged.select(
        *data_cols,
        *_coordinates(),
        error.alias(ERROR_COL),
        F.when(error.isNotNull(), F.col("key")).alias("_raw_key"),
        F.when(error.isNotNull(), F.col("value")).alias("_raw_value"),
        F.when(error.isNotNull(), headers).alias("_raw_headers"),
        unknown.alias(UNKNOWN_COL),
    )


def _unknown_fields(columns: tuple[cols.Column, ...], too_big: Column) -> Column:
    """The record's top-level keys with a non-null value that name no column, sorted
    (null: none), as :mod:`pipeline.decode.unknown_fields` defines them."""
    as_map = F.from_json(F.col("value").cast("string"), "map<string, string>")
    present = F.map_keys(F.map_filter(as_map, lambda _k, v: v.isNotNull()))
    extra = F.array_sort(F.array_except(present, F.array(*[F.lit(c.name) for c in columns])))
    return F.when(~too_big & (F.size(extra) > 0), extra)


Check = Callable[[Column], Column]


def _present_but_missing(name: str) -> Check:
    return lambda v: v.isNotNull() & v.getField(name).isNull()


def _inside(name: str, check: Check) -> Check:
    return lambda v: check(v.getField(name))


def _any_item(is_list: bool, check: Check) -> Check:
    """``check`` holds for some element of a list (or some value of a map)."""
    return lambda v: F.exists(v if is_list else F.map_values(v), check)


def _is_null(v: Column) -> Column:
    return v.isNull()


def _checks(t: cols.ColumnType, path: str) -> list[tuple[str, Check]]:
    """(pattern, "a required value is missing" as a function of a value of type ``t``)
    for every required place below ``t``, in ``required_paths`` order. A nested required
    value counts as missing only where its parent is present (a null parent is false)."""
    out: list[tuple[str, Check]] = []
    if isinstance(t, cols.StructOf):
        for c in t.fields:
            at = f"{path}.{c.name}"
            if c.required:
                out.append((at, _present_but_missing(c.name)))
            out += [(p, _inside(c.name, check)) for p, check in _checks(c.type, at)]
    elif isinstance(t, cols.ListOf | cols.MapOf):
        is_list = isinstance(t, cols.ListOf)
        inner = t.element if isinstance(t, cols.ListOf) else t.value
        needed = t.element_required if isinstance(t, cols.ListOf) else t.value_required
        at = f"{path}[]" if is_list else f"{path}{{}}"
        if needed:
            out.append((at, _any_item(is_list, _is_null)))
        out += [(p, _any_item(is_list, check)) for p, check in _checks(inner, at)]
    return out


def _missing_checks(columns: tuple[cols.Column, ...]) -> list[tuple[str, Column]]:
    """(pattern, condition on the parsed row) per place a value is required."""
    out: list[tuple[str, Column]] = []
    for c in columns:
        value = F.col(f"_p.`{c.name}`")
        if c.required:
            out.append((c.name, value.isNull()))
        out += [(pattern, check(value)) for pattern, check in _checks(c.type, c.name)]
    return out
