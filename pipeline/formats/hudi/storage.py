"""Where a Hudi table's files live: a local (POSIX) directory or an S3-compatible prefix.

:class:`TableFiles` is every file operation the Hudi driver and workers perform, on paths
relative to the table's base (``/``-separated). Two implementations, picked by
:func:`table_files` from the base URI:

``LocalFiles``  a directory. Writes are temp file + fsync + ``link`` (create-if-absent) or
                ``rename`` (replace) + directory fsync (:mod:`pipeline.storage.atomic`);
                the table lock is ``flock`` and a table appears by renaming its staging
                directory (:mod:`pipeline.formats.hudi.layout`).
``S3Files``     ``s3://bucket/key``. One PUT writes an object whole or not at all;
                create-if-absent is a PUT with ``If-None-Match: *`` (the S3 journal
                store's primitive, checked once per bucket); deletes go through the same
                client (pyarrow's ``delete_file`` leaves directory-marker objects behind).
                There are no directories and no rename: the table exists once
                ``.hoodie/hoodie.properties`` does, which the first commit creates last,
                and fences and commits are ordered by create-if-absent slots
                (:mod:`pipeline.formats.hudi.slots`) instead of a lock.

Listings are strongly consistent on both (S3 since 2020; SeaweedFS in the tests).
"""

from __future__ import annotations

import contextlib
import functools
import os
import posixpath
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlparse

import pyarrow.fs as pafs

from pipeline.commit.journal import AlreadyExists
from pipeline.errors import ConfigError
from pipeline.storage.atomic import fsync_dir, write_file
from pipeline.storage.fs import s3_filesystem
from pipeline.storage.s3_settings import S3_SCHEMES, S3Settings, split_s3_uri

if TYPE_CHECKING:
    from pipeline.storage.s3 import S3JournalStore

__all__ = [
    "FileStat",
    "LocalFiles",
    "S3Files",
    "TableFiles",
    "is_object_store",
    "open_location",
    "reader_options",
    "table_base",
    "table_files",
]


def is_object_store(uri: str) -> bool:
    scheme, sep, _ = uri.partition("://")
    return bool(sep) and scheme.lower() in S3_SCHEMES


@dataclass(frozen=True)
class FileStat:
    size: int
    mtime: float  # Unix time


class TableFiles(Protocol):
    """File operations on one table, on paths relative to its base."""

    base: str  # the base as configured: an absolute path or s3://bucket/key
    #: whether the table lock (layout.TableLock: flock) excludes other processes; if not,
    #: fences and commits are ordered by commit slots (slots.py)
    exclusive_lock: bool

    def uri(self, rel: str = "") -> str: ...
    def read(self, rel: str) -> bytes | None: ...
    def write(self, rel: str, data: bytes) -> None: ...
    def create(self, rel: str, data: bytes) -> bool: ...
    def delete(self, rel: str) -> bool: ...
    def listdir(self, rel: str) -> list[str] | None: ...
    def files_under(self, rel: str) -> Iterator[str]: ...
    def stats_under(self, rel: str) -> Iterator[tuple[str, FileStat]]: ...
    def stat(self, rel: str) -> FileStat | None: ...
    def open_input(self, rel: str) -> Any: ...
    def remove_tree(self, rel: str) -> None: ...
    def open_output(self, rel: str) -> contextlib.AbstractContextManager[Any]: ...
    def sync_dir(self, rel: str) -> None: ...


def _join(base: str, rel: str) -> str:
    return posixpath.join(base, rel) if rel else base


