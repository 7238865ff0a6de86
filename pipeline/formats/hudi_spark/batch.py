"""``sink.hudi.writer: spark``: one batch written by Hudi's Spark writer, the write path
of a format with its own engine (``WritePath.FORMAT_ENGINE``, pipeline/spark/batch/paths.py;
built by ``HudiSparkTables.batch_writer``).

    HudiSparkBatchWriter.write(write_id, drop_below)
        decode(rows)                   decode.engine spark: Spark SQL (``from_json``);
                                       arrow (and the registry formats): the Arrow decoder
                                       in ``mapInArrow``; kept for three jobs
        ├─ statistics                  per (topic, partition): offsets seen, written, dropped,
        │                              dead letters, records with unknown fields
        ├─ main rows      → Hudi       begin(T) + write(T): Hudi's data files, T inflight
        └─ dead letters   → Hudi       the same on the dead-letter table (when there are any)
                                       → StagedBatch of journal descriptors

After the decode everything runs in the JVM. Rows at offsets the main table already holds
(``drop_below``) are dropped before either write and counted (invariant 5). A table that
gets no rows gets no instant: its commit, if any, is the committer's empty one. The
batch's rows come from Spark's Kafka source (the reader of the PySpark 3.5 line this
writer runs on): its DataFrame is what this writer reads, with either engine. It writes
only the ranges Spark planned: a gap rewind or a repair, which read other ranges, has no
adapter here (``reread_path``), and the coordinator refuses them in one line.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.commit.offsets import PartitionOffsets
from pipeline.commit.types import PartitionStats, StagedBatch
from pipeline.config import DecodeConfig
from pipeline.decode.spark import ERROR_COL, decode
from pipeline.decode.unknown_fields import MAX_NAMES, UNKNOWN_COL
from pipeline.formats.hudi.layout import parse_write_id
from pipeline.formats.hudi_spark.client import HudiSparkClient
from pipeline.formats.hudi_spark.committer import descriptors
from pipeline.spark.routes import Router
from pipeline.spark.writer import DEAD_LETTER_SOURCES, rows_decoder

__all__ = ["HudiSparkBatchWriter"]

_ROUTE_COL = "_route"


def _with_route(rows: Any, router: Router) -> Any:
    """``rows`` with each row's table index (the workers' router, in ``mapInArrow``)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    schema = to_arrow_schema(rows.schema).append(pa.field(_ROUTE_COL, pa.int32()))

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            yield b.append_column(_ROUTE_COL, router.table_indices(b))

    return rows.mapInArrow(task, from_arrow_schema(schema))


_KEYS = ("_kafka_topic", "_kafka_partition")


