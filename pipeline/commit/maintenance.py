"""Table maintenance, format-neutral: what compaction and orphan cleanup promise.

Each table format implements :class:`TableMaintenance` for one table (Iceberg:
``pipeline.formats.iceberg.compaction`` / ``orphans``; Hudi: ``pipeline.formats.hudi``'s
counterparts). ``pipeline.maintenance_scheduler`` drives them (``ingest compact`` and the driver's
background maintenance).

Invariants every implementation keeps (docs/design.md invariants 2-7):

* **Nothing changes for a reader but the file layout.** A compaction commit holds the
  same records (same values, same Kafka coordinates) as the files it replaces, and it
  carries no ``ingest.*`` pipeline keys: the latest checkpoint of every pipeline, dedupe
  by batch id, the committed offsets and ``ingest verify`` see exactly what they saw
  before it (:data:`COMPACTION_KEY` marks it).
* **Only committed files are compacted.** Files of a pending instant are in no commit yet,
  so a plan built from the committed file listing never touches them.
* **Ingest never waits.** Compaction writes its files outside any lock. Its commit is
  optimistic (Iceberg: the catalog refuses it when ``main`` moved; Hudi: it is checked
  and written under the table's commit lock, held only for that). On a conflict it
  re-plans against the new head and gives up after a few attempts; an ingest commit
  that loses to it just retries as after any other conflict.
* **Fenced.** A compaction run for a writer (``WriterFence``) refuses to commit when the
  table carries a newer writer epoch of that pipeline (:class:`~pipeline.errors.FencedError`).
* **Killed at any point, the table stays readable and exact.** Files written before the
  commit are unreferenced (orphans, removed by the cleanup after the safety interval);
  after the commit the replaced files stay on storage (older commits reference them until
  history expiry), and become orphans then.
* **Orphan cleanup deletes only unreferenced files older than the safety interval.**
  Referenced: by any commit the table still knows (all snapshots / the active timeline)
  or by a pending instant of the pipeline (``protected``: its listed files and its staged
  files). Only data files (Parquet) under the table's data locations are candidates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from pipeline.commit.fence import check_fence

__all__ = [
    "COMPACTION_KEY",
    "CompactionPolicy",
    "CompactionResult",
    "FileStats",
    "OrphanResult",
    "TableMaintenance",
    "WriterFence",
    "bin_pack",
]

#: Marks a compaction commit (Iceberg snapshot summary / Hudi ``extraMetadata``).
COMPACTION_KEY = "ingest.compaction"


@dataclass(frozen=True)
class WriterFence:
    """The writer a compaction runs for: it must not commit once ``pipeline_id`` has
    committed at a higher epoch than ``epoch``."""

    pipeline_id: str
    epoch: int

    def check(self, latest_epoch: int | None, where: str) -> None:
        """``FencedError`` when the table's newest commit of the pipeline carries an epoch
        above ours (``latest_epoch``; None: no commit of it)."""
        check_fence(self.pipeline_id, self.epoch, latest_epoch, where)


@dataclass(frozen=True)
class CompactionPolicy:
    """Which files are rewritten (as Iceberg's ``rewrite_data_files`` decides by default):
    per table partition, files smaller than ``small_fraction`` x ``target_file_size_bytes``
    are candidates; a partition is compacted when it has ``min_input_files`` of them;
    candidates are packed into groups of at most the target size, each written as one
    file (groups of one file are left alone)."""

    target_file_size_bytes: int = 128 * 1024 * 1024
    min_input_files: int = 5
    small_fraction: float = 0.75

    @property
    def small_below(self) -> int:
        return int(self.target_file_size_bytes * self.small_fraction)


@dataclass(frozen=True)
class FileStats:
    """The live data files of one table (what a reader of the head opens)."""

    table: str
    files: int
    bytes: int

    @property
    def average_bytes(self) -> float:
        return self.bytes / self.files if self.files else 0.0


@dataclass(frozen=True)
class CompactionResult:
    table: str
    rewritten_files: int = 0  # small files replaced
    written_files: int = 0  # files that replace them
    rewritten_bytes: int = 0
    written_bytes: int = 0
    commit: str | None = None  # snapshot id / instant time; None: nothing to do
    attempts: int = 0  # commit attempts (>1: re-planned after a conflict)


@dataclass(frozen=True)
class OrphanResult:
    table: str
    removed: tuple[str, ...] = ()  # deleted (dry run: would be deleted)
    removed_bytes: int = 0
    too_young: int = 0  # unreferenced but younger than the safety interval: kept
    referenced: int = 0  # data files on storage that a commit or pending instant holds
    dry_run: bool = False
    errors: tuple[str, ...] = field(default=())  # deletes that failed (retried next run)


class TableMaintenance(Protocol):
    """Maintenance of one table (main or dead-letter)."""

    @property
    def name(self) -> str: ...  # as ``ingest status`` names it, e.g. "table db.events"

    def file_stats(self) -> FileStats:
        """Live data files of the head (zero when the table does not exist)."""
        ...

    def compact(
        self,
        policy: CompactionPolicy,
        fence: WriterFence | None = None,
        on_step: Callable[[str], None] | None = None,
    ) -> CompactionResult:
        """Rewrite small committed files into target-size ones in one commit.
        ``on_step("written")``: the new files are written, not committed (each attempt
        that wrote them); ``on_step("committed")``: the commit landed (fault points)."""
        ...

    def compaction_commits(self) -> list[str]:
        """Ids of the compaction commits the table still knows (Iceberg: snapshots in the
        metadata; Hudi: completed replacecommits on the active timeline), oldest first."""
        ...

    def remove_orphans(
        self, older_than_s: float, protected: Iterable[str] = (), *, dry_run: bool = False
    ) -> OrphanResult:
        """Delete data files nothing references, last modified more than ``older_than_s``
        ago; ``protected``: paths of pending instants' files (never deleted)."""
        ...


def bin_pack(sizes: list[tuple[str, int]], target: int) -> list[list[str]]:
    """Groups of the named files, each of at most ``target`` bytes in total (a file larger
    than that alone), first-fit over the files sorted largest first; groups of one file
    are dropped (rewriting a file alone gains nothing)."""
    bins: list[tuple[int, list[str]]] = []
    for name, size in sorted(sizes, key=lambda x: (-x[1], x[0])):
        for i, (total, names) in enumerate(bins):
            if total + size <= target:
                bins[i] = (total + size, [*names, name])
                break
        else:
            bins.append((size, [name]))
    return [names for _, names in bins if len(names) > 1]
