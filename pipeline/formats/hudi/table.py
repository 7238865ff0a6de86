"""Driver side: a Hudi copy-on-write table's timeline, creation, commit and rollback, and
:class:`HudiCommitter`, the coordinator's ``TableCommitter`` for it.

Commit of instant ``T`` (under the table lock; see :mod:`pipeline.formats.hudi.layout`):

1. the table is loaded and checked (version 6, layout 1, COW, no metadata table, the
   configured key and partition fields);
2. the batch is looked up in the completed commits, newest first: already there -> done
   (idempotent per (pipeline, incarnation, batch id, planned end offsets));
3. the writer epoch is checked: a fence record or a commit of this pipeline at a higher
   epoch -> ``FencedError``;
4. every listed file must exist with its staged size;
5. stray files of ``T`` (task-retry debris: same instant, same pipeline tag, not listed)
   are deleted -- Hudi readers list files and WOULD read them;
6. ``T.commit.requested`` and ``T.inflight`` are written if missing, then ``T.commit``
   (JSON metadata: write stats per file, ``extraMetadata.schema`` and the consumption
   checkpoint) appears atomically: the commit point. A missing table is created by the
   same step: its ``.hoodie`` is renamed into place together with this first commit.

Rollback (coordinator ``_roll_back``): the coordinator deletes the instant's files first
(listed and ``orphan_files``), then :meth:`HudiCommitter.abort` deletes ``T.inflight``,
then ``T.commit.requested``, then the markers -- in that order, because a data file whose
instant files are gone is visible again when it is older than the first commit. No
``.rollback`` instant is written (Avro-only in Hudi; readers never consult it); the
journal's ROLLED_BACK entry lists the deleted files.

Bounded timeline (so commit latency stays flat; :mod:`pipeline.commit.history`): every
commit carries ``ingest.ranges-before`` / ``ingest.data-loss-before`` in its
``extraMetadata``; every ``trim_every`` commits, the completed commits beyond the newest
``max_commits`` leave the active timeline -- their instant files are deleted, oldest
first, ``.commit.requested`` and ``.inflight`` before ``.commit`` (a crash leaves only
completed instants). Their data files stay and stay visible: Hudi readers treat files older
than the first active instant as committed (HUDI_FORMAT.md, checked with hudi-rs in the
tests). No Avro archive is written, so time travel and incremental reads reach back
only to the oldest retained commit. Never trimmed: anything at or after the oldest pending
or non-commit instant; commits of a pipeline whose oldest retained commit lacks the
carried keys. Before the timeline start moves past an instant time, files of instants
there that never completed (markers without a completed commit: a zombie's staging after
a rollback) are deleted -- they would become visible. ``.ingest/trimmed`` records the
newest trimmed time first, so files of a trimmed commit are never mistaken for debris.

Fencing: :meth:`HudiCommitter.fence` writes ``.ingest/fence/<pipeline>`` (the epoch) under
the lock; commits read it under the same lock, so a zombie's commit either completed
before the fence (and the new owner's recovery sees it) or is refused after it. The fence
record lives in the staging directory while the table does not exist, so fencing never
creates an empty table (``create=True`` is not needed).
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.commit.coordinator import Checkpoint
from pipeline.commit.history import carry_forward, forgettable
from pipeline.commit.instant import next_instant_time
from pipeline.commit.journal import CorruptEntry, decode_entry, encode_entry
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.errors import CommitError, ConfigError, FencedError
from pipeline.formats.hudi.layout import (
    BASE_FILE,
    EMPTY_COMMIT_METADATA,
    INSTANT_FILE,
    LOCK_TIMEOUT_S,
    MARKERS_DIR,
    OWN_DIR,
    PARTITION_METADATA,
    PROPERTIES,
    TABLE_VERSION,
    TIMELINE_LAYOUT_VERSION,
    TableLock,
    TablePaths,
    commit_name,
    file_tag,
    format_properties,
    fsync_dir,
    inflight_name,
    parse_properties,
    parse_write_id,
    partition_metadata,
    remove,
    requested_name,
    table_properties,
    write_file,
)
from pipeline.formats.hudi.schema import HudiTableSpec
from pipeline.formats.hudi.writer import HudiWriteContext, describe
from pipeline.formats.iceberg.table import PIPELINE_ID_KEY, CommitCheckpoint

log = logging.getLogger(__name__)

__all__ = ["HudiCommitter", "HudiInstant", "HudiTable"]

SCHEMA_KEY = "schema"  # extraMetadata key of the Avro schema (Hudi's own)
_MAX_SCAN = 1000  # completed commits searched for a pipeline's checkpoint / a batch
TRIMMED_RECORD = "trimmed"  # .hoodie/.ingest/trimmed: the newest trimmed instant time


@dataclass(frozen=True, order=True)
class HudiInstant:
    time: str
    action: str
    state: str  # requested | inflight | completed


def _parse_instant(name: str) -> HudiInstant | None:
    """The instant a ``.hoodie`` file name stands for (None: not an instant file)."""
    m = INSTANT_FILE.match(name)
    if m is None:
        return None
    action, state = m.group("action"), m.group("state")
    if action == "inflight" and state is None:  # <ts>.inflight of a commit
        action, state = "commit", "inflight"
    return HudiInstant(m.group("ts"), action, state or "completed")


class _Timeline:
    """The instant files of ``.hoodie`` as last listed, kept indexed: a new listing is
    applied as the difference to the previous one (a few files per commit), so a query
    costs one directory listing, not a parse and sort of the whole history."""

    def __init__(self) -> None:
        self.names: list[str] = []  # the listing as returned (unchanged dir: same list)
        self._present: set[str] = set()
        self._instants: dict[str, HudiInstant] = {}  # file name -> instant
        self._time_refs: dict[str, int] = {}  # instant time -> its instant files
        self._times: list[str] = []  # distinct instant times, ascending
        self._commit_states: dict[str, set[str]] = {}  # commit time -> file states
        self.completed: list[str] = []  # completed commit times, ascending
        self.pending: set[str] = set()  # commit times without a completed file

    def update(self, names: list[str]) -> None:
        if names == self.names:
            return
        now = set(names)
        for name in self._present - now:
            self._remove(name)
        for name in now - self._present:
            self._add(name)
        self._present, self.names = now, names

    def instants(self) -> list[HudiInstant]:
        return sorted(self._instants.values(), key=lambda i: (i.time, i.action, i.state))

    def latest(self) -> str | None:
        return self._times[-1] if self._times else None

    def _add(self, name: str) -> None:
        instant = _parse_instant(name)
        if instant is None:
            return
        self._instants[name] = instant
        t = instant.time
        self._time_refs[t] = self._time_refs.get(t, 0) + 1
        if self._time_refs[t] == 1:
            bisect.insort(self._times, t)
        if instant.action == "commit":
            self._commit_states.setdefault(t, set()).add(instant.state)
            if instant.state == "completed":
                bisect.insort(self.completed, t)
            self._classify(t)

    def _remove(self, name: str) -> None:
        instant = self._instants.pop(name, None)
        if instant is None:
            return
        t = instant.time
        self._time_refs[t] -= 1
        if not self._time_refs[t]:
            del self._time_refs[t]
            del self._times[bisect.bisect_left(self._times, t)]
        if instant.action == "commit":
            states = self._commit_states[t]
            states.discard(instant.state)
            if not states:
                del self._commit_states[t]
            if instant.state == "completed":
                del self.completed[bisect.bisect_left(self.completed, t)]
            self._classify(t)

    def _classify(self, t: str) -> None:
        states = self._commit_states.get(t)
        if states and "completed" not in states:
            self.pending.add(t)
        else:
            self.pending.discard(t)


class HudiTable:
    """One native Hudi COW table: reads of its timeline, and the writes the committer
    performs while holding the table lock."""

    def __init__(self, spec: HudiTableSpec, lock_timeout_s: float = LOCK_TIMEOUT_S) -> None:
        self.spec = spec
        self.paths = TablePaths(spec.base_path)
        self.lock = TableLock.of(self.paths)
        self.lock_timeout_s = lock_timeout_s
        self._metadata: dict[str, dict[str, Any]] = {}
        self._listing = _Timeline()  # the last listing of ``.hoodie``, indexed

    def locked(self) -> contextlib.AbstractContextManager[str]:
        """Hold the table lock; yields the meta directory to write in."""
        return self.lock.hold(self.lock_timeout_s)

    @property
    def base(self) -> str:
        return self.paths.base

    def exists(self) -> bool:
        return self.paths.exists()

    # -- reading the timeline ----------------------------------------------------------

    def _timeline(self) -> _Timeline:
        """The timeline as of one listing of ``.hoodie`` now (empty: no table)."""
        try:
            names = os.listdir(self.paths.meta)
        except FileNotFoundError:
            names = []
        self._listing.update(names)
        return self._listing

    def instants(self) -> list[HudiInstant]:
        """Every instant file in ``.hoodie`` (empty when the table does not exist)."""
        return self._timeline().instants()

    def completed_commits(self) -> list[str]:
        """Times of completed commits, newest first."""
        return self._timeline().completed[::-1]

    def pending_times(self) -> list[str]:
        """Instants with requested/inflight files and no completed commit, oldest first."""
        return sorted(self._timeline().pending)

    def has_markers(self, ts: str) -> bool:
        """Whether a worker staged (or began staging) a file of ``ts`` in this table."""
        root = os.path.join(self.paths.meta, MARKERS_DIR, ts)
        return any(files for _, _, files in os.walk(root))

    def discard_pending(self, meta: str, ts: str) -> None:
        """Forget pending instant ``ts`` that staged nothing: ``.inflight``, then
        ``.commit.requested``, then its (empty) marker directory."""
        for name in (inflight_name(ts), requested_name(ts)):
            if remove(os.path.join(meta, name)):
                fsync_dir(meta)
        shutil.rmtree(os.path.join(meta, MARKERS_DIR, ts), ignore_errors=True)

    def latest_instant_time(self) -> str | None:
        return self._timeline().latest()

    def commit_metadata(self, ts: str) -> dict[str, Any]:
        """The JSON metadata of completed commit ``ts`` (files are immutable: cached)."""
        cached = self._metadata.get(ts)
        if cached is not None:
            return cached
        path = os.path.join(self.paths.meta, commit_name(ts))
        with open(path, "rb") as f:
            doc = json.loads(f.read())
        if not isinstance(doc, dict):
            raise CommitError(f"{path} is not a JSON object")
        if len(self._metadata) > 4 * _MAX_SCAN:
            self._metadata.clear()
        self._metadata[ts] = doc
        return doc

    def extra_metadata(self, ts: str) -> dict[str, str]:
        extra = self.commit_metadata(ts).get("extraMetadata") or {}
        return {str(k): str(v) for k, v in extra.items() if v is not None}

    def properties(self) -> dict[str, str] | None:
        try:
            with open(os.path.join(self.paths.meta, PROPERTIES), encoding="utf-8") as f:
                return parse_properties(f.read())
        except FileNotFoundError:
            return None

    def check(self) -> None:
        """Refuse a table this writer must not write (CommitError / ConfigError)."""
        props = self.properties()
        where = f"Hudi table at {self.base}"
        if props is None:
            raise CommitError(f"{where}: .hoodie exists but has no {PROPERTIES}")
        problems = []
        if props.get("hoodie.table.version") != TABLE_VERSION:
            problems.append(f"table version {props.get('hoodie.table.version')} (need 6)")
        layout = props.get("hoodie.timeline.layout.version", TIMELINE_LAYOUT_VERSION)
        if layout != TIMELINE_LAYOUT_VERSION:
            problems.append(f"timeline layout {layout} (need 1)")
        if props.get("hoodie.table.type", "COPY_ON_WRITE") != "COPY_ON_WRITE":
            problems.append(f"table type {props.get('hoodie.table.type')} (need COPY_ON_WRITE)")
        if props.get("hoodie.table.base.file.format", "PARQUET").upper() != "PARQUET":
            problems.append("base file format is not PARQUET")
        if props.get("hoodie.table.metadata.partitions", "").strip():
            # Java readers would list files from the metadata table and miss ours
            problems.append("the metadata table is enabled (hoodie.table.metadata.partitions)")
        if problems:
            raise CommitError(f"{where} cannot be written natively: {'; '.join(problems)}")
        for key, mine in (
            ("hoodie.table.recordkey.fields", self.spec.record_key_fields),
            ("hoodie.table.partition.fields", self.spec.partition_fields),
        ):
            theirs = tuple(x for x in props.get(key, "").split(",") if x)
            if theirs != mine:
                raise ConfigError(
                    f"{where} has {key}={','.join(theirs)} but the configuration says "
                    f"{','.join(mine)}; a table's keys and partitioning cannot change"
                )

    def check_schema(self) -> None:
        """The newest commit's schema must be the configured one (no schema evolution)."""
        for ts in self.completed_commits():
            text = self.extra_metadata(ts).get(SCHEMA_KEY)
            if text is None:
                continue
            if json.loads(text) != json.loads(self.spec.avro_schema):
                raise ConfigError(
                    f"Hudi table at {self.base}: the configured columns differ from the "
                    f"table's schema (commit {ts}); the native writer does not evolve schemas"
                )
            return

    # -- writing (the caller holds the lock; ``meta`` is what it yielded) ----------------

    def tmp_dir(self, meta: str) -> str:
        return TablePaths.own(meta, "tmp")

    def ensure_partition_metadata(self, partition: str, ts: str) -> None:
        directory = os.path.join(self.base, partition) if partition else self.base
        path = os.path.join(directory, PARTITION_METADATA)
        if not os.path.exists(path):
            os.makedirs(directory, exist_ok=True)
            write_file(path, partition_metadata(ts, self.spec.partition_depth), tmp_dir=directory)

    def write_pending(self, meta: str, ts: str) -> None:
        """``T.commit.requested`` then ``T.inflight`` (each only if missing)."""
        for name, data in ((requested_name(ts), b""), (inflight_name(ts), EMPTY_COMMIT_METADATA)):
            path = os.path.join(meta, name)
            if not os.path.exists(path):
                write_file(path, data, tmp_dir=self.tmp_dir(meta))

    def complete(self, meta: str, ts: str, metadata: bytes) -> None:
        self.write_pending(meta, ts)
        if not write_file(
            os.path.join(meta, commit_name(ts)), metadata, tmp_dir=self.tmp_dir(meta)
        ):
            raise CommitError(f"Hudi table at {self.base}: {commit_name(ts)} already exists")
        shutil.rmtree(os.path.join(meta, MARKERS_DIR, ts), ignore_errors=True)

    def create(self, staging: str, ts: str, metadata: bytes) -> None:
        """Build ``.hoodie`` in ``staging`` with the first commit and rename it into place."""
        for entry in os.listdir(staging):  # debris of an earlier failed creation
            if entry == OWN_DIR:
                continue
            path = os.path.join(staging, entry)
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        tmp = self.tmp_dir(staging)
        write_file(
            os.path.join(staging, PROPERTIES),
            format_properties(table_properties(self.spec)),
            tmp_dir=tmp,
        )
        for directory in ("archived", ".aux", MARKERS_DIR):
            os.makedirs(os.path.join(staging, directory), exist_ok=True)
        self.write_pending(staging, ts)
        write_file(os.path.join(staging, commit_name(ts)), metadata, tmp_dir=tmp)
        fsync_dir(staging)
        try:
            os.rename(staging, self.paths.meta)
        except OSError as e:
            raise CommitError(
                f"cannot create Hudi table at {self.base}: {self.paths.meta} appeared "
                f"(another writer created the table?): {e}"
            ) from e
        fsync_dir(self.base)
        self.lock.moved(self.paths.meta)
        log.info("created Hudi table %s.%s at %s", self.spec.database, self.spec.name, self.base)

    def sweep_strays(self, meta: str, ts: str, tag: str, keep: set[str]) -> list[str]:
        """Delete files of instant ``ts`` (and ``tag``) not in ``keep`` (relative paths),
        in the directories the commit touches and those its markers name."""
        directories = {os.path.dirname(rel) for rel in keep}
        if not self.spec.partition_fields:
            directories.add("")
        marker_root = os.path.join(meta, MARKERS_DIR, ts)
        for root, _dirs, files in os.walk(marker_root):
            if files:  # markers of <dir>/<file> live in <marker root>/<dir>/
                rel_dir = os.path.relpath(root, marker_root)
                directories.add("" if rel_dir == "." else rel_dir)
        deleted = []
        for rel_dir in sorted(directories):
            directory = os.path.join(self.base, rel_dir) if rel_dir else self.base
            try:
                names = os.listdir(directory)
            except FileNotFoundError:
                continue
            for name in names:
                if ts not in name:  # cheap pre-filter: partitions hold every commit's files
                    continue
                m = BASE_FILE.match(name)
                rel = f"{rel_dir}/{name}" if rel_dir else name
                if (
                    m is None
                    or m.group("instant") != ts
                    or rel in keep
                    or (tag and file_tag(m.group("token")) != tag)
                ):
                    continue
                if remove(os.path.join(directory, name)):
                    deleted.append(rel)
        if deleted:
            log.warning(
                "instant %s: %d stray file(s) of failed task attempts deleted before the "
                "commit: %s",
                ts,
                len(deleted),
                ", ".join(deleted[:5]),
            )
        return deleted

    # -- bounded timeline (the caller holds the lock) -----------------------------------------

    def trimmed_through(self) -> str | None:
        """The newest instant time trimmed off the active timeline (None: none)."""
        try:
            with open(TablePaths.own(self.paths.meta, TRIMMED_RECORD), "rb") as f:
                text = f.read().decode().strip()
        except FileNotFoundError:
            return None
        return text or None

    def trim_limit(self) -> str | None:
        """Instants at or after this time are never trimmed: the oldest pending commit or
        instant of another action (None: no such instant)."""
        timeline = self._timeline()
        others = [i.time for i in timeline.instants() if i.action != "commit"]
        stops = [*timeline.pending, *others]
        return min(stops) if stops else None

    def trim(self, meta: str, times: Sequence[str]) -> None:
        """Remove completed commits ``times`` from the active timeline (see the module
        docstring for the order and what is kept)."""
        if not times:
            return
        through = max(times)
        self._delete_debris(meta, through)
        write_file(
            TablePaths.own(meta, TRIMMED_RECORD),
            through.encode(),
            tmp_dir=self.tmp_dir(meta),
            exclusive=False,
        )
        for ts in sorted(times):
            for name in (requested_name(ts), inflight_name(ts), commit_name(ts)):
                remove(os.path.join(meta, name))
            self._metadata.pop(ts, None)
        fsync_dir(meta)

    def _delete_debris(self, meta: str, through: str) -> None:
        """Files of instants up to ``through`` that never completed, found by their
        markers; they would turn visible once the timeline starts after them."""
        completed = set(self._timeline().completed)
        root = os.path.join(meta, MARKERS_DIR)
        try:
            marked = [ts for ts in os.listdir(root) if ts <= through and ts not in completed]
        except FileNotFoundError:
            return
        for ts in marked:
            marker_root = os.path.join(root, ts)
            for dirpath, _dirs, files in os.walk(marker_root):
                rel_dir = os.path.relpath(dirpath, marker_root)
                for marker in files:
                    name = marker.removesuffix(".marker.CREATE")
                    path = os.path.join(self.base, "" if rel_dir == "." else rel_dir, name)
                    if remove(path):
                        log.warning("deleted %s: staged by instant %s, never committed", path, ts)
            shutil.rmtree(marker_root, ignore_errors=True)

    def data_files(self) -> Iterator[tuple[str, str]]:
        """``(relative dir, file name)`` of every base file (dot-directories skipped)."""
        for root, dirs, files in os.walk(self.base):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            rel = os.path.relpath(root, self.base)
            for name in files:
                if BASE_FILE.match(name):
                    yield ("" if rel == "." else rel), name

    def write_context(self, instant: str, tag: str, target_bytes: int) -> HudiWriteContext:
        if self.exists():
            self.check()
            self.check_schema()
        return HudiWriteContext(
            spec=self.spec, instant=instant, tag=tag, target_file_size_bytes=target_bytes
        )


