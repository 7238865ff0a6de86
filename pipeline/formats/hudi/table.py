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
import posixpath
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
    requested_name,
    table_properties,
)
from pipeline.formats.hudi.schema import HudiTableSpec
from pipeline.formats.hudi.storage import TableFiles, table_files
from pipeline.formats.hudi.timeline import HudiInstant, _Timeline
from pipeline.formats.hudi.writer import HudiWriteContext

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
        self.files: TableFiles = table_files(spec.base_path, spec.s3)
        self.paths = TablePaths(self.files)
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
        names = self.files.listdir(self.paths.meta) if self.exists() else None
        self._listing.update(names or [])
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
        return (
            next(self.files.files_under(f"{self.paths.meta}/{MARKERS_DIR}/{ts}"), None) is not None
        )

    def discard_pending(self, meta: str, ts: str) -> None:
        """Forget pending instant ``ts`` that staged nothing: ``.inflight``, then
        ``.commit.requested``, then its (empty) marker directory."""
        for name in (inflight_name(ts), requested_name(ts)):
            if self.files.delete(f"{meta}/{name}"):
                self.files.sync_dir(meta)
        self.files.remove_tree(f"{meta}/{MARKERS_DIR}/{ts}")

    def latest_instant_time(self) -> str | None:
        return self._timeline().latest()

    def commit_metadata(self, ts: str) -> dict[str, Any]:
        """The JSON metadata of completed commit ``ts`` (files are immutable: cached)."""
        cached = self._metadata.get(ts)
        if cached is not None:
            return cached
        rel = f"{self.paths.meta}/{commit_name(ts)}"
        data = self.files.read(rel)
        if data is None:
            raise FileNotFoundError(self.files.uri(rel))
        path = self.files.uri(rel)
        doc = json.loads(data)
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
        data = self.files.read(f"{self.paths.meta}/{PROPERTIES}")
        return None if data is None else parse_properties(data.decode("utf-8"))

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
        self.files.write(TablePaths.own(meta, TRIMMED_RECORD), through.encode())
        for ts in sorted(times):
            for name in (requested_name(ts), inflight_name(ts), commit_name(ts)):
                self.files.delete(f"{meta}/{name}")
            self._metadata.pop(ts, None)
        self.files.sync_dir(meta)

    def _delete_debris(self, meta: str, through: str) -> None:
        """Files of instants up to ``through`` that never completed, found by their
        markers; they would turn visible once the timeline starts after them."""
        completed = set(self._timeline().completed)
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
