"""The instant journal of a pipeline writing Hudi tables, kept inside the main table's
meta directory: ``.hoodie/.ingest/journal/<pipeline id>/`` (``.hoodie.init/...`` until the
table's first commit; the creating rename carries it along).

Hudi readers never look inside ``.hoodie/`` except for its top-level instant files and the
folders they know (hudi-rs lists every other directory under the base path as a possible
partition; Java walks them looking for partition metadata), so the journal there is
invisible to them -- a sibling directory would not be.

``HudiJournalStore`` follows the ``JournalStore`` contract: writes and deletes run under
the table lock against the validated meta directory, reads find the current one (and
look again when the creation rename moved it under them).

``HudiInstantTimeline`` mints instant times above the Hudi timelines too (other writers'
instants and anything not in this journal), and reserves a minted time in each existing
table (``<ts>.commit.requested``) together with the journal's REQUESTED, so two pipelines
sharing a table never get the same instant (the loser sees ``AlreadyExists`` and the
coordinator mints again).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence

from pipeline.commit.instant import Requested, next_instant_time
from pipeline.commit.journal import AlreadyExists, InstantTimeline
from pipeline.formats.hudi.layout import TablePaths, remove, requested_name
from pipeline.formats.hudi.table import HudiTable
from pipeline.storage.atomic import write_file
from pipeline.storage.local import LocalJournalStore

__all__ = ["HudiInstantTimeline", "HudiJournalStore"]


class HudiJournalStore:
    """``JournalStore`` in ``<meta>/.ingest/journal/<pipeline id>/`` of ``table``."""

    def __init__(self, table: HudiTable, pipeline_id: str) -> None:
        self.table = table
        self.pipeline_id = pipeline_id

    def _root(self, meta: str) -> str:
        return TablePaths.own(meta, "journal", self.pipeline_id)

    def _path(self, meta: str, name: str) -> str:
        return os.path.join(self._root(meta), *name.split("/"))

    def create(self, name: str, data: bytes) -> None:
        with self.table.locked() as meta:
            LocalJournalStore(self._root(meta)).create(name, data)

    def read(self, name: str) -> bytes | None:
        for meta in self._metas():
            try:
                with open(self._path(meta, name), "rb") as f:
                    return f.read()
            except FileNotFoundError:
                continue
        return None

    def list(self, prefix: str) -> list[str]:
        for meta in self._metas():
            try:
                names = os.listdir(self._path(meta, prefix))
            except FileNotFoundError:
                continue
            return sorted(f"{prefix}/{n}" for n in names if not n.startswith("."))
        return []

    def delete(self, name: str) -> None:
        with self.table.locked() as meta:
            remove(self._path(meta, name))

    def _metas(self) -> Iterator[str]:
        """The current meta directory; again only if it changed (creation rename) while
        the caller was looking."""
        paths = self.table.paths
        meta = paths.current_meta()
        yield meta
        for _ in range(3):
            now = paths.current_meta()
            if now == meta:
                return
            meta = now
            yield meta

    def has_entries(self, meta: str) -> bool:
        root = self._root(meta)
        return any(files for _, _, files in os.walk(root))


class HudiInstantTimeline(InstantTimeline):
    """The journal's timeline, minting above the Hudi tables' timelines as well."""

    def __init__(self, store: HudiJournalStore, tables: Sequence[HudiTable]) -> None:
        super().__init__(store)
        self.tables = list(tables)

    def mint(self) -> str:
        times = [self.latest_time(), *(t.latest_instant_time() for t in self.tables)]
        known = [t for t in times if t is not None]
        return next_instant_time(max(known) if known else None)

    def request(self, requested: Requested) -> None:
        """Journal REQUESTED, and ``<ts>.commit.requested`` in every existing table, all
        under the tables' locks (main first); AlreadyExists when ``ts`` is not above a
        table's timeline any more."""
        ts = requested.time
        with contextlib.ExitStack() as stack:
            metas = [stack.enter_context(t.locked()) for t in self.tables]
            for table in self.tables:
                latest = table.latest_instant_time() if table.exists() else None
                if latest is not None and latest >= ts:
                    raise AlreadyExists(
                        f"instant {ts} is not above {latest} in Hudi table {table.base}"
                    )
            super().request(requested)
            for table, meta in zip(self.tables, metas, strict=True):
                if table.exists():
                    write_file(
                        os.path.join(meta, requested_name(ts)), b"", tmp_dir=table.tmp_dir(meta)
                    )
