"""A Hudi copy-on-write table (Hudi's own Spark writer: table version 8+, timeline layout 2;
this pipeline's writer: version 6, layout 1) read with hudi-rs and the timeline listing,
fresh on every call.

* :func:`progress`: the completed ``commit`` instants and their write stats (hudi-rs
  decodes the Avro commit metadata), the table's current file slices (hudi-rs) for files
  and bytes, and per current file its record count: ``numWrites`` of the commit that wrote
  it (Hudi's insert rewrites small files with the new records added, so the newest
  version's count is the file's), else its Parquet footer (a commit archived off the
  active timeline). Commits are those with inserted records, on the active timeline and in
  the archived (LSM) history.
* :func:`rows`: the coordinates read with hudi-rs; a row's commit time is the completion
  time of the instant named by its ``_hoodie_commit_time`` (the file name
  ``<requested>_<completed>.commit``, or the archived history's ``completionTime``), null
  when that instant is listed in neither.

Archived commits (:mod:`.hudi_history`) count as data commits: their metadata is not
decoded here, and the streaming sink commits no empty batch.

Instant times are wall-clock strings in the table's timeline zone
(``hoodie.table.timeline.timezone``: LOCAL by default, the writer's zone, which is ours).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lab.peers.coords import SPARK_KAFKA, Columns, empty, to_coords
from lab.peers.hudi_history import archived_commits
from lab.peers.model import Progress
from pipeline.formats.hudi.instant import Action, Instant, State

COMMIT_TIME = "_hoodie_commit_time"


def instant_ms(instant: str, utc: bool) -> int:
    """Epoch ms of a Hudi instant time ``yyyyMMddHHmmss[SSS]`` in the timeline's zone."""
    wall = datetime.strptime(instant[:14], "%Y%m%d%H%M%S")
    if utc:
        wall = wall.replace(tzinfo=UTC)
    millis = int(instant[14:17] or 0)
    return int(wall.timestamp()) * 1000 + millis  # naive: the local zone, as Hudi's LOCAL


def completions(base: Path) -> dict[str, str]:
    """Requested time -> completion time of the completed commits on the active timeline.
    Layout 2 names both in the file name; layout 1 (table version 6, this pipeline's own
    writer) names only the requested time, so its completion is the completed file's
    modification time (local tables), as an instant string in this host's zone."""
    hoodie = base / ".hoodie"
    try:
        names = [p.name for p in (hoodie / "timeline").iterdir()]
    except FileNotFoundError:
        return {
            i.time: _instant(p.stat().st_mtime)
            for p in (hoodie.iterdir() if hoodie.is_dir() else [])
            if (i := Instant.parse(p.name))
            and i.action is Action.COMMIT
            and i.state is State.COMPLETED
            and i.completion_time is None
        }
    found = (Instant.parse(n) for n in names)
    return {
        i.time: i.completion_time
        for i in found
        if i is not None and i.completion_time is not None and i.action is Action.COMMIT
    }


def _instant(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s).strftime("%Y%m%d%H%M%S%f")[:17]


def _table(base: Path) -> Any | None:
    """hudi-rs's table at ``base``, None before the first commit completed."""
    if not completions(base):
        return None
    import hudi

    for attempt in range(3):  # hoodie.properties is rewritten in place (upgrades)
        try:
            return hudi.HudiTableBuilder.from_base_uri(str(base)).build()
        except Exception:  # hudi-rs raises its own HudiCoreError
            if attempt == 2:
                raise
            time.sleep(0.2)
    return None


def _utc(table: Any) -> bool:
    return str(table.timezone).lower() == "utc"


def progress(base: Path) -> Progress:
    """A fresh read; read again when the writer archived or cleaned a file meanwhile."""
    for attempt in range(3):
        try:
            return _progress(base)
        except Exception:  # hudi-rs raises its own HudiCoreError (a file gone meanwhile)
            if attempt == 2:
                raise
            time.sleep(0.2)
    raise AssertionError("unreachable")


def _progress(base: Path) -> Progress:
    table = _table(base)
    if table is None:
        return Progress(records=0, commits=0, data_files=0, data_bytes=0)
    timeline = table.get_timeline()
    done = completions(base)
    written: dict[str, int] = {}  # base file name -> records in it
    data_commits: list[str] = []  # completion times of the commits that added records
    for instant in timeline.get_completed_commits():
        doc = json.loads(timeline.get_instant_metadata_in_json(instant))
        inserted = 0
        for stats in (doc.get("partitionToWriteStats") or {}).values():
            for s in stats:
                inserted += int(s.get("numInserts") or 0)
                written[Path(str(s.get("path", ""))).name] = int(s.get("numWrites") or 0)
        if inserted > 0:
            data_commits.append(done.get(instant.timestamp, instant.timestamp))
    records = files = size = 0
    for fs in table.get_file_slices():
        files += 1
        size += int(fs.base_file_size)
        name = fs.base_file_name
        if name in written:
            records += written[name]
        else:  # its commit was archived: the footer knows
            path = base / fs.partition_path / name if fs.partition_path else base / name
            records += pq.read_metadata(path).num_rows
    archived = archived_commits(base)
    first = min([*archived.values(), *data_commits], default=None)
    return Progress(
        records=records,
        commits=len(archived) + len(data_commits),
        data_files=files,
        data_bytes=size,
        first_commit_ms=instant_ms(first, _utc(table)) if first else None,
    )


def rows(base: Path, columns: Columns = SPARK_KAFKA) -> pa.Table:
    """The coordinates of every row (its topic, partition, offset and Kafka timestamp
    columns named by ``columns``), each with its instant's completion time."""
    import hudi

    table = _table(base)
    if table is None:
        return empty()
    options = hudi.HudiReadOptions().with_projection([COMMIT_TIME, *columns])
    batches = table.read(options)
    if not batches:
        return empty()
    data = pa.Table.from_batches(batches)
    utc = _utc(table)
    done = {**archived_commits(base), **completions(base)}
    instants = pc.unique(data.column(COMMIT_TIME)).to_pylist()
    ms = [instant_ms(done[i], utc) if i in done else None for i in instants]
    index = pc.index_in(data.column(COMMIT_TIME), value_set=pa.array(instants, pa.string()))
    commit_ms = pa.array(ms, pa.int64()).take(index)
    return to_coords(data, columns, commit_ms=commit_ms)
