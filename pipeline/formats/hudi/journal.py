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
from collections.abc import Iterator, Sequence

from pipeline.commit.instant import Requested, next_instant_time
from pipeline.commit.journal import AlreadyExists, InstantTimeline
from pipeline.formats.hudi.cow_table import HudiTable
from pipeline.formats.hudi.instant import requested_name
from pipeline.formats.hudi.layout import TablePaths

__all__ = ["HudiInstantTimeline", "HudiJournalStore"]


class HudiJournalStore:
    """``JournalStore`` in ``<meta>/.ingest/journal/<pipeline id>/`` of ``table``."""

    def __init__(self, table: HudiTable, pipeline_id: str) -> None:
        self.table = table
        self.pipeline_id = pipeline_id

    def _root(self, meta: str) -> str:
        return TablePaths.own(meta, "journal", self.pipeline_id)

    def _path(self, meta: str, name: str) -> str:
        return f"{self._root(meta)}/{name.strip('/')}"

    def create(self, name: str, data: bytes) -> None:
        with self.table.locked() as meta:
            if not self.table.files.create(self._path(meta, name), data):
                raise AlreadyExists(f"journal entry {name} already exists")

    def read(self, name: str) -> bytes | None:
        for meta in self._metas():
            data = self.table.files.read(self._path(meta, name))
            if data is not None:
                return data
        return None

    def list(self, prefix: str) -> list[str]:
        for meta in self._metas():
            names = self.table.files.listdir(self._path(meta, prefix))
            if names is not None:
                return sorted(f"{prefix}/{n}" for n in names if not n.startswith("."))
        return []

    def delete(self, name: str) -> None:
        with self.table.locked() as meta:
            self.table.files.delete(self._path(meta, name))

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
        return next(self.table.files.files_under(self._root(meta)), None) is not None


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
                    table.files.create(f"{meta}/{requested_name(ts)}", b"")
