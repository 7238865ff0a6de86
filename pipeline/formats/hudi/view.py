"""A Hudi table's base files as readers see them: one listing of the data files joined with
one reading of the timeline. Compaction plans (:mod:`~pipeline.formats.hudi.compaction`),
file statistics and orphan cleanup (:mod:`~pipeline.formats.hudi.orphans`) start from it.

Reader rules (hudi-rs 0.5.0; docs/hudi.md, "Reader facts the writer relies on";
tests/integration/formats/hudi/test_hudi_maintenance.py):

* a base file is **committed** when its instant is a completed ``commit`` or
  ``replacecommit`` on the active timeline, or when its instant is older than the first
  completed one and has no instant file at all (trimmed history: still read);
* a file group that a completed replacecommit on the active timeline replaced is not read;
* of a file group's committed files only the newest (its latest file slice) is read.

**Referenced** (never an orphan) is stricter on the active timeline than the readers are:
a file of an instant there counts when a completed instant's write stats list it (files
of replaced groups included, until their replacecommit leaves the timeline) or when the
instant is not completed (pending, or an action we do not write: kept, never guessed
at). A file of a completed instant that its commit does not list -- a zombie task
attempt's late copy -- is read by hudi-rs as a duplicate and is an orphan. Files before
the timeline start cannot be told apart by write stats (their commits were trimmed): they
count as referenced, because readers read them.

Only files in this table's partition directories are looked at (depth and ``field=``
names of its partition fields), so a table nested under another's base path is never
taken for orphans or inputs.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field

from pipeline.formats.hudi.cow_table import HudiTable
from pipeline.formats.hudi.instant import Action, State
from pipeline.formats.hudi.layout import BASE_FILE

__all__ = ["BaseFile", "TableView"]

_TRACKED = (Action.COMMIT, Action.REPLACE_COMMIT)


@dataclass(frozen=True)
class BaseFile:
    rel: str  # relative to the table base
    partition: str  # relative partition path ("" when unpartitioned)
    file_id: str
    instant: str
    size: int
    mtime: float

    @property
    def group(self) -> tuple[str, str]:
        return self.partition, self.file_id


@dataclass
class TableView:
    """The base files of one table, and what its timeline says about them."""

    files: list[BaseFile]
    completed: set[str]  # completed commit and replacecommit times
    on_timeline: set[str]  # times with any instant file
    listed: set[str]  # relative paths in completed instants' write stats
    replaced: set[tuple[str, str]]  # (partition, file id) replaced by a completed replace
    trimmed_through: str | None = None
    first_completed: str | None = field(init=False)

    def __post_init__(self) -> None:
        self.first_completed = min(self.completed) if self.completed else None

    @classmethod
    def load(cls, table: HudiTable) -> TableView:
        """List the data files first, then read the timeline: a file committed in between
        is seen as committed; one staged in between belongs to an instant on the timeline
        (instants are reserved before their files are written)."""
        files = list(_base_files(table))
        instants = table.instants()
        completed = {
            i.time for i in instants if i.action in _TRACKED and i.state is State.COMPLETED
        }
        listed: set[str] = set()
        replaced: set[tuple[str, str]] = set()
        for i in instants:
            if i.state is not State.COMPLETED or i.action not in _TRACKED:
                continue
            try:
                doc = (
                    table.commit_metadata(i.time)
                    if i.action is Action.COMMIT
                    else table.replace_metadata(i.time)
                )
            except FileNotFoundError:  # trimmed meanwhile: its files are before the start
                continue
            listed.update(_stat_paths(doc))
            for partition, ids in (doc.get("partitionToReplaceFileIds") or {}).items():
                replaced.update((str(partition), str(fid)) for fid in ids or ())
        return cls(
            files,
            completed,
            {i.time for i in instants},
            listed,
            replaced,
            table.trimmed_through(),
        )

    # -- what readers read ----------------------------------------------------------------

    def before_start(self, instant: str) -> bool:
        """No instant file, and older than the timeline's first completed instant (or
        trimmed): readers take the file as committed."""
        if instant in self.on_timeline:
            return False
        if self.trimmed_through is not None and instant <= self.trimmed_through:
            return True
        return self.first_completed is not None and instant < self.first_completed

    def committed(self, f: BaseFile) -> bool:
        return f.instant in self.completed or self.before_start(f.instant)

    def live(self, *, listed_only: bool = False) -> list[BaseFile]:
        """The latest committed file slice of every file group not replaced: what a
        snapshot read opens. ``listed_only``: only files a commit lists (or from before
        the timeline start), and no group with a file of an instant still pending."""
        busy = {f.group for f in self.files if self.pending(f)} if listed_only else set()
        latest: dict[tuple[str, str], BaseFile] = {}
        for f in self.files:
            if not self.committed(f) or f.group in self.replaced or f.group in busy:
                continue
            if listed_only and f.instant in self.completed and f.rel not in self.listed:
                continue
            cur = latest.get(f.group)
            if cur is None or f.instant > cur.instant:
                latest[f.group] = f
        return sorted(latest.values(), key=lambda f: f.rel)

    # -- what orphan cleanup keeps ----------------------------------------------------------

    def pending(self, f: BaseFile) -> bool:
        """The file's instant is on the timeline but not a completed commit/replace."""
        return f.instant in self.on_timeline and f.instant not in self.completed

    def referenced(self, f: BaseFile) -> bool:
        return f.rel in self.listed or self.pending(f) or self.before_start(f.instant)


def _stat_paths(doc: dict[str, object]) -> Iterable[str]:
    stats = doc.get("partitionToWriteStats") or {}
    assert isinstance(stats, dict)
    for entries in stats.values():
        for stat in entries or ():
            path = stat.get("path") if isinstance(stat, dict) else None
            if path:
                yield str(path).lstrip("/")


def _base_files(table: HudiTable) -> Iterable[BaseFile]:
    """Base files in the table's partition directories, with size and mtime."""
    fields = table.spec.partition_fields
    for rel, st in table.files.stats_under(""):
        rel_dir, name = posixpath.split(rel)
        m = BASE_FILE.match(name)
        if m is None or not _is_partition(rel_dir, fields):
            continue
        yield BaseFile(rel, rel_dir, m.group("file_id"), m.group("instant"), st.size, st.mtime)


def _is_partition(rel_dir: str, fields: tuple[str, ...]) -> bool:
    if not fields:
        return rel_dir == ""
    parts = rel_dir.split("/") if rel_dir else []
    return len(parts) == len(fields) and all(
        p.startswith(f"{name}=") for p, name in zip(parts, fields, strict=True)
    )
