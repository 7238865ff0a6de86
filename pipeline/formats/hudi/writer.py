"""Worker side: stage Hudi base files for one instant (runs in Spark's Python workers).

:func:`write_base_files` has the ``FileWriter`` shape of :class:`pipeline.spark.writer.TaskPlan`
(``(context, batches, seed) -> descriptors``). For every call it

* conforms the rows to the table's Arrow schema (Spark hands timestamps in the session
  zone and may hand narrower ints: written as µs UTC, int32/int64),
* computes each row's record key and hive-style partition path,
* writes one Parquet file per partition touched (more when a partition exceeds the target
  size), each a NEW file group: ``<uuid>-0_<writeToken>_<instant>.parquet`` with the five
  meta columns first, a Hudi marker written before the file (when ``.hoodie`` exists), the
  partition's ``.hoodie_partition_metadata`` created first when missing, and the file
  fsynced before it is reported,
* returns one JSON descriptor per file (relative path, file id, partition, records, size).

The write token is ``<taskPartitionId>-<stageId>-<seed>[-<pipeline tag>]``; the seed is
unique per task attempt and flush, so a retried task never reuses a name. Files are
invisible to readers until the driver writes ``<instant>.commit``; the driver deletes any
file of the instant it does not commit (retry debris) before that.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.decode.conform import conform_batch
from pipeline.errors import PipelineError
from pipeline.formats.hudi.layout import (
    MARKERS_DIR,
    META_DIR,
    PARTITION_METADATA,
    TablePaths,
    base_file_name,
    partition_metadata,
)
from pipeline.formats.hudi.schema import HudiTableSpec, partition_path, record_keys
from pipeline.formats.hudi.storage import table_files

__all__ = ["BaseFileWriteError", "HudiWriteContext", "describe", "write_base_files"]

_MAGIC = "ingest-hudi-file:1"
_ROW_GROUP_ROWS = 128 * 1024


class BaseFileWriteError(PipelineError):
    """Rows cannot be written to the Hudi table (schema mismatch, null key)."""

    code = "write"


@dataclass(frozen=True)
class HudiWriteContext:
    """Everything a worker needs to stage base files of one instant (picklable)."""

    spec: HudiTableSpec
    instant: str
    tag: str = ""  # the pipeline tag of the coordinator's write id
    target_file_size_bytes: int = 128 * 1024 * 1024
    markers: bool = True  # write Hudi markers (only where .hoodie already exists)


def describe(descriptor: bytes) -> dict[str, Any]:
    doc = json.loads(descriptor)
    if not isinstance(doc, dict) or doc.get("format") != _MAGIC:
        raise ValueError("not a Hudi base-file descriptor")
    return doc


def _task_ids(seed: int) -> tuple[int, int]:
    """(task partition id, stage id) of the running Spark task; (seed, 0) outside Spark."""
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
    except ImportError:  # pragma: no cover - pyspark is a dependency
        ctx = None
    if ctx is None:
        return seed // 1000, 0
    return int(ctx.partitionId()), int(ctx.stageId())


def _conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    return conform_batch(batch, target, BaseFileWriteError, "the Hudi table schema")


def _split(table: pa.Table, fields: tuple[str, ...]) -> list[tuple[str, pa.Table]]:
    """``[(partition path, rows)]``; one group when the table is unpartitioned."""
    if not fields:
        return [("", table)]
    cols = {f"p{i}": table.column(name) for i, name in enumerate(fields)}
    keys = list(cols)
    cols["__row"] = pa.array(np.arange(table.num_rows, dtype=np.int64))
    grouped = pa.table(cols).group_by(keys, use_threads=False).aggregate([("__row", "list")])
    values = [grouped.column(k).to_pylist() for k in keys]
    rows = grouped.column("__row_list")
    out = []
    for g in range(grouped.num_rows):
        path = partition_path(fields, [v[g] for v in values])
        out.append((path, table.take(rows[g].values)))
    return out


def _chunks(table: pa.Table, target_bytes: int) -> list[pa.Table]:
    if table.nbytes <= target_bytes or table.num_rows <= 1:
        return [table]
    per_row = max(1, table.nbytes // table.num_rows)
    rows = max(1, target_bytes // per_row)
    return [table.slice(i, rows) for i in range(0, table.num_rows, rows)]


class _Writer:
    def __init__(self, ctx: HudiWriteContext, seed: int) -> None:
        self.ctx = ctx
        self.spec = ctx.spec
        self.files = table_files(ctx.spec.base_path, ctx.spec.s3)
        part_id, stage_id = _task_ids(seed)
        self.part_id = part_id
        token = f"{part_id}-{stage_id}-{seed}"
        self.token = f"{token}-{ctx.tag}" if ctx.tag else token
        # seqno: <instant>_<task partition>_<n>, n unique within the instant's task attempt
        self.seq = (seed % 1000) << 32
        self.started: list[str] = []
        self.out: list[bytes] = []
        self.markers = ctx.markers and TablePaths(self.files).exists()

    def write(self, rows: pa.Table) -> None:
        keys = record_keys(rows, self.spec.record_key_fields)
        rows = rows.append_column("__key", keys)
        for path, part in _split(rows, self.spec.partition_fields):
            for chunk in _chunks(part, self.ctx.target_file_size_bytes):
                self._file(path, chunk)

    def _file(self, partition: str, rows: pa.Table) -> None:
        instant = self.ctx.instant
        pm = f"{partition}/{PARTITION_METADATA}" if partition else PARTITION_METADATA
        if self.files.stat(pm) is None:  # racing creators are fine: create-if-absent
            self.files.create(pm, partition_metadata(instant, self.spec.partition_depth))
        file_id = f"{uuid.uuid4()}-0"
        name = base_file_name(file_id, self.token, instant)
        rel = f"{partition}/{name}" if partition else name
        if self.markers:
            marker_dir = f"{META_DIR}/{MARKERS_DIR}/{instant}"
            self.files.write(f"{marker_dir}/{rel}.marker.CREATE", b"")
        n = rows.num_rows
        keys = rows.column("__key")
        seq = pa.array(np.arange(self.seq, self.seq + n, dtype=np.int64)).cast(pa.string())
        self.seq += n
        meta = [
            pa.repeat(pa.scalar(instant), n),
            pc.binary_join_element_wise(f"{instant}_{self.part_id}_", seq, ""),
            keys,
            pa.repeat(pa.scalar(partition), n),
            pa.repeat(pa.scalar(name), n),
        ]
        data = [rows.column(f.name) for f in self.spec.arrow_schema]
        min_key = pc.min(keys).as_py()
        max_key = pc.max(keys).as_py()
        schema = self.spec.file_schema.with_metadata(
            {"hoodie_min_record_key": min_key or "", "hoodie_max_record_key": max_key or ""}
        )
        table = pa.Table.from_arrays([*meta, *data], schema=schema)
        self.started.append(rel)
        with self.files.open_output(rel) as f:
            with pq.ParquetWriter(f, schema, compression="snappy") as writer:
                writer.write_table(table, row_group_size=_ROW_GROUP_ROWS)
            size = int(f.tell())
        self.out.append(
            json.dumps(
                {
                    "format": _MAGIC,
                    "path": rel,
                    "fileId": file_id,
                    "fileName": name,
                    "partitionPath": partition,
                    "instant": instant,
                    "records": n,
                    "size": size,
                    "minRecordKey": min_key,
                    "maxRecordKey": max_key,
                },
                separators=(",", ":"),
            ).encode()
        )

    def abort(self) -> None:
        for rel in self.started:
            with contextlib.suppress(OSError):
                self.files.delete(rel)


def write_base_files(
    ctx: HudiWriteContext, batches: Iterable[pa.RecordBatch], seed: int
) -> list[bytes]:
    """Write ``batches`` as new base files of instant ``ctx.instant``; their descriptors.

    No rows: no files. On failure the files this call started are deleted (best effort;
    the driver's stray sweep removes any left) and the error propagates.
    """
    conformed = [_conform(b, ctx.spec.arrow_schema) for b in batches if b.num_rows]
    if not conformed:
        return []
    writer = _Writer(ctx, seed)
    try:
        writer.write(pa.Table.from_batches(conformed, schema=ctx.spec.arrow_schema))
    except BaseException:
        writer.abort()
        raise
    return writer.out
