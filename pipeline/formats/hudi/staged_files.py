"""The files a Hudi table's batches stage, as the coordinator handles them: :class:`StagedFiles`
(mixed into :class:`~pipeline.formats.hudi.committer.HudiCommitter`).

A staged file is described by the worker's descriptor (path, size, records); before an
instant rolls back the coordinator deletes its files -- never one of a completed commit
or of a compaction (a replacecommit), whose files readers see -- and looks for files of
the instant that no descriptor lists (``orphan_files``: task-retry debris).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable

from pipeline.formats.hudi.cow_table import HudiTable
from pipeline.formats.hudi.instant import Action, commit_name, instant_files
from pipeline.formats.hudi.layout import BASE_FILE, file_tag, parse_write_id
from pipeline.formats.hudi.storage import TableFiles
from pipeline.formats.hudi.writer import describe

log = logging.getLogger(__name__)

__all__ = ["StagedFiles"]


class StagedFiles:
    """Staged files of one Hudi table (``TableCommitter`` methods)."""

    hudi: HudiTable

    @property
    def files(self) -> TableFiles:
        return self.hudi.files

    def _rel(self, path: str) -> str:
        """``path`` (absolute, ``file://`` or ``s3://``) relative to the table base."""
        return path.removeprefix("file://").removeprefix(self.hudi.base.rstrip("/") + "/")

    def describe(self, descriptor: bytes) -> tuple[str, int, int]:
        d = describe(descriptor)
        return self.files.uri(d["path"]), int(d["size"]), int(d["records"])

    def owns(self, path: str) -> bool:
        """``path`` (a local path or ``file://`` URI) lies inside this table."""
        base = str(self.hudi.base).rstrip("/")
        return path.removeprefix("file://").startswith(base + "/")

    def file_size(self, path: str) -> int | None:
        st = self.files.stat(self._rel(path))
        return st.size if st is not None else None

    def _completed(self, ts: str) -> bool:
        if self.files.stat(f"{self.hudi.paths.meta}/{commit_name(ts)}") is not None:
            return True
        trimmed = self.hudi.trimmed_through()
        return trimmed is not None and ts <= trimmed  # trimmed off the timeline, committed

    def _compaction(self, ts: str) -> bool:
        """``ts`` is a compaction's (replacecommit) instant: never the coordinator's."""
        meta = self.hudi.paths.meta
        names = instant_files(ts, Action.REPLACE_COMMIT)
        return any(self.files.stat(f"{meta}/{name}") is not None for name in names)

    def delete_files(self, paths: Iterable[str]) -> list[str]:
        deleted = []
        compactions: dict[str, bool] = {}  # instant -> a compaction's (asked once)
        for path in paths:
            m = BASE_FILE.match(os.path.basename(path))
            ts = m.group("instant") if m is not None else None
            if ts is not None and ts not in compactions:
                compactions[ts] = self._compaction(ts)
            if ts is not None and (self._completed(ts) or compactions[ts]):
                log.error(
                    "not deleting %s: instant %s is a completed commit or a compaction of %s",
                    path,
                    ts,
                    self.hudi.base,
                )
                continue
            if self.files.delete(self._rel(path)):
                deleted.append(path)
        return deleted

    def orphan_files(self, write_id: str) -> list[str]:
        """Base files of instant ``write_id`` (``<ts>[-<tag>]``) anywhere in the table."""
        try:
            ts, tag = parse_write_id(write_id)
        except ValueError:
            return []
        out = []
        for rel_dir, name in self.hudi.data_files():
            m = BASE_FILE.match(name)
            assert m is not None
            if m.group("instant") == ts and (not tag or file_tag(m.group("token")) == tag):
                out.append(self.files.uri(f"{rel_dir}/{name}" if rel_dir else name))
        return out