class LocalFiles:
    """A table in a local (or POSIX-mounted) directory."""

    exclusive_lock = True

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/") or "/"

    def uri(self, rel: str = "") -> str:
        return _join(self.base, rel)

    def read(self, rel: str) -> bytes | None:
        try:
            with open(self.uri(rel), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def _tmp_dir(self, rel: str) -> str:
        """Temp files of writes in a meta directory go to its ``.ingest/tmp`` (Hudi readers
        list ``.hoodie``); elsewhere beside the file (dot-names, never read as data)."""
        top, sep, _ = rel.partition("/")
        if sep and top.startswith(".hoodie"):
            return self.uri(f"{top}/.ingest/tmp")
        return os.path.dirname(self.uri(rel))

    def write(self, rel: str, data: bytes) -> None:
        write_file(self.uri(rel), data, tmp_dir=self._tmp_dir(rel), exclusive=False)

    def create(self, rel: str, data: bytes) -> bool:
        return write_file(self.uri(rel), data, tmp_dir=self._tmp_dir(rel), exclusive=True)

    def delete(self, rel: str) -> bool:
        try:
            os.unlink(self.uri(rel))
            return True
        except FileNotFoundError:
            return False

    def listdir(self, rel: str) -> list[str] | None:
        """Names in directory ``rel`` (files and directories); None when it is missing."""
        try:
            return os.listdir(self.uri(rel))
        except FileNotFoundError:
            return None

    def files_under(self, rel: str) -> Iterator[str]:
        """Relative paths of every file below ``rel``; below the base itself, files in
        dot-directories (``.hoodie``) are skipped."""
        root = self.uri(rel)
        for dirpath, dirs, files in os.walk(root):
            if not rel:
                dirs[:] = [d for d in dirs if not d.startswith(".")]
            sub = os.path.relpath(dirpath, self.base)
            for name in files:
                yield name if sub == "." else f"{sub}/{name}"

    def stats_under(self, rel: str) -> Iterator[tuple[str, FileStat]]:
        """``files_under`` with each file's size and mtime (files gone meanwhile skipped)."""
        for sub in self.files_under(rel):
            st = self.stat(sub)
            if st is not None:
                yield sub, st

    def stat(self, rel: str) -> FileStat | None:
        try:
            st = os.stat(self.uri(rel))
        except FileNotFoundError:
            return None
        return FileStat(st.st_size, st.st_mtime)

    def open_input(self, rel: str) -> Any:
        """A readable, seekable binary file (FileNotFoundError when missing)."""
        return open(self.uri(rel), "rb")

    def remove_tree(self, rel: str) -> None:
        shutil.rmtree(self.uri(rel), ignore_errors=True)

    @contextlib.contextmanager
    def open_output(self, rel: str) -> Iterator[Any]:
        """A new file for a worker (fails if it exists), fsynced when the block ends."""
        path = self.uri(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "xb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())

    def sync_dir(self, rel: str) -> None:
        fsync_dir(self.uri(rel))


class S3Files:
    """A table under ``s3://bucket/key`` (see the module docstring)."""

    exclusive_lock = False

    def __init__(self, base: str, settings: S3Settings) -> None:
        self.base = base.rstrip("/")
        self.bucket, self.key = split_s3_uri(self.base)
        self.settings = settings
        self.fs = s3_filesystem(settings)

    @functools.cached_property
    def _store(self) -> S3JournalStore:
        from pipeline.storage.s3 import S3JournalStore

        return S3JournalStore.from_settings(self.bucket, self.key, self.settings)

    def uri(self, rel: str = "") -> str:
        return _join(self.base, rel)

    def _path(self, rel: str) -> str:
        return _join(f"{self.bucket}/{self.key}" if self.key else self.bucket, rel)

    def read(self, rel: str) -> bytes | None:
        try:
            with self.fs.open_input_stream(self._path(rel)) as f:
                return bytes(f.read())
        except FileNotFoundError:
            return None

    def write(self, rel: str, data: bytes) -> None:
        with self.fs.open_output_stream(self._path(rel)) as f:
            f.write(data)

    def create(self, rel: str, data: bytes) -> bool:
        try:
            self._store.create(rel, data)
        except AlreadyExists:
            return False
        return True

    def delete(self, rel: str) -> bool:
        if self.stat(rel) is None:
            return False
        self._store.delete(rel)
        return True

    def listdir(self, rel: str) -> list[str] | None:
        """Names directly under ``rel`` (objects and common prefixes); None when none."""
        sel = pafs.FileSelector(self._path(rel), recursive=False, allow_not_found=True)
        infos = self.fs.get_file_info(sel)
        return [i.base_name for i in infos] or None

    def files_under(self, rel: str) -> Iterator[str]:
        for sub, _ in self.stats_under(rel):
            yield sub

    def stats_under(self, rel: str) -> Iterator[tuple[str, FileStat]]:
        """Objects below ``rel`` with size and mtime, from the listing itself."""
        root = self._path("")
        sel = pafs.FileSelector(self._path(rel), recursive=True, allow_not_found=True)
        for info in self.fs.get_file_info(sel):
            if info.type != pafs.FileType.File:
                continue
            sub = info.path[len(root) + 1 :]
            if not rel and any(d.startswith(".") for d in sub.split("/")[:-1]):
                continue  # .hoodie/ and other dot-directories
            mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
            yield sub, FileStat(int(info.size or 0), mtime)

    def stat(self, rel: str) -> FileStat | None:
        info = self.fs.get_file_info(self._path(rel))
        if info.type != pafs.FileType.File:
            return None
        mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
        return FileStat(int(info.size or 0), mtime)

    def open_input(self, rel: str) -> Any:
        """A readable, seekable object (ranged GETs; FileNotFoundError when missing)."""
        return self.fs.open_input_file(self._path(rel))

    def remove_tree(self, rel: str) -> None:
        for sub in list(self.files_under(rel)):
            self._store.delete(sub)

    @contextlib.contextmanager
    def open_output(self, rel: str) -> Iterator[Any]:
        """A new object for a worker: visible whole once the block ends (one PUT, or a
        multipart upload completed at close)."""
        with self.fs.open_output_stream(self._path(rel)) as f:
            yield f

    def sync_dir(self, rel: str) -> None:
        """Nothing to do: a completed PUT is durable."""


def table_base(uri: str, key: str = "sink.hudi.basePath") -> str:
    """The table base for ``uri``: ``s3://bucket/prefix`` as is (``s3a``/``s3n`` too), a
    path or ``file://`` URI as an absolute local path; ConfigError otherwise."""
    if is_object_store(uri):
        split_s3_uri(uri)  # names the bucket
        return uri.rstrip("/")
    if "://" in uri:
        parsed = urlparse(uri)
        if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
            raise ConfigError(
                f"{key} {uri!r}: the native Hudi writer supports local paths, file:/// and "
                "s3:// (S3-compatible stores with conditional writes)"
            )
        uri = parsed.path
    return os.path.abspath(os.path.expanduser(uri))


def open_location(base_uri: str, properties: Mapping[str, str]) -> LocalFiles | S3Files:
    """The files of the table configured at ``base_uri`` (``properties``: ``s3.*``)."""
    base = table_base(base_uri)
    s3 = S3Settings.from_properties(properties) if is_object_store(base) else None
    return table_files(base, s3)


@functools.lru_cache(maxsize=32)
def _s3_files(base: str, settings: S3Settings) -> S3Files:
    return S3Files(base, settings)


def table_files(base: str, s3: S3Settings | None = None) -> LocalFiles | S3Files:
    """The files of the table at ``base``: ``s3://``/``s3a://`` -> :class:`S3Files` (with
    ``s3`` settings, default: the AWS credential chain); a path -> :class:`LocalFiles`."""
    if is_object_store(base):
        return _s3_files(base, s3 or S3Settings())
    if "://" in base:
        raise ConfigError(f"Hudi table {base!r}: only local paths and s3:// are supported")
    return LocalFiles(base)


def reader_options(s3: S3Settings | None) -> dict[str, str]:
    """Storage options for hudi-rs (``HudiTableBuilder.with_storage_options``) to read a
    table on the store ``s3`` describes (object_store's ``aws_*`` keys)."""
    if s3 is None:
        return {}
    out: dict[str, str] = {}
    if s3.endpoint is not None:
        out["aws_endpoint_url"] = s3.endpoint
        if s3.endpoint.startswith("http://"):
            out["aws_allow_http"] = "true"
    for key, value in (
        ("aws_access_key_id", s3.access_key),
        ("aws_secret_access_key", s3.secret_key),
        ("aws_session_token", s3.session_token),
        ("aws_region", s3.region),
    ):
        if value is not None:
            out[key] = value
    if s3.virtual_addressing is not None:
        out["aws_virtual_hosted_style_request"] = str(s3.virtual_addressing).lower()
    return out
