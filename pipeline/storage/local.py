"""The instant journal on a local (or mounted) POSIX directory.

Implements :class:`pipeline.commit.journal.JournalStore`: ``create`` is an atomic
create-if-absent (temp file + fsync + ``link`` + directory fsync, see
:mod:`pipeline.storage.atomic`), raising ``AlreadyExists`` when the name is taken; names
starting with ``.`` (temp files) are never listed.
"""

from __future__ import annotations

import contextlib
import os

from pipeline.commit.journal import AlreadyExists
from pipeline.storage.atomic import write_file


class LocalJournalStore:
    """POSIX directory: temp file + fsync + ``link`` (atomic create-if-absent) + dir fsync."""

    def __init__(self, root: str) -> None:
        self.root = root
        os.makedirs(root, exist_ok=True)

    def _path(self, name: str) -> str:
        return os.path.join(self.root, *name.split("/"))

    def create(self, name: str, data: bytes) -> None:
        path = self._path(name)
        if not write_file(path, data, tmp_dir=os.path.dirname(path), exclusive=True):
            raise AlreadyExists(f"journal entry {name} already exists")

    def read(self, name: str) -> bytes | None:
        try:
            with open(self._path(name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def list(self, prefix: str) -> list[str]:
        directory = self._path(prefix)
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        return sorted(f"{prefix}/{n}" for n in names if not n.startswith("."))

    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(name))
