"""Rows of a peer's table as :data:`~lab.peers.model.COORDS`, whatever the
system's own column types: the Kafka timestamp as epoch milliseconds, the commit time
per row (one value for a whole file or instant, or null where unknown)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from lab.peers.model import COORDS

Columns = tuple[str, str, str, str]  # a table's topic, partition, offset, Kafka timestamp
#: the names Spark's Kafka source gives them (the Spark sinks' tables)
SPARK_KAFKA: Columns = ("topic", "partition", "offset", "timestamp")
#: this pipeline's coordinate columns
PIPELINE: Columns = ("_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp")


def epoch_ms(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """A timestamp column (any unit, any zone) or an integer one (already ms) as int64 ms."""
    if pa.types.is_timestamp(column.type):
        zone = column.type.tz
        column = pc.cast(column, pa.timestamp("ms", zone), safe=False)  # truncates sub-ms
    return pc.cast(column, pa.int64())


def to_coords(
    table: pa.Table,
    columns: Columns = SPARK_KAFKA,
    *,
    commit_ms: pa.Array | pa.ChunkedArray | int | None = None,
) -> pa.Table:
    """``table``'s coordinate ``columns``, renamed and cast to :data:`COORDS`;
    ``commit_ms``: one value for every row, a column, or None (null: the format cannot
    tell)."""
    n = table.num_rows
    if commit_ms is None or isinstance(commit_ms, int):
        commit = pa.array([commit_ms] * n, pa.int64())
    else:
        commit = pc.cast(commit_ms, pa.int64())
    topic, partition, offset, kafka_ts = columns
    return pa.Table.from_arrays(
        [
            pc.cast(table.column(topic), pa.string()),
            pc.cast(table.column(partition), pa.int32()),
            pc.cast(table.column(offset), pa.int64()),
            epoch_ms(table.column(kafka_ts)),
            commit,
        ],
        schema=COORDS,
    )


def empty() -> pa.Table:
    return COORDS.empty_table()
