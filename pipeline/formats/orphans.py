"""Orphan cleanup, format-neutral: list a table's data files, keep what is referenced,
protected or young, delete the rest.

A format supplies its stored data files (:func:`list_data_files` under its data root, or
its own listing), what holds a file (referenced by a commit, protected) and how to delete
one; :func:`sweep` decides and reports. Paths are compared by
:func:`path_key` (the path inside its file system: ``/abs/path`` for local files, whatever
the ``file:`` spelling; ``bucket/key`` for ``s3://``, ``s3a://`` and ``s3n://``), so a
file referenced as ``file:/x`` is never mistaken for an orphan stored at ``/x``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar
from urllib.parse import unquote

import pyarrow.fs as pafs

from pipeline.commit.maintenance import OrphanResult
from pipeline.storage.fs import filesystem_for
from pipeline.storage.s3_settings import S3_SCHEMES

log = logging.getLogger(__name__)

__all__ = ["StoredFile", "delete_stored", "list_data_files", "path_key", "sweep"]


@dataclass(frozen=True)
class StoredFile:
    uri: str  # as a reference would spell it (scheme of the data root)
    size: int
    mtime: float  # seconds since the epoch


def path_key(uri: str) -> str:
    """The path of ``uri`` inside its file system, for comparing references."""
    scheme, sep, rest = uri.partition("://")
    if sep and scheme.lower() in S3_SCHEMES:
        return rest.lstrip("/")
    if sep and scheme.lower() == "file":
        return "/" + unquote(rest).lstrip("/")
    if uri.startswith("file:"):
        return "/" + unquote(uri[len("file:") :]).lstrip("/")
    return uri


def list_data_files(
    root: str, properties: Mapping[str, str] | None = None, suffix: str = ".parquet"
) -> list[StoredFile]:
    """Every ``*suffix`` file under ``root`` (recursively; none when it does not exist)."""
    fs, base = filesystem_for(root, properties)
    scheme, sep, _ = root.partition("://")
    prefix = f"{scheme}://" if sep else ""
    selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
    out = []
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File or not info.base_name.endswith(suffix):
            continue
        mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
        out.append(StoredFile(f"{prefix}{info.path}", int(info.size or 0), mtime))
    return out


class _Dated(Protocol):
    @property
    def size(self) -> int: ...

    @property
    def mtime(self) -> float: ...


F = TypeVar("F", bound=_Dated)


def sweep(
    table: str,
    files: Iterable[F],
    *,
    held: Callable[[F], bool],
    uri: Callable[[F], str],
    delete: Callable[[F], bool],
    older_than_s: float,
    now: float,
    dry_run: bool = False,
) -> OrphanResult:
    """Delete the ``files`` that are not ``held`` (referenced or protected) and were last
    modified more than ``older_than_s`` before ``now``. ``delete(f)``: False when ``f`` is
    gone already; an exception is reported in the result and retried at the next run (one
    stuck file must not stop the sweep)."""
    removed: list[str] = []
    errors: list[str] = []
    removed_bytes = too_young = kept = 0
    for f in files:
        if held(f):
            kept += 1
            continue
        if now - f.mtime < older_than_s:
            too_young += 1
            continue
        if not dry_run:
            try:
                if not delete(f):
                    continue
            except Exception as e:
                errors.append(f"{uri(f)}: {e}")
                continue
        removed.append(uri(f))
        removed_bytes += f.size
    if removed:
        log.info(
            "%s: %s %d orphan data files (%d bytes): %s",
            table,
            "would remove" if dry_run else "removed",
            len(removed),
            removed_bytes,
            ", ".join(removed[:5]),
        )
    for error in errors:
        log.warning("%s: orphan not removed (retried next run): %s", table, error)
    return OrphanResult(
        table,
        removed=tuple(removed),
        removed_bytes=removed_bytes,
        too_young=too_young,
        referenced=kept,
        dry_run=dry_run,
        errors=tuple(errors),
    )


def delete_stored(properties: Mapping[str, str] | None) -> Callable[[StoredFile], bool]:
    """``delete`` for :func:`sweep` over :func:`list_data_files`' files."""

    def delete(f: StoredFile) -> bool:
        fs, path = filesystem_for(f.uri, properties)
        try:
            fs.delete_file(path)
        except FileNotFoundError:
            return False
        return True

    return delete
