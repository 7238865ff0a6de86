"""The raw ceiling: one process, one consumer, the same records into zstd Parquet.

What the pipeline does minus Spark, the protocol and the table format: a single
confluent-kafka consumer with explicit ``assign()`` of every partition (the pipeline's
own consumer settings, ``pipeline.kafka.client.consumer_config``: ``fetch.queue.backoff.ms
= 10`` …), ``consume(10000, …)`` into Python lists, Arrow arrays, the JSON values decoded
by Arrow's JSON reader into the table's typed columns, the four Kafka coordinate columns,
and one zstd Parquet file with the table's Arrow schema (field ids included).

It runs as its own OS process (``python -m lab.bench.raw …``) so its CPU time is
its own, apart from the bench process and the broker's; it prints one JSON
line: records, value+key bytes, wall seconds from the first record to the closed file,
CPU seconds (``getrusage``), peak RSS and the Parquet size.

Invariant: it stops at exactly the end offsets read before it started and counts every
record once (``records`` must equal what was produced; the test checks it).
"""

from __future__ import annotations

import argparse
import io
import json
import resource
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq

POLL_BATCH = 10_000
FLUSH_ROWS = 100_000


def _table_schemas(payload: bool = False) -> tuple[pa.Schema, pa.Schema]:
    """(Arrow schema of the decoded JSON fields, Arrow schema of the written file)."""
    from lab.events import event_schema_fields
    from pipeline.formats.iceberg.schema import FieldSpec, arrow_schema, build_schema

    schema = build_schema([FieldSpec(**f) for f in event_schema_fields(payload=payload)])
    file_schema = arrow_schema(schema)
    data = pa.schema(
        [
            pa.field(f.name, pa.string() if pa.types.is_large_string(f.type) else f.type)
            for f in file_schema
            if not f.name.startswith("_kafka_")
        ]
    )
    return data, file_schema


def _decode(values: list[bytes], data_schema: pa.Schema) -> pa.Table:
    opts = pj.ParseOptions(explicit_schema=data_schema, unexpected_field_behavior="ignore")
    return pj.read_json(
        io.BytesIO(b"\n".join(values)),
        parse_options=opts,
        read_options=pj.ReadOptions(block_size=1 << 24),
    )


def consume_to_parquet(
    bootstrap: str, topic: str, partitions: int, out: Path, payload: bool = False
) -> dict[str, Any]:
    from confluent_kafka import Consumer, KafkaException
    from confluent_kafka import TopicPartition as KTopicPartition

    from pipeline.kafka.client import consumer_config

    data_schema, file_schema = _table_schemas(payload)
    consumer = Consumer(consumer_config(bootstrap, client_id="bench-raw"))
    ends = {
        p: consumer.get_watermark_offsets(KTopicPartition(topic, p), timeout=30)[1]
        for p in range(partitions)
    }
    todo = {p for p, e in ends.items() if e > 0}
    consumer.assign([KTopicPartition(topic, p, 0) for p in sorted(todo)])
    writer = pq.ParquetWriter(str(out), file_schema, compression="zstd")
    values: list[bytes] = []
    parts: list[int] = []
    offsets: list[int] = []
    stamps: list[int] = []
    records = nbytes = 0
    first: float | None = None

    def flush() -> None:
        if not offsets:
            return
        decoded = _decode(values, data_schema)
        n = len(offsets)
        columns = [*decoded.columns]
        columns += [
            pa.array([topic] * n, pa.large_string()),
            pa.array(parts, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array(stamps, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        ]
        table = pa.Table.from_arrays(
            [c.cast(f.type) for c, f in zip(columns, file_schema, strict=True)],
            schema=file_schema,
        )
        writer.write_table(table)
        values.clear()
        parts.clear()
        offsets.clear()
        stamps.clear()

    before = resource.getrusage(resource.RUSAGE_SELF)
    deadline = time.monotonic() + 600
    while todo:
        if time.monotonic() > deadline:
            raise RuntimeError(f"raw ceiling: partitions {sorted(todo)} did not reach their end")
        for msg in consumer.consume(POLL_BATCH, timeout=0.5):
            err = msg.error()
            if err is not None:
                raise KafkaException(err)
            if first is None:
                first = time.monotonic()
            p, off = msg.partition(), msg.offset()
            assert p is not None and off is not None
            if off >= ends[p]:
                continue
            value = msg.value() or b""
            key = msg.key() or b""
            values.append(value)
            parts.append(p)
            offsets.append(off)
            stamps.append(msg.timestamp()[1] * 1000)
            records += 1
            nbytes += len(value) + len(key)
            if off >= ends[p] - 1:
                todo.discard(p)
                consumer.pause([KTopicPartition(topic, p)])
        if len(offsets) >= FLUSH_ROWS:
            flush()
    flush()
    writer.close()
    done = time.monotonic()
    consumer.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "records": records,
        "bytes": nbytes,
        "seconds": done - (first or done),
        "cpu_seconds": (usage.ru_utime + usage.ru_stime) - (before.ru_utime + before.ru_stime),
        "peak_rss_bytes": usage.ru_maxrss * 1024,
        "parquet_bytes": out.stat().st_size,
    }


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--payload", action="store_true", help="events carry the payload field")
    args = ap.parse_args(argv)
    result = consume_to_parquet(
        args.bootstrap, args.topic, args.partitions, args.out, payload=args.payload
    )
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
