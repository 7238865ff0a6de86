"""Driver side: a Hudi copy-on-write table's timeline reads, creation, commit files and
rollback (:class:`HudiTable`). The coordinator's ``TableCommitter`` over it is
:class:`~pipeline.formats.hudi.committer.HudiCommitter`; the ``.hoodie`` instant files are
indexed by :mod:`pipeline.formats.hudi.timeline`, named by :mod:`pipeline.formats.hudi.instant`;
which tables it may write: :mod:`pipeline.formats.hudi.compatibility`; the bounded
timeline (trimming, and what ``.ingest/trimmed`` records): :mod:`pipeline.formats.hudi.trim`.
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
from pipeline.errors import CommitError
from pipeline.formats.hudi.compatibility import check_writable
from pipeline.formats.hudi.instant import Action, Instant, commit_name, instant_files
from pipeline.formats.hudi.layout import (
    BASE_FILE,
    EMPTY_COMMIT_METADATA,
    LOCK_TIMEOUT_S,
    MARKERS_DIR,
    OWN_DIR,
    PARTITION_METADATA,
    PROPERTIES,
    TableLock,
    TablePaths,
    file_tag,
    format_properties,
    parse_properties,
    partition_metadata,
    table_properties,
)
from pipeline.formats.hudi.schema import HudiTableSpec, columns_of_avro
from pipeline.formats.hudi.storage import TableFiles, table_files
from pipeline.formats.hudi.timeline import Timeline
from pipeline.formats.hudi.writer import HudiWriteContext

log = logging.getLogger(__name__)

__all__ = ["HudiTable"]

T = TypeVar("T")

SCHEMA_KEY = "schema"  # extraMetadata key of the Avro schema (Hudi's own)
_MAX_CACHED = 4000  # instant metadata documents kept in memory (immutable files)
_TRACKED = (Action.COMMIT, Action.REPLACE_COMMIT)  # ingest commits and compactions
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
        self._listing = Timeline()  # the last listing of ``.hoodie``, indexed
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

    def read_timeline(self, query: Callable[[Timeline], T]) -> T:
        """``query`` over the timeline as of one listing of ``.hoodie`` now (empty: no
        table); it runs under the index's lock and must return a copy."""
        names = self.files.listdir(self.paths.meta) if self.exists() else None
        with self._listing_lock:
            self._listing.update(names or [])
            return query(self._listing)

    def instants(self) -> list[Instant]:
        """Every instant file in ``.hoodie`` (empty when the table does not exist)."""
        return self.read_timeline(lambda t: t.instants())

    def completed_commits(self) -> list[str]:
        """Times of completed commits, newest first (replacecommits not included)."""
        return self.read_timeline(lambda t: t.completed[::-1])

    def completed_replacecommits(self) -> list[str]:
        """Times of completed replacecommits (compactions), oldest first."""
        return self.read_timeline(lambda t: list(t.replaced))

    def pending_replacecommits(self) -> list[str]:
        """Replacecommits with requested/inflight files and no completed one, oldest first."""
        return self.read_timeline(lambda t: sorted(t.pending_replace))

    def pending_times(self) -> list[str]:
        """Instants with requested/inflight files and no completed commit, oldest first."""
        return self.read_timeline(lambda t: sorted(t.pending))

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
        requested, inflight, _ = instant_files(ts)
        for name in names or (inflight, requested):
            if self.files.delete(f"{meta}/{name}"):
                self.files.sync_dir(meta)
        self.files.remove_tree(f"{meta}/{MARKERS_DIR}/{ts}")

    def latest_instant_time(self) -> str | None:
        return self.read_timeline(lambda t: t.latest())

    def commit_metadata(self, ts: str) -> dict[str, Any]:
        """The JSON metadata of completed commit ``ts`` (files are immutable: cached)."""
        return self._instant_metadata(commit_name(ts))

    def replace_metadata(self, ts: str) -> dict[str, Any]:
        """The JSON metadata of completed replacecommit ``ts`` (cached)."""
        return self._instant_metadata(instant_files(ts, Action.REPLACE_COMMIT)[2])

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

    def forget_metadata(self, name: str) -> None:
        """Drop the cached metadata of instant file ``name`` (deleted by a trim)."""
        self._metadata.pop(name, None)

    def extra_metadata(self, ts: str) -> dict[str, str]:
        extra = self.commit_metadata(ts).get("extraMetadata") or {}
        return {str(k): str(v) for k, v in extra.items() if v is not None}

    def properties(self) -> dict[str, str] | None:
        data = self.files.read(f"{self.paths.meta}/{PROPERTIES}")
        return None if data is None else parse_properties(data.decode("utf-8"))

    def check(self) -> None:
        """Refuse a table this writer must not write (CommitError / ConfigError)."""
        check_writable(self.properties(), self.spec, f"Hudi table at {self.base}")

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
        requested, inflight, _ = instant_files(ts)
        for name, data in ((requested, b""), (inflight, EMPTY_COMMIT_METADATA)):
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

    # -- bounded timeline (pipeline.formats.hudi.trim) ------------------------------------

    def trimmed_through(self) -> str | None:
        """The newest instant time trimmed off the active timeline (None: none)."""
        data = self.files.read(TablePaths.own(self.paths.meta, TRIMMED_RECORD))
        text = data.decode().strip() if data is not None else ""
        return text or None

    def trim_limit(self) -> str | None:
        """Instants at or after this time are never trimmed: the oldest pending commit or
        replacecommit, or instant of another action -- except a completed ``clean`` or
        ``rollback`` of Hudi's own (None: no such instant)."""

        def stops(t: Timeline) -> list[str]:
            done = set(t.completed_housekeeping())
            others = [
                i.time
                for i in t.instants()
                if i.action not in _TRACKED and (i.time, i.action) not in done
            ]
            return [*t.pending, *t.pending_replace, *others]

        found = self.read_timeline(stops)
        return min(found) if found else None

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
