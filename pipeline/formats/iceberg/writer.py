"""Worker side: stage Parquet data files for an Iceberg table, outside any catalog commit.

Runs inside Spark's Python workers (``mapInArrow``) and needs nothing but a small,
picklable :class:`WriteContext` built on the driver. Files are written with pyiceberg's
own Parquet writer and statistics (``FileFormatFactory`` writers, ``schema_to_pyarrow``
field ids, ``DataFile.from_args``, as ``pyiceberg.io.pyarrow.write_file`` does), laid out by
the table's location provider, and described by ``DataFile`` objects that travel back to
the driver as bytes (:mod:`~pipeline.formats.iceberg.data_file_codec`). Nothing is visible
to readers until the driver appends those files in one snapshot.

Why not ``_dataframe_to_data_files`` as is: it materialises the whole input (a
``pa.Table``) for partitioned tables, and its file names depend only on
``(write_uuid, task_id)``, so a retried Spark task would overwrite the files of an earlier
attempt that the driver may already have recorded. Here the input is streamed, rows are
split per partition batch by batch, and each call gets its own attempt token in the
file names.

Memory: at most about one target file's worth of rows is buffered in total (per-partition
buffers are flushed to their open Parquet writers as row groups; the biggest buffer is
flushed whenever the sum exceeds the target), and at most ``_MAX_OPEN_FILES`` files are
open at once. Like pyiceberg, the target file size is measured in uncompressed Arrow
bytes, so files on disk come out several times smaller.

Partition values: :mod:`pipeline.formats.iceberg.partition_values`.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterable
from typing import Any

import pyarrow as pa
from pyiceberg.io import FileIO, OutputFile, load_file_io
from pyiceberg.io.fileformat import FileFormatFactory, FileFormatModel, FileFormatWriter
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionFieldValue, PartitionKey
from pyiceberg.schema import sanitize_column_names
from pyiceberg.table import TableProperties
from pyiceberg.table.locations import LocationProvider, load_location_provider
from pyiceberg.typedef import Record
from pyiceberg.utils.properties import property_as_int

from pipeline.decode.conform import conform_batch
from pipeline.formats.iceberg.data_file_codec import serialize_data_file
from pipeline.formats.iceberg.partition_values import DataFileWriteError, split_by_partition
from pipeline.formats.iceberg.write_context import WriteContext

log = logging.getLogger(__name__)

__all__ = ["write_data_files"]

_MAX_ROW_GROUP_BYTES = 64 * 1024 * 1024
# Open Parquet writers per task (one per partition written to); beyond this the least
# recently written file is closed early (a smaller file rather than unbounded handles).
_MAX_OPEN_FILES = 64


# ---------------------------------------------------------------------------------------
# Arrow conformance (partition values: pipeline.formats.iceberg.partition_values)
# ---------------------------------------------------------------------------------------


def _conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    return conform_batch(
        batch,
        target,
        DataFileWriteError,
        "the table schema",
        "; evolve the table or fix the decoder",
    )


# ---------------------------------------------------------------------------------------
# Rolling writers
# ---------------------------------------------------------------------------------------


class _OpenFile:
    """One Parquet data file being written (for one partition)."""

    def __init__(self, path: str, output: OutputFile, writer: FileFormatWriter) -> None:
        self.path = path
        self.output = output
        self.writer = writer
        self.arrow_bytes = 0
        self.rows = 0


class _PartitionState:
    def __init__(self, key: PartitionKey | None) -> None:
        self.key = key
        self.pending: list[pa.RecordBatch] = []
        self.pending_bytes = 0
        self.pending_rows = 0
        self.file: _OpenFile | None = None


class _TaskWriter:
    """Streams batches of one Spark task into partitioned, size-bounded Parquet files."""

    def __init__(self, ctx: WriteContext, task_id: int) -> None:
        self.ctx = ctx
        self.task_id = task_id
        self.attempt = uuid.uuid4().hex[:12]
        self.metadata = ctx.metadata()
        self.schema = self.metadata.schema()
        self.spec = self.metadata.spec()
        self.properties = dict(self.metadata.properties)
        self.io: FileIO = load_file_io(ctx.io_properties, ctx.table_location)
        self.file_format = FileFormat(
            self.properties.get(
                TableProperties.WRITE_FILE_FORMAT, TableProperties.WRITE_FILE_FORMAT_DEFAULT
            )
        )
        self.format_model: FileFormatModel = FileFormatFactory.get(self.file_format)
        self.location: LocationProvider = load_location_provider(
            self.metadata.location, self.properties
        )
        self.arrow_target = schema_to_pyarrow(self.schema)
        sanitized = sanitize_column_names(self.schema)
        if sanitized != self.schema:  # names Avro cannot carry, e.g. "user-id"
            self.file_schema = sanitized
            self.arrow_file = schema_to_pyarrow(sanitized)
        else:
            self.file_schema = self.schema
            self.arrow_file = self.arrow_target
        self.target_bytes = ctx.target_file_size_bytes
        self.row_group_bytes = min(self.target_bytes, _MAX_ROW_GROUP_BYTES)
        self.row_group_rows = (
            property_as_int(
                self.properties,
                TableProperties.PARQUET_ROW_GROUP_LIMIT,
                TableProperties.PARQUET_ROW_GROUP_LIMIT_DEFAULT,
            )
            or TableProperties.PARQUET_ROW_GROUP_LIMIT_DEFAULT
        )
        self.partitions: dict[tuple[Any, ...], _PartitionState] = {}
        self.pending_bytes = 0
        self.file_count = 0
        self.open_files: dict[int, _PartitionState] = {}
        self.done: list[DataFile] = []
        self.started: list[str] = []

    # -- input ---------------------------------------------------------------------------

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        batch = _conform(batch, self.arrow_target)
        if self.spec.is_unpartitioned():
            pieces: list[tuple[tuple[Any, ...], pa.RecordBatch]] = [((), batch)]
        else:
            pieces = split_by_partition(batch, self.spec, self.schema)
        for values, rows in pieces:
            state = self.partitions.get(values)
            if state is None:
                state = _PartitionState(self._partition_key(values))
                self.partitions[values] = state
            ready = self._to_file_schema(rows)
            state.pending.append(ready)
            state.pending_bytes += ready.nbytes
            state.pending_rows += ready.num_rows
            self.pending_bytes += ready.nbytes
            if (
                state.pending_bytes >= self.row_group_bytes
                or state.pending_rows >= self.row_group_rows
            ):
                self._flush(state)
        while self.pending_bytes > self.target_bytes:
            self._flush(max(self.partitions.values(), key=lambda s: s.pending_bytes))

    def _to_file_schema(self, rows: pa.RecordBatch) -> pa.RecordBatch:
        """Rows (table names, exact types) as written: Avro-sanitized names, field ids.

        Not ``_to_requested_schema``: in pyiceberg 0.12 it turns a null list of structs into
        an empty list (it rebuilds such lists from offsets alone, dropping the validity
        bitmap), which would corrupt e.g. the ``headers`` column. Sanitizing only renames
        fields, so a zero-copy ``view`` as the file schema's type is enough.
        """
        if self.arrow_file is self.arrow_target:
            return rows
        columns = [col.view(f.type) for col, f in zip(rows.columns, self.arrow_file, strict=True)]
        return pa.RecordBatch.from_arrays(columns, schema=self.arrow_file)

    def _partition_key(self, values: tuple[Any, ...]) -> PartitionKey | None:
        if self.spec.is_unpartitioned():
            return None
        fields: list[PartitionField] = list(self.spec.fields)
        return PartitionKey(
            field_values=[
                PartitionFieldValue(field=f, value=v) for f, v in zip(fields, values, strict=True)
            ],
            partition_spec=self.spec,
            schema=self.schema,
        )

    # -- output --------------------------------------------------------------------------

    def _flush(self, state: _PartitionState) -> None:
        if not state.pending:
            return
        table = pa.Table.from_batches(state.pending)
        self.pending_bytes -= state.pending_bytes
        state.pending, state.pending_bytes, state.pending_rows = [], 0, 0
        if state.file is None:
            if len(self.open_files) >= _MAX_OPEN_FILES:  # close the least recently written
                self._close(next(iter(self.open_files.values())))
            state.file = self._open(state.key)
        self.open_files.pop(id(state), None)
        self.open_files[id(state)] = state  # most recently written last
        state.file.writer.write(table)
        state.file.arrow_bytes += table.nbytes
        state.file.rows += table.num_rows
        if state.file.arrow_bytes >= self.target_bytes:
            self._close(state)

    def _open(self, key: PartitionKey | None) -> _OpenFile:
        name = (
            f"{self.task_id:05d}-{self.file_count:05d}-{self.ctx.write_uuid}-{self.attempt}"
            f".{self.format_model.file_extension()}"
        )
        self.file_count += 1
        path = self.location.new_data_location(data_file_name=name, partition_key=key)
        output = self.io.new_output(path)
        self.started.append(path)
        writer = self.format_model.create_writer(output, self.file_schema, self.properties)
        return _OpenFile(path, output, writer)

    def _close(self, state: _PartitionState) -> None:
        current = state.file
        if current is None:
            return
        state.file = None
        self.open_files.pop(id(state), None)
        stats = current.writer.close()
        data_file = DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=current.path,
            file_format=self.file_format,
            partition=state.key.partition if state.key is not None else Record(),
            file_size_in_bytes=len(current.output),
            sort_order_id=None,
            equality_ids=None,
            key_metadata=None,
            **stats.to_serialized_dict(),
        )
        data_file.spec_id = self.metadata.default_spec_id
        self.done.append(data_file)

    def finish(self) -> list[DataFile]:
        for state in self.partitions.values():
            self._flush(state)
            self._close(state)
        return self.done

    def abort(self) -> None:
        """Best effort: close and delete every file this attempt started."""
        for state in self.partitions.values():
            if state.file is not None:
                with contextlib.suppress(Exception):  # keep the original error
                    state.file.writer.close()
        for path in self.started:
            try:
                self.io.delete(path)
            except Exception:
                log.warning("could not delete staged file %s after a failed write", path)


def write_data_files(
    ctx: WriteContext, batches: Iterable[pa.RecordBatch], task_id: int
) -> list[bytes]:
    """Write ``batches`` as Parquet data files of the table; return them serialized.

    ``batches`` have the columns of ``arrow_schema(schema)`` (matched by name; types are
    cast when they differ, e.g. Spark's ``timestamp[us, tz=<session tz>]`` or int32 for a
    long). Missing optional columns are written as nulls. File names carry the task id,
    the context's write uuid and a random per-call attempt token, so retried tasks never
    overwrite each other. No input rows: no files. On failure the files started by this
    call are deleted (best effort) and the error propagates.
    """
    writer = _TaskWriter(ctx, task_id)
    try:
        for batch in batches:
            writer.write(batch)
        files = writer.finish()
    except BaseException:
        writer.abort()
        raise
    return [serialize_data_file(f) for f in files]
