"""Files of a Hudi table: names, properties, the meta directory and the table lock
(the operations on them: :mod:`pipeline.formats.hudi.storage`).

Layout of a table at ``<base>``::

    <base>/.hoodie/                     the table: exists complete or not at all
        hoodie.properties               version 6, layout 1, COW, no metadata table
        <ts>.commit.requested           empty
        <ts>.inflight                   minimal JSON commit metadata
        <ts>.commit                     JSON commit metadata: write stats, schema, checkpoint
        <ts>.replacecommit[.requested|.inflight]   a compaction (compaction.py)
        (instant file names: pipeline.formats.hudi.instant)
        .temp/<ts>/<partition>/<file>.marker.CREATE   markers while <ts> is pending
        archived/  .aux/                created empty, as Hudi does
        .ingest/                        ours; Hudi readers never look inside .hoodie/
            lock                        flock()ed for commits, fences, journal writes
            fence/<pipeline id>         the highest writer epoch fenced (checksummed JSON)
            journal/<pipeline id>/      the instant journal (main table only)
            tmp/                        temp files renamed into place
    <base>/.hoodie.init/                the same before the first commit (no table yet)
    <base>/<f1>=<v1>/.hoodie_partition_metadata
    <base>/<f1>=<v1>/<fileId>_<writeToken>_<ts>.parquet

Atomic creation: until the first commit, ``.hoodie`` does not exist and the lock, fence
records and journal live in ``.hoodie.init``. The first commit writes
``hoodie.properties`` and the instant files into it and renames it to ``.hoodie``
(``rename(2)`` of a directory: atomic, and it fails when ``.hoodie`` exists and is not
empty). A failed first run therefore never leaves a ``.hoodie`` behind.

The lock is ``flock(2)`` on ``<meta>/.ingest/lock``: held per open file description, so
it also excludes a second committer in the same process (``fcntl``/``lockf`` record locks
would not, and closing any descriptor of the file would drop them), and the kernel drops
it when the holder dies (SIGKILL included). After locking, the holder checks that the
file it locked is still the lock of the table's current meta directory (the creation
rename moves it from ``.hoodie.init`` to ``.hoodie``; the inode, and so the lock, stays).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import shutil
import threading
import time
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pipeline.errors import CommitError

if TYPE_CHECKING:
    from pipeline.formats.hudi.schema import HudiTableSpec
    from pipeline.formats.hudi.storage import TableFiles

log = logging.getLogger(__name__)

META_DIR = ".hoodie"
STAGING_DIR = ".hoodie.init"
OWN_DIR = ".ingest"  # inside the meta directory
PROPERTIES = "hoodie.properties"
PARTITION_METADATA = ".hoodie_partition_metadata"
MARKERS_DIR = ".temp"
TABLE_VERSION = "6"
TIMELINE_LAYOUT_VERSION = "1"
LOCK_TIMEOUT_S = 120.0

#: ``<fileId>_<writeToken>_<instant>.parquet`` (Hudi 1.x checks this shape too)
BASE_FILE = re.compile(
    r"^(?P<file_id>[A-Za-z0-9-]+)_(?P<token>[A-Za-z0-9-]+)_(?P<instant>[0-9]+)\.parquet$"
)
EMPTY_COMMIT_METADATA = (
    b'{"partitionToWriteStats":{},"compacted":false,"extraMetadata":{},"operationType":"INSERT"}'
)


# -- names ---------------------------------------------------------------------------------


def base_file_name(file_id: str, write_token: str, instant: str) -> str:
    return f"{file_id}_{write_token}_{instant}.parquet"


def parse_write_id(write_id: str) -> tuple[str, str]:
    """``(instant time, pipeline tag)`` of a coordinator write id ``<ts>[-<tag>]``."""
    ts, _, tag = write_id.partition("-")
    if not (ts.isdigit() and len(ts) == 17):
        raise ValueError(f"write id {write_id!r} does not start with a 17-digit instant time")
    if tag and not re.fullmatch(r"[A-Za-z0-9]+", tag):
        raise ValueError(f"write id {write_id!r}: tag must be alphanumeric")
    return ts, tag


def file_tag(token: str) -> str:
    """The pipeline tag a write token ends with (``<part>-<stage>-<attempt>-<tag>``)."""
    parts = token.split("-")
    return parts[3] if len(parts) >= 4 else ""


# -- hoodie.properties ----------------------------------------------------------------------


def checksum(database: str, table: str) -> int:
    """``hoodie.table.checksum``: CRC32 of ``<database>.<table>``."""
    return zlib.crc32(f"{database}.{table}".encode())


def table_properties(spec: HudiTableSpec) -> dict[str, str]:
    return {
        "hoodie.table.name": spec.name,
        "hoodie.table.type": "COPY_ON_WRITE",
        "hoodie.table.version": TABLE_VERSION,
        "hoodie.timeline.layout.version": TIMELINE_LAYOUT_VERSION,
        "hoodie.table.base.file.format": "PARQUET",
        "hoodie.table.recordkey.fields": ",".join(spec.record_key_fields),
        "hoodie.table.partition.fields": ",".join(spec.partition_fields),
        "hoodie.table.keygenerator.class": spec.key_generator,
        "hoodie.datasource.write.hive_style_partitioning": "true",
        "hoodie.datasource.write.partitionpath.urlencode": "true",
        "hoodie.datasource.write.drop.partition.columns": "false",
        "hoodie.populate.meta.fields": "true",
        "hoodie.archivelog.folder": "archived",
        "hoodie.table.timeline.timezone": "UTC",
        "hoodie.database.name": spec.database,
        "hoodie.table.checksum": str(checksum(spec.database, spec.name)),
    }


def format_properties(props: dict[str, str]) -> bytes:
    when = datetime.now(UTC).strftime("%a %b %d %H:%M:%S UTC %Y")
    lines = ["#Properties saved on " + when, *(f"{k}={v}" for k, v in props.items())]
    return ("\n".join(lines) + "\n").encode("ascii")


def parse_properties(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!" or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out


def partition_metadata(instant: str, depth: int) -> bytes:
    when = datetime.now(UTC).strftime("%a %b %d %H:%M:%S UTC %Y")
    return (f"#partition metadata\n#{when}\ncommitTime={instant}\npartitionDepth={depth}\n").encode(
        "ascii"
    )


# -- the table's meta directory and lock ----------------------------------------------------


class TablePaths:
    """Where a table's files are: its :class:`~pipeline.formats.hudi.storage.TableFiles`
    and the meta directory (relative) its lock, fences and journal live in."""

    def __init__(self, files: TableFiles) -> None:
        self.files = files
        self.base = files.base
        self.meta = META_DIR
        # object stores have no rename: the table appears when hoodie.properties does
        self.staging = STAGING_DIR if files.exclusive_lock else META_DIR

    def exists(self) -> bool:
        """The table exists once ``.hoodie`` does (it only ever appears complete); on an
        object store once ``.hoodie/hoodie.properties`` does (written last)."""
        if self.files.exclusive_lock:
            return os.path.isdir(self.files.uri(self.meta))
        return self.files.stat(f"{self.meta}/{PROPERTIES}") is not None

    def current_meta(self) -> str:
        """``.hoodie`` when the table exists, else the staging directory."""
        return self.meta if self.exists() else self.staging

    @staticmethod
    def own(meta: str, *parts: str) -> str:
        return "/".join((meta, OWN_DIR, *parts))


def _staging_is_trivial(staging: str) -> bool:
    """Only the lock file and empty directories: nothing a writer recorded."""
    for root, _dirs, files in os.walk(staging):
        if any(not (f == "lock" and os.path.basename(root) == OWN_DIR) for f in files):
            return False
    return True


class TableLock:
    """The table's exclusive lock: re-entrant within a thread, exclusive across threads,
    and across processes where the files are local (``flock``; on an object store the
    commit slots order fences and commits instead). ``hold()`` yields the validated meta
    directory (relative to the base)."""

    _registry: dict[str, TableLock] = {}
    _registry_lock = threading.Lock()

    def __init__(self, paths: TablePaths) -> None:
        self.paths = paths
        self._mutex = threading.RLock()
        self._depth = 0
        self._fd: int | None = None
        self.meta = ""

    @classmethod
    def of(cls, paths: TablePaths) -> TableLock:
        """The one lock object of this process for the table at ``paths.base``."""
        base = paths.base
        key = os.path.realpath(base) if paths.files.exclusive_lock else base
        with cls._registry_lock:
            lock = cls._registry.get(key)
            if lock is None:
                lock = cls._registry[key] = cls(paths)
            return lock

    @contextlib.contextmanager
    def hold(self, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[str]:
        if not self._mutex.acquire(timeout=timeout_s):
            raise CommitError(
                f"Hudi table {self.paths.base}: lock busy in this process for {timeout_s}s"
            )
        try:
            if self._depth == 0:
                if self.paths.files.exclusive_lock:
                    self._fd, self.meta = self._acquire(timeout_s)
                else:
                    self.meta = self.paths.meta
            self._depth += 1
            try:
                yield self.meta
            finally:
                self._depth -= 1
                if self._depth == 0 and self._fd is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
                    os.close(self._fd)
                    self._fd = None
        finally:
            self._mutex.release()

    def moved(self, meta: str) -> None:
        """The holder renamed the staging directory to ``meta`` (table creation)."""
        self.meta = meta

    def _acquire(self, timeout_s: float) -> tuple[int, str]:
        deadline = time.monotonic() + timeout_s
        files = self.paths.files
        while True:
            meta = self.paths.current_meta()
            own = files.uri(TablePaths.own(meta))
            path = os.path.join(own, "lock")
            try:
                os.makedirs(own, exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:
                continue  # the directory was renamed under us: look again
            try:
                self._flock(fd, deadline, timeout_s)
                current = self.paths.current_meta()
                if current == meta and os.stat(path).st_ino == os.fstat(fd).st_ino:
                    return fd, meta
            except BaseException:
                os.close(fd)
                raise
            # the table was created meanwhile: our staging directory may be a stale copy
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            if meta == self.paths.staging and self.paths.exists():
                self._drop_stale_staging()

    def _flock(self, fd: int, deadline: float, timeout_s: float) -> None:
        delay = 0.005
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() > deadline:
                raise CommitError(
                    f"Hudi table {self.paths.base}: lock {TablePaths.own('.hoodie', 'lock')} "
                    f"held by another writer for more than {timeout_s:g}s"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def _drop_stale_staging(self) -> None:
        staging = self.paths.files.uri(self.paths.staging)
        if os.path.isdir(staging) and _staging_is_trivial(staging):
            shutil.rmtree(staging, ignore_errors=True)
