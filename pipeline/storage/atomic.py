"""Atomic, durable local files: the one write helper of the local journal store and the
Hudi table layout.

``write_file`` makes a file appear complete or not at all: the data goes to a temp file
that is fsynced, then linked (create-if-absent) or renamed (replace) onto the name, then
the directory is fsynced -- a crash leaves either the old state or the whole new file,
never a torn one, and a completed write survives a power loss.
"""

from __future__ import annotations

import contextlib
import os
import uuid


def fsync_dir(path: str) -> None:
    """Make the entries of directory ``path`` (creations, renames) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: str, data: bytes, *, tmp_dir: str, exclusive: bool = True) -> bool:
    """Make ``path`` appear complete with ``data`` (temp file + fsync + link/rename + dir
    fsync). ``exclusive``: create-if-absent, returns False when ``path`` exists."""
    os.makedirs(tmp_dir, exist_ok=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = os.path.join(tmp_dir, f".tmp-{uuid.uuid4().hex}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if exclusive:
            try:
                os.link(tmp, path)  # fails if path exists: create-if-absent, atomic
            except FileExistsError:
                return False
        else:
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(os.path.dirname(path))
    return True
