"""The data side of a Hudi compaction (:mod:`~pipeline.formats.hudi.compaction`): one new
base file from a group of small ones, and the ``replacecommit`` metadata naming both.

A rewritten file is a new file group of the compaction's instant ``C``:
``<uuid>-0_<i>-0-0_C.parquet``, written after its marker, holding its inputs' rows in
order with their meta columns kept (commit time, seqno, record key, partition path; as
Hudi's clustering preserves them) and ``_hoodie_file_name`` set to the new name; the
footer's min/max record keys span the inputs'.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.commit.maintenance import COMPACTION_KEY
from pipeline.formats.hudi.commit_metadata import commit_metadata_json
from pipeline.formats.hudi.layout import MARKERS_DIR, base_file_name
from pipeline.formats.hudi.schema import HudiTableSpec
from pipeline.formats.hudi.storage import TableFiles
from pipeline.formats.hudi.view import BaseFile

__all__ = ["Written", "replace_metadata", "rewrite_group"]

_ROW_GROUP_ROWS = 128 * 1024
_KEY_BOUNDS = (b"hoodie_min_record_key", b"hoodie_max_record_key")


@dataclass(frozen=True)
class Written:
    rel: str
    partition: str
    file_id: str
    records: int
    size: int


def rewrite_group(
    files: TableFiles, meta: str, spec: HudiTableSpec, ts: str, index: int, group: list[BaseFile]
) -> Written:
    """Write the rows of ``group`` (one partition) as one new base file of instant ``ts``."""
    schema = spec.file_schema
    partition = group[0].partition
    file_id = f"{uuid.uuid4()}-0"
    name = base_file_name(file_id, f"{index}-0-0", ts)
    rel = f"{partition}/{name}" if partition else name
    files.write(f"{meta}/{MARKERS_DIR}/{ts}/{rel}.marker.CREATE", b"")
    keys: list[str] = []
    for f in group:
        with files.open_input(f.rel) as src:
            footer = pq.ParquetFile(src).schema_arrow.metadata or {}
        keys += [v.decode() for k in _KEY_BOUNDS if (v := footer.get(k))]
    bounds = {
        "hoodie_min_record_key": min(keys, default=""),
        "hoodie_max_record_key": max(keys, default=""),
    }
    column = schema.get_field_index("_hoodie_file_name")
    records = 0
    with files.open_output(rel) as sink:
        with pq.ParquetWriter(sink, schema.with_metadata(bounds), compression="snappy") as out:
            for f in group:
                with files.open_input(f.rel) as src:
                    rows = pq.ParquetFile(src).read().select(schema.names).cast(schema)
                name_column = pa.repeat(pa.scalar(name), rows.num_rows)
                rows = rows.set_column(column, schema.field(column), name_column)
                out.write_table(rows, row_group_size=_ROW_GROUP_ROWS)
                records += rows.num_rows
        size = int(sink.tell())
    return Written(rel, partition, file_id, records, size)


def replace_metadata(
    spec: HudiTableSpec, inputs: Sequence[BaseFile], written: Sequence[Written]
) -> bytes:
    """``C.replacecommit``: write stats of ``written``, the file groups of ``inputs`` in
    ``partitionToReplaceFileIds``, operation CLUSTER, the schema and the compaction mark."""
    descs = [
        {
            "fileId": w.file_id,
            "path": w.rel,
            "partitionPath": w.partition,
            "records": w.records,
            "size": w.size,
        }
        for w in written
    ]
    doc = json.loads(commit_metadata_json(descs, spec.avro_schema, {COMPACTION_KEY: "true"}))
    replaced: dict[str, list[str]] = {}
    for f in inputs:
        replaced.setdefault(f.partition, []).append(f.file_id)
    doc["operationType"] = "CLUSTER"
    doc["partitionToReplaceFileIds"] = replaced
    return json.dumps(doc, indent=2).encode()
