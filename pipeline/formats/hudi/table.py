"""Driver side: a Hudi copy-on-write table's timeline reads, creation, commit files,
rollback and trimming (:class:`HudiTable`). The coordinator's ``TableCommitter`` over it is
:class:`~pipeline.formats.hudi.committer.HudiCommitter`; the ``.hoodie`` instant files are
indexed by :mod:`pipeline.formats.hudi.timeline`.

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
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Iterator, Sequence
from typing import Any

from pipeline.errors import CommitError, ConfigError
from pipeline.formats.hudi.layout import (
    BASE_FILE,
    EMPTY_COMMIT_METADATA,
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
    inflight_name,
    parse_properties,
    partition_metadata,
    remove,
    requested_name,
    table_properties,
)
from pipeline.formats.hudi.schema import HudiTableSpec
from pipeline.formats.hudi.timeline import HudiInstant, _Timeline
from pipeline.formats.hudi.writer import HudiWriteContext
from pipeline.storage.atomic import fsync_dir, write_file

log = logging.getLogger(__name__)

__all__ = ["HudiTable"]

SCHEMA_KEY = "schema"  # extraMetadata key of the Avro schema (Hudi's own)
_MAX_SCAN = 1000  # completed commits searched for a pipeline's checkpoint / a batch
TRIMMED_RECORD = "trimmed"  # .hoodie/.ingest/trimmed: the newest trimmed instant time


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
