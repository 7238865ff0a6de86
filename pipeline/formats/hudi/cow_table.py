"""Driver side: a Hudi copy-on-write table's timeline reads, creation, commit files,
rollback and trimming (:class:`HudiTable`). The coordinator's ``TableCommitter`` over it is
:class:`~pipeline.formats.hudi.committer.HudiCommitter`; the ``.hoodie`` instant files are
indexed by :mod:`pipeline.formats.hudi.timeline`.

Bounded timeline (so commit latency stays flat; :mod:`pipeline.commit.history`): every
commit carries ``ingest.ranges-before`` / ``ingest.data-loss-before`` in its
``extraMetadata``; every ``trim_every`` commits, the completed commits beyond the newest
``max_commits`` leave the active timeline -- their instant files are deleted, oldest first,
``.commit.requested`` and ``.inflight`` before ``.commit`` (a crash leaves only completed
instants). Their data files stay and stay visible: Hudi readers treat files older than the
first active instant as committed (docs/hudi.md, "Reader facts the writer relies on";
checked with hudi-rs in the tests). No Avro archive is written, so time travel and
incremental reads reach back only to the oldest retained commit. Never trimmed: anything at
or after the oldest pending instant or instant of another action -- a completed ``clean`` or
``rollback`` of Hudi's own tools excepted: it leaves with the trim, as Hudi's archiver would
move it; commits of a pipeline whose oldest retained commit lacks the carried keys. Before
the timeline start moves past an instant time, files of instants there that never completed
(markers without a completed commit: a zombie's staging after a rollback) are deleted --
they would become visible.
``.ingest/trimmed`` records the newest trimmed time first, so files of a trimmed commit are
never mistaken for debris. Completed replacecommits (compactions) at or before the newest
trimmed commit leave the timeline with it, after the base files of the file groups they
replaced are deleted: once a replacecommit is gone, readers would read those files again
(checked with hudi-rs in tests/test_hudi_maintenance.py). A pending replacecommit is never
trimmed past.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import posixpath
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from pipeline.columns import Column
from pipeline.columns.evolution import Change, Rules, plan_changes
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
    action_names,
    commit_name,
    file_tag,
    format_properties,
    inflight_name,
    parse_properties,
    partition_metadata,
    replace_names,
    requested_name,
    table_properties,
)
from pipeline.formats.hudi.schema import HudiTableSpec, columns_of_avro
from pipeline.formats.hudi.storage import TableFiles, table_files
from pipeline.formats.hudi.timeline import HudiInstant, _Timeline
from pipeline.formats.hudi.writer import HudiWriteContext

log = logging.getLogger(__name__)

__all__ = ["HudiTable"]

T = TypeVar("T")

SCHEMA_KEY = "schema"  # extraMetadata key of the Avro schema (Hudi's own)
_MAX_CACHED = 4000  # instant metadata documents kept in memory (immutable files)
TRIMMED_RECORD = "trimmed"  # .hoodie/.ingest/trimmed: the newest trimmed instant time


class HudiTable:
    """One native Hudi COW table: reads of its timeline, and the writes the committer
    performs while holding the table lock."""

    def __init__(self, spec: HudiTableSpec, lock_timeout_s: float = LOCK_TIMEOUT_S) -> None:
        self.spec = spec
        self.files: TableFiles = table_files(spec.base_path, spec.s3)
        self.paths = TablePaths(self.files)
        self.lock = TableLock.of(self.paths)
        self.lock_timeout_s = lock_timeout_s
        self._metadata: dict[str, dict[str, Any]] = {}
        self._listing = _Timeline()  # the last listing of ``.hoodie``, indexed
        # the index is updated by every read; the driver's background maintenance reads
        # from another thread than the coordinator's
        self._listing_lock = threading.Lock()

    def locked(self) -> contextlib.AbstractContextManager[str]:
        """Hold the table lock; yields the meta directory to write in."""
        return self.lock.hold(self.lock_timeout_s)

    @property
    def base(self) -> str:
        return self.paths.base

    def exists(self) -> bool:
        return self.paths.exists()

    # -- reading the timeline ----------------------------------------------------------

    def _read(self, query: Callable[[_Timeline], T]) -> T:
        """``query`` over the timeline as of one listing of ``.hoodie`` now (empty: no
        table); it runs under the index's lock and must return a copy."""
        names = self.files.listdir(self.paths.meta) if self.exists() else None
        with self._listing_lock:
            self._listing.update(names or [])
            return query(self._listing)

    def instants(self) -> list[HudiInstant]:
        """Every instant file in ``.hoodie`` (empty when the table does not exist)."""
        return self._read(lambda t: t.instants())

    def completed_commits(self) -> list[str]:
        """Times of completed commits, newest first (replacecommits not included)."""
        return self._read(lambda t: t.completed[::-1])

    def completed_replacecommits(self) -> list[str]:
        """Times of completed replacecommits (compactions), oldest first."""
        return self._read(lambda t: list(t.replaced))

    def pending_replacecommits(self) -> list[str]:
        """Replacecommits with requested/inflight files and no completed one, oldest first."""
        return self._read(lambda t: sorted(t.pending_replace))

    def pending_times(self) -> list[str]:
        """Instants with requested/inflight files and no completed commit, oldest first."""
        return self._read(lambda t: sorted(t.pending))

    def has_markers(self, ts: str) -> bool:
        """Whether a worker staged (or began staging) a file of ``ts`` in this table."""
        return (
            next(self.files.files_under(f"{self.paths.meta}/{MARKERS_DIR}/{ts}"), None) is not None
        )

    def discard_pending(self, meta: str, ts: str, names: Sequence[str] | None = None) -> None:
        """Forget pending instant ``ts`` whose files are gone (or were never staged): its
        inflight file, then its requested file (``names``, in that order; default: those
        of a commit), then its marker directory. The one rollback of instant files, for
        ingest instants and compactions alike."""
        for name in names or (inflight_name(ts), requested_name(ts)):
            if self.files.delete(f"{meta}/{name}"):
                self.files.sync_dir(meta)
        self.files.remove_tree(f"{meta}/{MARKERS_DIR}/{ts}")

    def latest_instant_time(self) -> str | None:
        return self._read(lambda t: t.latest())

    def commit_metadata(self, ts: str) -> dict[str, Any]:
        """The JSON metadata of completed commit ``ts`` (files are immutable: cached)."""
        return self._instant_metadata(commit_name(ts))

    def replace_metadata(self, ts: str) -> dict[str, Any]:
        """The JSON metadata of completed replacecommit ``ts`` (cached)."""
        return self._instant_metadata(replace_names(ts)[2])

    def _instant_metadata(self, name: str) -> dict[str, Any]:
        cached = self._metadata.get(name)
        if cached is not None:
            return cached
        rel = f"{self.paths.meta}/{name}"
        data = self.files.read(rel)
        if data is None:
            raise FileNotFoundError(self.files.uri(rel))
        path = self.files.uri(rel)
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise CommitError(f"{path} is not a JSON object")
        if len(self._metadata) > _MAX_CACHED:
            self._metadata.clear()
        self._metadata[name] = doc
        return doc

    def extra_metadata(self, ts: str) -> dict[str, str]:
        extra = self.commit_metadata(ts).get("extraMetadata") or {}
        return {str(k): str(v) for k, v in extra.items() if v is not None}

    def properties(self) -> dict[str, str] | None:
        data = self.files.read(f"{self.paths.meta}/{PROPERTIES}")
        return None if data is None else parse_properties(data.decode("utf-8"))

    def check(self) -> None:
        """Refuse a table this writer must not write (CommitError / ConfigError)."""
        props = self.properties()
        where = f"Hudi table at {self.base}"
        if props is None:
            raise CommitError(f"{where}: .hoodie exists but has no {PROPERTIES}")
        version = props.get("hoodie.table.version", "")
        if version.isdigit() and int(version) >= 8:
            raise ConfigError(
                f"{where} was written by Hudi's own writer (table version {version}); the "
                "native writer writes version 6 tables only: keep sink.hudi.writer: spark "
                "for it, or write a new table"
            )
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
            # Java readers would list files from the metadata table and miss ours; a Hudi
            # table service run with the metadata table off drops it (docs/hudi.md)
            problems.append(
                "the metadata table is enabled (hoodie.table.metadata.partitions): run one "
                "Hudi table service on it with hoodie.metadata.enable=false to drop it"
            )
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

    def current_columns(self) -> tuple[Column, ...] | None:
        """The columns of the newest commit's schema (None: no commit carries one)."""
        for ts in self.completed_commits():
            text = self.extra_metadata(ts).get(SCHEMA_KEY)
            if text is not None:
                return columns_of_avro(json.loads(text), self.spec.columns)
        return None

    def schema_changes(self) -> list[Change]:
        """What the configured columns change in the newest commit's (none: no commit
        yet). The next commit carries the new schema, so that commit applies them.
        Refused (SchemaChangeRefused) where Hudi's readers would not follow: renames
        (they need schema-on-read) and decimals widened to another Avro fixed size."""
        current = self.current_columns()
        if current is None:
            return []
        rules = Rules(f"Hudi table at {self.base}", renames=False, decimal_widening=False)
        return plan_changes(current, self.spec.columns, rules)

    def check_schema(self) -> None:
        """Refuse a write whose columns the table may not take (see ``schema_changes``)."""
        self.schema_changes()

    # -- writing (the caller holds the lock; ``meta`` is what it yielded) ----------------

    def ensure_partition_metadata(self, partition: str, ts: str) -> None:
        rel = f"{partition}/{PARTITION_METADATA}" if partition else PARTITION_METADATA
        if self.files.stat(rel) is None:
            self.files.create(rel, partition_metadata(ts, self.spec.partition_depth))

    def write_pending(self, meta: str, ts: str) -> None:
        """``T.commit.requested`` then ``T.inflight`` (each only if missing)."""
        for name, data in ((requested_name(ts), b""), (inflight_name(ts), EMPTY_COMMIT_METADATA)):
            self.files.create(f"{meta}/{name}", data)

    def complete(self, meta: str, ts: str, metadata: bytes) -> None:
        """``T.commit`` (after the pending files): the commit point. On an object store,
        where the commit slot is the commit point, an identical existing ``T.commit`` is
        the same commit written by another materializer."""
        self.write_pending(meta, ts)
        rel = f"{meta}/{commit_name(ts)}"
        if not self.files.create(rel, metadata) and (
            self.files.exclusive_lock or self.files.read(rel) != metadata
        ):
            raise CommitError(f"Hudi table at {self.base}: {commit_name(ts)} already exists")
        self.files.remove_tree(f"{meta}/{MARKERS_DIR}/{ts}")

    def create(self, staging: str, ts: str, metadata: bytes) -> None:
        """Make the table appear with its first commit: locally ``.hoodie`` is built in
        ``staging`` and renamed into place; on an object store the instant files are
        written into ``.hoodie`` and ``hoodie.properties`` last."""
        files = self.files
        if not files.exclusive_lock:
            self.complete(staging, ts, metadata)
            props = format_properties(table_properties(self.spec))
            if not files.create(f"{staging}/{PROPERTIES}", props):
                self.check()  # another writer created it meanwhile: must be compatible
            log.info(
                "created Hudi table %s.%s at %s", self.spec.database, self.spec.name, self.base
            )
            return
        root = files.uri(staging)
        for entry in files.listdir(staging) or []:  # debris of an earlier failed creation
            if entry != OWN_DIR:
                files.remove_tree(f"{staging}/{entry}")
                files.delete(f"{staging}/{entry}")
        files.write(f"{staging}/{PROPERTIES}", format_properties(table_properties(self.spec)))
        for directory in ("archived", ".aux", MARKERS_DIR):
            os.makedirs(posixpath.join(root, directory), exist_ok=True)
        self.write_pending(staging, ts)
        files.write(f"{staging}/{commit_name(ts)}", metadata)
        files.sync_dir(staging)
        try:
            os.rename(root, files.uri(self.paths.meta))
        except OSError as e:
            raise CommitError(
                f"cannot create Hudi table at {self.base}: {self.paths.meta} appeared "
                f"(another writer created the table?): {e}"
            ) from e
        files.sync_dir("")
        self.lock.moved(self.paths.meta)
        log.info("created Hudi table %s.%s at %s", self.spec.database, self.spec.name, self.base)

    def sweep_strays(self, meta: str, ts: str, tag: str, keep: set[str]) -> list[str]:
        """Delete files of instant ``ts`` (and ``tag``) not in ``keep`` (relative paths),
        in the directories the commit touches and those its markers name.

        On an object store, once the table exists, only the files the markers name: a
        worker writes the marker before the file, so they cover every staged file, and
        listing whole partitions (every commit's files) would cost a LIST per 1,000."""
        marker_root = f"{meta}/{MARKERS_DIR}/{ts}"
        # markers of <dir>/<file> live in <marker root>/<dir>/<file>.marker.CREATE
        marked = [
            m[len(marker_root) + 1 :].removesuffix(".marker.CREATE")
            for m in self.files.files_under(marker_root)
        ]
        candidates: list[str] = []
        if not self.files.exclusive_lock and self.exists():
            candidates = marked
        else:
            directories = {posixpath.dirname(rel) for rel in [*keep, *marked]}
            if not self.spec.partition_fields:
                directories.add("")
            for rel_dir in sorted(directories):
                for name in self.files.listdir(rel_dir) or []:
                    if ts in name:  # cheap pre-filter: partitions hold every commit's files
                        candidates.append(f"{rel_dir}/{name}" if rel_dir else name)
        deleted = []
        for rel in candidates:
            m = BASE_FILE.match(posixpath.basename(rel))
            if (
                m is None
                or m.group("instant") != ts
                or rel in keep
                or (tag and file_tag(m.group("token")) != tag)
            ):
                continue
            if self.files.delete(rel):
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
        data = self.files.read(TablePaths.own(self.paths.meta, TRIMMED_RECORD))
        text = data.decode().strip() if data is not None else ""
        return text or None

    def trim_limit(self) -> str | None:
        """Instants at or after this time are never trimmed: the oldest pending commit or
        replacecommit, or instant of another action -- except a completed ``clean`` or
        ``rollback`` of Hudi's own (None: no such instant)."""

        def stops(t: _Timeline) -> list[str]:
            done = set(t.completed_housekeeping())
            others = [
                i.time
                for i in t.instants()
                if i.action not in ("commit", "replacecommit") and (i.time, i.action) not in done
            ]
            return [*t.pending, *t.pending_replace, *others]

        found = self._read(stops)
        return min(found) if found else None

    def trim(self, meta: str, times: Sequence[str]) -> None:
        """Remove completed commits ``times`` -- and the completed replacecommits up to the
        newest of them -- from the active timeline (see the module docstring for the order
        and what is kept)."""
        if not times:
            return
        through = max(times)
        replaces = [ts for ts in self.completed_replacecommits() if ts <= through]
        for ts in replaces:  # before the replacecommit goes: readers would see them again
            self._delete_replaced(ts)
        self._delete_debris(meta, through)
        self.files.write(TablePaths.own(meta, TRIMMED_RECORD), through.encode())
        doomed = [(ts, (requested_name(ts), inflight_name(ts), commit_name(ts))) for ts in times]
        doomed += [(ts, replace_names(ts)) for ts in replaces]
        doomed += [
            (ts, action_names(ts, action))
            for ts, action in self._read(lambda t: t.completed_housekeeping())
            if ts <= through
        ]
        for _, names in sorted(doomed):
            for name in names:
                self.files.delete(f"{meta}/{name}")
                self._metadata.pop(name, None)
        self.files.sync_dir(meta)

    def _delete_replaced(self, ts: str) -> None:
        """Base files of the file groups completed replacecommit ``ts`` replaced."""
        replaced = self.replace_metadata(ts).get("partitionToReplaceFileIds") or {}
        for partition, file_ids in replaced.items():
            ids = set(file_ids or ())
            for name in self.files.listdir(partition) or []:
                m = BASE_FILE.match(name)
                if m is not None and m.group("file_id") in ids:
                    self.files.delete(f"{partition}/{name}" if partition else name)

    def _delete_debris(self, meta: str, through: str) -> None:
        """Files of instants up to ``through`` that never completed, found by their
        markers; they would turn visible once the timeline starts after them."""
        completed = self._read(lambda t: {*t.completed, *t.replaced})
        root = f"{meta}/{MARKERS_DIR}"
        listed = self.files.listdir(root) or []
        for ts in [ts for ts in listed if ts <= through and ts not in completed]:
            marker_root = f"{root}/{ts}"
            for marker in list(self.files.files_under(marker_root)):
                rel = marker[len(marker_root) + 1 :].removesuffix(".marker.CREATE")
                if self.files.delete(rel):
                    log.warning(
                        "deleted %s: staged by instant %s, never committed", self.files.uri(rel), ts
                    )
            self.files.remove_tree(marker_root)

    def data_files(self) -> Iterator[tuple[str, str]]:
        """``(relative dir, file name)`` of every base file (dot-directories skipped)."""
        for rel in self.files.files_under(""):
            rel_dir, name = posixpath.split(rel)
            if BASE_FILE.match(name):
                yield rel_dir, name

    def write_context(self, instant: str, tag: str, target_bytes: int) -> HudiWriteContext:
        if self.exists():
            self.check()
            self.check_schema()
        return HudiWriteContext(
            spec=self.spec, instant=instant, tag=tag, target_file_size_bytes=target_bytes
        )
