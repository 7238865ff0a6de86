"""A peer's Iceberg table read from its metadata files alone (a Hadoop catalog's layout:
``<table>/metadata/v<N>.metadata.json``), fresh on every call.

* :func:`progress` parses the newest metadata JSON: the current snapshot's totals
  (``total-records``, ``total-data-files``, ``total-files-size``) and, over its ancestry,
  the snapshots that added records (commits) and the first one's ``timestamp-ms``.
* :func:`rows` reads the Kafka coordinates with pyiceberg; each data file's rows carry the
  ``timestamp-ms`` of the snapshot that added the file (its manifest entry's snapshot id).
* :func:`table_progress` / :func:`table_rows`: the same for a table loaded from a catalog
  (this pipeline's, Iceberg's Kafka Connect sink's), whatever its coordinate columns;
  :func:`combine`: the progress of a system's many tables as one.

The newest version is the highest ``v<N>`` listed, not ``version-hint.text`` (the hint is
written after the version; Iceberg's own Hadoop catalog looks past it the same way). A
version file appears whole (written aside, then renamed) or not at all.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa

from lab.peers.coords import SPARK_KAFKA, Columns, empty, to_coords
from lab.peers.model import Progress

_VERSION = re.compile(r"^v(\d+)\.metadata\.json$")


def latest_metadata(table_dir: Path) -> Path | None:
    """The newest ``v<N>.metadata.json`` of the table at ``table_dir`` (None: no table)."""
    best: tuple[int, Path] | None = None
    try:
        names = [p for p in (table_dir / "metadata").iterdir()]
    except FileNotFoundError:
        return None
    for p in names:
        m = _VERSION.match(p.name)
        if m and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), p)
    return best[1] if best else None


def _data_snapshots(meta: dict[str, Any]) -> list[dict[str, Any]]:
    """The current snapshot's ancestry (oldest first) that added records."""
    by_id = {s["snapshot-id"]: s for s in meta.get("snapshots") or []}
    chain = []
    sid = meta.get("current-snapshot-id")
    while sid is not None and sid != -1 and sid in by_id:
        chain.append(by_id[sid])
        sid = by_id[sid].get("parent-snapshot-id")
    chain.reverse()
    return [s for s in chain if int(s.get("summary", {}).get("added-records", 0)) > 0]


def progress(table_dir: Path) -> Progress:
    path = latest_metadata(table_dir)
    if path is None:
        return Progress(records=0, commits=0, data_files=0, data_bytes=0)
    return _progress(json.loads(path.read_text()))


def _progress(meta: dict[str, Any]) -> Progress:
    """From table metadata (JSON field names): the current snapshot's totals, which stay
    right when older snapshots expire, and the data commits still listed."""
    by_id = {s["snapshot-id"]: s for s in meta.get("snapshots") or []}
    current = by_id.get(meta.get("current-snapshot-id"))
    if current is None:
        return Progress(records=0, commits=0, data_files=0, data_bytes=0)
    summary = current.get("summary", {})
    added = _data_snapshots(meta)
    return Progress(
        records=int(summary.get("total-records", 0)),
        commits=len(added),
        data_files=int(summary.get("total-data-files", 0)),
        data_bytes=int(summary.get("total-files-size", 0)),
        first_commit_ms=int(added[0]["timestamp-ms"]) if added else None,
    )


def rows(table_dir: Path) -> pa.Table:
    """The coordinates of every row of the Hadoop-layout table at ``table_dir``."""
    from pyiceberg.table import StaticTable

    path = latest_metadata(table_dir)
    if path is None:
        return empty()
    return table_rows(StaticTable.from_metadata(str(path)), SPARK_KAFKA)


def table_progress(table: Any) -> Progress:
    """:func:`progress` of a table loaded from a catalog (None: not created yet)."""
    if table is None:
        return Progress(records=0, commits=0, data_files=0, data_bytes=0)
    return _progress(table.metadata.model_dump(by_alias=True))


def combine(parts: list[Progress]) -> Progress:
    """The progress of many tables written by one system as one: counts added up, the
    earliest first commit."""
    firsts = [p.first_commit_ms for p in parts if p.first_commit_ms is not None]
    return Progress(
        records=sum(p.records for p in parts),
        commits=sum(p.commits for p in parts),
        data_files=sum(p.data_files for p in parts),
        data_bytes=sum(p.data_bytes for p in parts),
        first_commit_ms=min(firsts) if firsts else None,
    )


def table_rows(table: Any, columns: Columns) -> pa.Table:
    """The coordinates of every row of a pyiceberg ``table`` (its topic, partition, offset
    and Kafka timestamp columns named by ``columns``), each with its data file's commit
    time: the ``timestamp-ms`` of the snapshot that added the file."""
    from pyiceberg.io.pyarrow import ArrowScan

    snapshot = table.current_snapshot() if table is not None else None
    if snapshot is None:
        return empty()
    committed = {s.snapshot_id: s.timestamp_ms for s in table.snapshots()}
    added_by: dict[str, int | None] = {}
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            sid = entry.snapshot_id
            added_by[entry.data_file.file_path] = committed.get(sid) if sid else None
    scan = table.scan(selected_fields=columns)
    tasks_by_commit: dict[int | None, list[Any]] = defaultdict(list)
    for task in scan.plan_files():
        tasks_by_commit[added_by.get(task.file.file_path)].append(task)
    reader = ArrowScan(table.metadata, table.io, scan.projection(), scan.row_filter)
    parts = [
        to_coords(reader.to_table(tasks), columns, commit_ms=commit_ms)
        for commit_ms, tasks in sorted(tasks_by_commit.items(), key=lambda kv: kv[0] or 0)
    ]
    return pa.concat_tables(parts) if parts else empty()
