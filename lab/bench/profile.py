"""``ingest bench --profile``: pyinstrument over the worker hot path, in one process.

What a Spark task does for a batch, minus Spark: ``pipeline.source.reader.read_ranges``
(Kafka → Arrow) over every partition of the bench topic, the JSON values decoded into the
table's columns (Arrow's JSON reader stands in for Spark's ``from_json``, which runs in
the JVM and is not visible to a Python profiler), and ``pipeline.spark.writer.run_task``
with the Iceberg tables' task plan (staging real Parquet files). The HTML and text reports
go to ``<out>/profile.html`` / ``profile.txt`` for whoever works on the hot path.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline.decode.spark import ERROR_COL


def _decoded(batches: Iterator[pa.RecordBatch], data_schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    from lab.bench.raw import _decode

    headers = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    for b in batches:
        table = _decode(b.column("value").to_pylist(), data_schema)
        n = b.num_rows
        cols = [*table.columns]
        names = [*table.column_names]
        for src, dst in (
            ("topic", "_kafka_topic"),
            ("partition", "_kafka_partition"),
            ("offset", "_kafka_offset"),
            ("timestamp", "_kafka_timestamp"),
        ):
            cols.append(b.column(src))
            names.append(dst)
        for name, typ in (
            (ERROR_COL, pa.string()),
            ("_raw_key", pa.binary()),
            ("_raw_value", pa.binary()),
            ("_raw_headers", headers),
        ):
            cols.append(pa.nulls(n, typ))
            names.append(name)
        merged = pa.Table.from_arrays(
            [c if isinstance(c, pa.ChunkedArray) else pa.chunked_array([c]) for c in cols],
            names=names,
        )
        yield from merged.combine_chunks().to_batches()


def profile_hot_path(ctx: Any, out: Path) -> dict[str, Any]:
    from pyinstrument import Profiler

    from lab.bench.raw import _table_schemas
    from lab.bench.runs import RunSpec, pipeline_config
    from pipeline.app import Pipeline
    from pipeline.commit.offsets import OffsetRange
    from pipeline.config import parse_config
    from pipeline.kafka.client import consumer_config
    from pipeline.source.reader import read_ranges
    from pipeline.spark.writer import collect_staged, run_task

    ds = ctx.dataset
    workdir = ctx.work / "profile"
    cfg = pipeline_config(RunSpec(), "profile", workdir, ctx.broker.bootstrap_servers, ds.topic)
    cfg["metrics"] = {"enabled": False}
    pipe = Pipeline(parse_config(cfg))
    data_schema, _ = _table_schemas()
    marks = ctx.broker.watermarks(ds.topic, ds.partitions)
    ranges = [OffsetRange(ds.topic, p, lo, hi) for p, (lo, hi) in marks.items()]
    plan = pipe.tables.task_plan(f"profile-{uuid.uuid4().hex[:8]}")
    profiler = Profiler(interval=0.001)
    t0 = time.perf_counter()
    profiler.start()
    batches = read_ranges(consumer_config(ctx.broker.bootstrap_servers), ranges)
    rows = run_task(plan, _decoded(batches, data_schema), 0)
    staged = collect_staged(rows)
    profiler.stop()
    seconds = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    (out / "profile.html").write_text(profiler.output_html())
    (out / "profile.txt").write_text(profiler.output_text(unicode=True, color=False))
    return {
        "what": "read_ranges -> Arrow JSON decode -> run_task (Iceberg staging), one process",
        "records": staged.records,
        "seconds": round(seconds, 3),
        "records_per_s": round(staged.records / seconds, 1) if seconds > 0 else None,
        "html": str(out / "profile.html"),
        "text": str(out / "profile.txt"),
    }
