"""The JSON metadata of a Hudi ``<T>.commit`` (table version 6, timeline layout 1): write
stats per base file, grouped by partition path, and ``extraMetadata`` holding the Avro
schema and the consumption checkpoint (docs/design.md invariant 2; docs/hudi.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.formats.hudi.cow_table import SCHEMA_KEY

__all__ = ["commit_metadata_json"]


def _write_stat(d: Mapping[str, Any]) -> dict[str, Any]:
    size, n = int(d["size"]), int(d["records"])
    return {
        "fileId": d["fileId"],
        "path": d["path"],
        "cdcStats": None,
        "prevCommit": "null",
        "numWrites": n,
        "numDeletes": 0,
        "numUpdateWrites": 0,
        "numInserts": n,
        "totalWriteBytes": size,
        "totalWriteErrors": 0,
        "tempPath": None,
        "partitionPath": d["partitionPath"],
        "totalLogRecords": 0,
        "totalLogFilesCompacted": 0,
        "totalLogSizeCompacted": 0,
        "totalUpdatedRecordsCompacted": 0,
        "totalLogBlocks": 0,
        "totalCorruptLogBlock": 0,
        "totalRollbackBlocks": 0,
        "fileSizeInBytes": size,
        "minEventTime": None,
        "maxEventTime": None,
        "runtimeStats": None,
    }


def commit_metadata_json(
    files: Sequence[Mapping[str, Any]], schema: str, extra: Mapping[str, str]
) -> bytes:
    stats: dict[str, list[dict[str, Any]]] = {}
    for d in files:
        stats.setdefault(str(d["partitionPath"]), []).append(_write_stat(d))
    doc = {
        "partitionToWriteStats": stats,
        "compacted": False,
        "extraMetadata": {SCHEMA_KEY: schema, **extra},
        "operationType": "INSERT",
    }
    return json.dumps(doc, indent=2).encode()