def _to_commit_checkpoint(checkpoint: Checkpoint) -> CommitCheckpoint:
    return CommitCheckpoint(
        pipeline_id=checkpoint.pipeline_id,
        incarnation=checkpoint.incarnation,
        batch_id=checkpoint.batch_id,
        epoch=checkpoint.epoch,
        ranges=checkpoint.ranges,
        committed_offsets=dict(checkpoint.committed),
        records=checkpoint.records,
        data_loss=checkpoint.data_loss or None,
        dead_letter_records=checkpoint.dead_letter_records,
        instant=checkpoint.instant,
        batch_end=dict(checkpoint.batch_end) if checkpoint.batch_end is not None else None,
    )


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


class HudiCommitter:
    """A Hudi table as the coordinator's commit target (``TableCommitter`` protocol)."""

    def __init__(self, table: HudiTable, max_commits: int = 30, trim_every: int = 10) -> None:
        self.hudi = table
        self.max_commits = max(2, max_commits)
        self.trim_every = max(1, trim_every)
        # Tables this one's commits follow (the dead-letter table of the same batches):
        # when T commits here, their pending T that staged nothing is discarded.
        self.followers: list[HudiCommitter] = []

    @property
    def spec(self) -> HudiTableSpec:
        return self.hudi.spec

    # -- the table's checkpoints ---------------------------------------------------------

    def _checkpoints(self, pipeline_id: str) -> Iterator[tuple[str, CommitCheckpoint]]:
        """This pipeline's checkpoints in completed commits, newest first."""
        for i, ts in enumerate(self.hudi.completed_commits()):
            if i >= _MAX_SCAN:
                return
            try:
                extra = self.hudi.extra_metadata(ts)
            except FileNotFoundError:
                continue
            if extra.get(PIPELINE_ID_KEY) != pipeline_id:
                continue
            cp = CommitCheckpoint.from_summary(extra)
            if cp is not None:
                yield ts, cp

    def latest_checkpoint(self, pipeline_id: str) -> CommitCheckpoint | None:
        return next((cp for _, cp in self._checkpoints(pipeline_id)), None)

    def _find_batch(
        self,
        pipeline_id: str,
        incarnation: str,
        batch_id: int,
        batch_end: Mapping[TopicPartition, int] | None,
    ) -> str | None:
        for ts, cp in self._checkpoints(pipeline_id):
            if cp.incarnation != incarnation:
                continue
            if cp.batch_id == batch_id:
                if batch_end is not None and cp.batch_end is not None:
                    mine = {(t, p): o for (t, p), o in batch_end.items()}
                    if {(t, p): o for (t, p), o in cp.batch_end.items()} != mine:
                        continue  # same id, other range: a restored older checkpoint
                return ts
            if cp.batch_id < batch_id:
                return None  # batches of one incarnation commit in order
        return None

    def is_committed(
        self,
        pipeline_id: str,
        incarnation: str,
        batch_id: int,
        batch_end: PartitionOffsets | None = None,
    ) -> bool:
        return self._find_batch(pipeline_id, incarnation, batch_id, batch_end) is not None

    def committed_offsets(self, pipeline_id: str) -> PartitionOffsets | None:
        cp = self.latest_checkpoint(pipeline_id)
        if cp is None:
            return None
        return PartitionOffsets(
            {TopicPartition(t, p): off for (t, p), off in cp.committed_offsets.items()}
        )

    def last_commit_time(self, pipeline_id: str) -> float | None:
        """Unix time of this pipeline's newest commit (the ``.commit`` file's mtime)."""
        for ts, _ in self._checkpoints(pipeline_id):
            with contextlib.suppress(FileNotFoundError):
                return os.path.getmtime(os.path.join(self.hudi.paths.meta, commit_name(ts)))
        return None

    def table(self) -> None:
        """No pyiceberg ``Table`` here: Iceberg-only callers (snapshot summaries in
        ``ops.metrics``) get None and skip."""
        return None

    # -- fencing -------------------------------------------------------------------------

    def _fence_path(self, meta: str, pipeline_id: str) -> str:
        return TablePaths.own(meta, "fence", pipeline_id)

    def _fence_epoch(self, meta: str, pipeline_id: str) -> int:
        path = self._fence_path(meta, pipeline_id)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return 0
        try:
            return int(decode_entry(path, data)["epoch"])
        except (CorruptEntry, KeyError, TypeError, ValueError) as e:
            raise CommitError(f"fence record {path} is unreadable: {e}") from None

    def _read_fence(self, pipeline_id: str) -> int:
        """The fence epoch without the lock (the record is replaced atomically)."""
        for _ in range(5):
            meta = self.hudi.paths.current_meta()
            try:
                return self._fence_epoch(meta, pipeline_id)
            except CommitError:
                if self.hudi.paths.current_meta() == meta:
                    raise
        return self._fence_epoch(self.hudi.paths.current_meta(), pipeline_id)

    def latest_epoch(self, pipeline_id: str) -> int | None:
        cp = self.latest_checkpoint(pipeline_id)
        known = max(self._read_fence(pipeline_id), cp.epoch if cp is not None else 0)
        return known or None

    def _owner_epoch(self, meta: str, pipeline_id: str) -> int:
        cp = self.latest_checkpoint(pipeline_id) if self.hudi.exists() else None
        return max(self._fence_epoch(meta, pipeline_id), cp.epoch if cp is not None else 0)

    def fence(self, pipeline_id: str, epoch: int, *, create: bool = False) -> None:
        """Record ``epoch`` as the lowest one allowed to commit for ``pipeline_id``.

        ``create`` is accepted for the protocol and not needed: the record is written
        under the commit lock also while the table does not exist (in the staging
        directory), so a zombie's table-creating commit is refused without creating an
        empty table first.
        """
        del create
        with self.hudi.locked() as meta:
            current = self._owner_epoch(meta, pipeline_id)
            if current > epoch:
                raise FencedError(
                    f"cannot fence Hudi table {self.hudi.base} at epoch {epoch}: pipeline "
                    f"{pipeline_id!r} is already at epoch {current}"
                )
            if current == epoch:
                return
            write_file(
                self._fence_path(meta, pipeline_id),
                encode_entry({"epoch": epoch, "pipeline_id": pipeline_id, "at": time.time()}),
                tmp_dir=self.hudi.tmp_dir(meta),
                exclusive=False,
            )
        log.info("fenced Hudi table %s for %s at epoch %d", self.hudi.base, pipeline_id, epoch)

    # -- staged files --------------------------------------------------------------------

    def describe(self, descriptor: bytes) -> tuple[str, int, int]:
        d = describe(descriptor)
        return os.path.join(self.hudi.base, d["path"]), int(d["size"]), int(d["records"])

    def file_size(self, path: str) -> int | None:
        try:
            return os.stat(path).st_size
        except FileNotFoundError:
            return None

    def _completed(self, ts: str) -> bool:
        if os.path.exists(os.path.join(self.hudi.paths.meta, commit_name(ts))):
            return True
        trimmed = self.hudi.trimmed_through()
        return trimmed is not None and ts <= trimmed  # trimmed off the timeline, committed

    def delete_files(self, paths: Iterable[str]) -> list[str]:
        deleted = []
        for path in paths:
            m = BASE_FILE.match(os.path.basename(path))
            if m is not None and self._completed(m.group("instant")):
                log.error(
                    "not deleting %s: instant %s is a completed commit of %s",
                    path,
                    m.group("instant"),
                    self.hudi.base,
                )
                continue
            if remove(path):
                deleted.append(path)
        return deleted

    def orphan_files(self, write_id: str) -> list[str]:
        """Base files of instant ``write_id`` (``<ts>[-<tag>]``) anywhere in the table."""
        try:
            ts, tag = parse_write_id(write_id)
        except ValueError:
            return []
        out = []
        for rel_dir, name in self.hudi.data_files():
            m = BASE_FILE.match(name)
            assert m is not None
            if m.group("instant") == ts and (not tag or file_tag(m.group("token")) == tag):
                out.append(os.path.join(self.hudi.base, rel_dir, name))
        return out

    # -- the instant's own state -----------------------------------------------------------

    def begin(self, instant: str) -> None:
        """``T.commit.requested`` and ``T.inflight`` before any worker stages a file of T,
        so Hudi readers never see staged files (no-op while the table does not exist)."""
        with self.hudi.locked() as meta:
            if not self.hudi.exists():
                return
            self.hudi.check()
            for ts in self.hudi.pending_times():
                if ts < instant and not self.hudi.has_markers(ts):
                    # an earlier instant that staged nothing here (its batch had no rows
                    # for this table, or a crash came before the follower's release)
                    self.hudi.discard_pending(meta, ts)
            if os.path.exists(os.path.join(meta, commit_name(instant))):
                raise CommitError(f"Hudi table {self.hudi.base}: instant {instant} exists")
            if not os.path.exists(os.path.join(meta, requested_name(instant))):
                latest = self.hudi.latest_instant_time()
                if latest is not None and latest >= instant:
                    raise CommitError(
                        f"Hudi table {self.hudi.base}: instant {instant} is not above the "
                        f"timeline's latest instant {latest}"
                    )
            self.hudi.write_pending(meta, instant)

    def abort(self, instant: str) -> None:
        """After the coordinator deleted the instant's files: ``.inflight``, then
        ``.commit.requested``, then the markers (never those of a completed commit)."""
        with self.hudi.locked() as meta:
            if not self.hudi.exists():
                for name in os.listdir(meta):  # debris of a failed first commit
                    if name.startswith(f"{instant}."):
                        remove(os.path.join(meta, name))
                return
            if self._completed(instant):
                log.warning("instant %s is a completed commit: not aborted", instant)
                return
            self.hudi.discard_pending(meta, instant)

    def release(self, instant: str) -> None:
        """The batch of ``instant`` committed elsewhere (the main table) and staged
        nothing here: drop this table's pending ``instant`` (begun for nothing)."""
        with self.hudi.locked() as meta:
            if (
                self.hudi.exists()
                and not self._completed(instant)
                and not self.hudi.has_markers(instant)
            ):
                self.hudi.discard_pending(meta, instant)

    # -- commit --------------------------------------------------------------------------

    def commit(self, files: list[bytes], checkpoint: Checkpoint) -> None:
        """One Hudi commit of ``files`` carrying ``checkpoint``; see the module docstring."""
        started = time.monotonic()
        descs = [describe(f) for f in files]
        instants = {str(d["instant"]) for d in descs}
        if checkpoint.instant is not None:
            instants.add(checkpoint.instant)
        if len(instants) > 1:
            raise CommitError(f"files of several instants in one commit: {sorted(instants)}")
        tags = set()
        for d in descs:
            m = BASE_FILE.match(str(d["fileName"]))
            if m is None:
                raise CommitError(f"staged file {d['fileName']!r} is not a Hudi base file name")
            tags.add(file_tag(m.group("token")))
        tag = tags.pop() if len(tags) == 1 else ""
        cp = _to_commit_checkpoint(checkpoint)
        what = f"batch {cp.batch_id} ({cp.incarnation}) of {cp.pipeline_id}"
        with self.hudi.locked() as meta:
            exists = self.hudi.exists()
            if exists:
                self.hudi.check()
                done = self._find_batch(cp.pipeline_id, cp.incarnation, cp.batch_id, cp.batch_end)
                if done is not None:
                    log.info("%s is already Hudi commit %s: not committed again", what, done)
                    return
            owner = self._owner_epoch(meta, cp.pipeline_id)
            if owner > cp.epoch:
                raise FencedError(
                    f"Hudi table {self.hudi.base}: pipeline {cp.pipeline_id!r} is owned by "
                    f"writer epoch {owner}; this writer holds epoch {cp.epoch} and must stop"
                )
            ts = instants.pop() if instants else self._mint()
            if cp.instant is None:
                cp = dataclasses.replace(cp, instant=ts)
            for d in descs:
                path = os.path.join(self.hudi.base, d["path"])
                size = self.file_size(path)
                if size != int(d["size"]):
                    raise CommitError(
                        f"{what}: staged file {path} is missing or changed "
                        f"(size {size}, staged {d['size']})"
                    )
            keep = {str(d["path"]) for d in descs}
            self.hudi.sweep_strays(meta, ts, tag, keep)
            for partition in sorted({str(d["partitionPath"]) for d in descs}):
                self.hudi.ensure_partition_metadata(partition, ts)
            extra = cp.to_summary()
            extra.update(carry_forward(self._summaries() if exists else (), cp.pipeline_id))
            metadata = commit_metadata_json(descs, self.spec.avro_schema, extra)
            if exists:
                self.hudi.complete(meta, ts, metadata)
                self._maybe_trim(meta)
            else:
                self.hudi.create(meta, ts, metadata)
        for follower in self.followers:
            follower.release(ts)
        log.info(
            "%s: Hudi commit %s with %d files, %d records in %s (%.3fs)",
            what,
            ts,
            len(descs),
            sum(int(d["records"]) for d in descs),  # this table's, not the batch's
            self.hudi.base,
            time.monotonic() - started,
        )

    def _mint(self) -> str:
        return next_instant_time(self.hudi.latest_instant_time())

    # -- bounded timeline ------------------------------------------------------------------

    def _summaries(self) -> Iterator[dict[str, str]]:
        """``extraMetadata`` of the completed commits, newest first."""
        for ts in self.hudi.completed_commits():
            with contextlib.suppress(FileNotFoundError):
                yield self.hudi.extra_metadata(ts)

    def _maybe_trim(self, meta: str) -> None:
        """Every ``trim_every`` commits beyond ``max_commits``: trim the oldest completed
        commits (see the module docstring). Never fails the batch, which is committed."""
        completed = self.hudi.completed_commits()
        if len(completed) < self.max_commits + self.trim_every:
            return
        try:
            limit = self.hudi.trim_limit()
            commits = [(ts, self.hudi.extra_metadata(ts)) for ts in completed]
            old = [
                ts for ts in forgettable(commits, self.max_commits) if limit is None or ts < limit
            ]
            if old:
                self.hudi.trim(meta, old)
                log.info("%s: %d old commits left the active timeline", self.hudi.base, len(old))
        except Exception as e:  # housekeeping: retried after more commits
            log.warning("%s: timeline trim failed, retried later: %s", self.hudi.base, e)

    # -- workers -------------------------------------------------------------------------

    def write_context(self, write_id: str, target_bytes: int) -> HudiWriteContext:
        """What the workers need to stage files of ``write_id`` (``<ts>[-<tag>]``; any
        other id -- at-least-once mode -- gets a fresh instant time)."""
        try:
            ts, tag = parse_write_id(write_id)
        except ValueError:
            ts, tag = self._mint(), ""
        return self.hudi.write_context(ts, tag, target_bytes)
