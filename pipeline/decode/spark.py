"""Decode Kafka records into table rows with Spark's native JSON parser.

Every output row keeps its Kafka coordinates (``_kafka_topic``, ``_kafka_partition``,
``_kafka_offset``, ``_kafka_timestamp``). A record that cannot be decoded (not JSON, a
value of the wrong type, a missing required field, over-size, null value) is never
dropped: it gets a non-null ``_error`` and keeps its raw key/value/headers so the sink can
route it to the dead-letter table. For decoded rows the raw bytes are nulled, so they
do not travel to the writers twice.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline.config import DecodeConfig

ERROR_COL = "_error"
CORRUPT_COL = "_corrupt_record"
KAFKA_COLS = ["_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp"]


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
        )

    schema = f"{data_ddl}, {CORRUPT_COL} STRING"
    parsed = F.from_json(
        F.col("value").cast("string"),
        schema,
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COL},
    )
    staged = df.select("*", parsed.alias("_p"))
    required = [f.name for f in cfg.schema_ if f.required]
    error: Column = (
        F.when(F.col("value").isNull(), F.lit("null value"))
        .when(too_big, F.lit(f"record larger than {cfg.max_record_bytes} bytes"))
        .when(
            F.col(f"_p.{CORRUPT_COL}").isNotNull() | F.col("_p").isNull(),
            F.lit("malformed JSON or a value of the wrong type"),
        )
    )
    for name in required:
        error = error.when(
            F.col(f"_p.`{name}`").isNull(), F.lit(f"required field {name!r} is missing or null")
        )
    data_cols = [F.col(f"_p.`{f.name}`").alias(f.name) for f in cfg.schema_]
    return staged.select(
        *data_cols,
        *_coordinates(),
        error.alias(ERROR_COL),
        F.when(error.isNotNull(), F.col("key")).alias("_raw_key"),
        F.when(error.isNotNull(), F.col("value")).alias("_raw_value"),
        F.when(error.isNotNull(), headers).alias("_raw_headers"),
    )