@dataclass(frozen=True)
class HudiSparkBatchWriter:
    """One batch's rows into the main and dead-letter tables (see the module docstring)."""

    df: Any  # the batch's raw Kafka rows (Spark's Kafka source)
    decode: DecodeConfig
    include_headers: bool
    data_ddl: str
    main: HudiSparkClient
    main_columns: Sequence[str]
    dead_letter: HudiSparkClient | None
    dead_letter_columns: Sequence[str]
    operation: str = "insert"
    # a routed set: (set name, client) per main table, the router's indices into it
    routed: tuple[tuple[str, HudiSparkClient], ...] = ()
    router: Router | None = None

    def write(self, write_id: str, drop_below: PartitionOffsets) -> StagedBatch:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        instant, _tag = parse_write_id(write_id)
        decoded = self._decoded()
        dropped = functools.reduce(
            operator.or_,
            (
                (F.col("_kafka_topic") == tp[0])
                & (F.col("_kafka_partition") == tp[1])
                & (F.col("_kafka_offset") < floor)
                for tp, floor in drop_below.items()
            ),
            F.lit(False),
        )
        rows = decoded.withColumn("_dropped", dropped).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            staged = self._statistics(rows)
            kept = rows.filter(~F.col("_dropped"))
            main_rows = staged.records - staged.dead_letter_records
            if main_rows and self.router is not None:
                good = kept.filter(F.col(ERROR_COL).isNull())
                staged.routed_files = self._write_routed(good, instant)
            elif main_rows:
                good = kept.filter(F.col(ERROR_COL).isNull()).select(*self.main_columns)
                staged.data_files = self._write(self.main, good, instant)
            if staged.dead_letter_records:
                if self.dead_letter is None:
                    raise RuntimeError("undecodable records but no dead-letter table configured")
                bad = kept.filter(F.col(ERROR_COL).isNotNull()).select(
                    *(
                        F.col(DEAD_LETTER_SOURCES.get(c, c)).alias(c)
                        for c in self.dead_letter_columns
                    )
                )
                staged.dead_letter_files = self._write(self.dead_letter, bad, instant)
            if staged.unknown_field_records:
                names = kept.select(F.explode(UNKNOWN_COL).alias("n")).distinct().limit(MAX_NAMES)
                staged.unknown_fields = sorted(r["n"] for r in names.collect())
            return staged
        finally:
            rows.unpersist()

    def _decoded(self) -> Any:
        """The batch decoded: data columns, Kafka coordinates, error, raw columns."""
        if self.decode.engine == "spark":
            return decode(self.df, self.decode, self.data_ddl, self.include_headers)
        import pyarrow as pa
        from pyspark.sql.pandas.types import from_arrow_schema

        from pipeline.decode.arrow import ArrowDecoder
        from pipeline.source.reader import record_schema

        decoder = ArrowDecoder(self.decode, self.include_headers)
        raw = record_schema(self.include_headers)
        out = decoder.decode(pa.RecordBatch.from_pylist([], schema=raw)).schema
        decode_rows = rows_decoder(decoder)

        def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            return (decode_rows(b) for b in batches if b.num_rows)

        return self.df.mapInArrow(task, from_arrow_schema(out))

    def _write_routed(self, good: Any, instant: str) -> list[tuple[str, bytes]]:
        """Each table's rows through its own client; a table the batch routed nothing
        to gets no instant here (its commit is the committer's empty one)."""
        from pyspark.sql import functions as F

        assert self.router is not None
        routed = _with_route(good, self.router)
        present = sorted(r[0] for r in routed.select(_ROUTE_COL).distinct().collect())
        out: list[tuple[str, bytes]] = []
        for index in present:
            name, client = self.routed[index]
            rows = routed.filter(F.col(_ROUTE_COL) == index).select(*self.main_columns)
            out += [(name, d) for d in self._write(client, rows, instant)]
        return out

    def _write(self, client: HudiSparkClient, df: Any, instant: str) -> list[bytes]:
        client.begin(instant)
        return descriptors(instant, client.write(df, instant, self.operation))

    def _statistics(self, rows: Any) -> StagedBatch:
        """One job: per partition, offsets seen (dropped ones too), rows written, rows
        dropped, dead letters and rows carrying unknown fields."""
        from pyspark.sql import functions as F

        kept, off = ~F.col("_dropped"), F.col("_kafka_offset")

        def count(cond: Any) -> Any:
            return F.sum(F.when(cond, 1).otherwise(0))

        per_partition = rows.groupBy(*_KEYS).agg(
            F.min(off).alias("lo"),
            F.max(off).alias("hi"),
            count(kept).alias("written"),
            count(~kept).alias("dropped"),
            count(kept & F.col(ERROR_COL).isNotNull()).alias("dead"),
            count(kept & F.col(UNKNOWN_COL).isNotNull() & (F.size(UNKNOWN_COL) > 0)).alias(
                "unknown"
            ),
        )
        staged = StagedBatch()
        for r in sorted(per_partition.collect(), key=lambda r: (r[_KEYS[0]], r[_KEYS[1]])):
            staged.stats.append(
                PartitionStats(
                    r[_KEYS[0]], r[_KEYS[1]], r["lo"], r["hi"], r["written"], r["dropped"]
                )
            )
            staged.dead_letter_records += r["dead"]
            staged.unknown_field_records += r["unknown"]
        return staged
