"""Trimming a Hudi table's active timeline: :func:`maybe_trim` after a commit, :func:`trim`.

Bounded timeline (so commit latency stays flat; :mod:`pipeline.commit.history`): every
commit carries ``ingest.ranges-before`` / ``ingest.data-loss-before`` in its
``extraMetadata``; every ``trim_every`` commits, the completed commits beyond the newest
``max_commits`` leave the active timeline -- their instant files are deleted, oldest first,
``.commit.requested`` and ``.inflight`` before ``.commit`` (a crash leaves only completed
instants). Their data files stay and stay visible: Hudi readers treat files older than the
first active instant as committed (docs/hudi.md, "Reader facts the writer relies on";
checked with hudi-rs in the tests). No Avro archive is written, so time travel and
incremental reads reach back only to the oldest retained commit. Never trimmed: anything at
or after the oldest pending instant or instant of another action -- a completed ``clean`` or
``rollback`` of Hudi's own tools excepted: it leaves with the trim, as Hudi's archiver would
move it; commits of a pipeline whose oldest retained commit lacks the carried keys. Before
the timeline start moves past an instant time, files of instants there that never completed
(markers without a completed commit: a zombie's staging after a rollback) are deleted --
they would become visible.
``.ingest/trimmed`` records the newest trimmed time first, so files of a trimmed commit are
never mistaken for debris. Completed replacecommits (compactions) at or before the newest
trimmed commit leave the timeline with it, after the base files of the file groups they
replaced are deleted: once a replacecommit is gone, readers would read those files again
(checked with hudi-rs in tests/integration/formats/hudi/test_hudi_maintenance.py). A
pending replacecommit is never trimmed past.
The committer calls :func:`maybe_trim` while it holds the table lock.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pipeline.commit.history import forgettable
from pipeline.formats.hudi.cow_table import TRIMMED_RECORD, HudiTable
from pipeline.formats.hudi.instant import Action, instant_files
from pipeline.formats.hudi.layout import BASE_FILE, MARKERS_DIR, TablePaths

log = logging.getLogger(__name__)

__all__ = ["maybe_trim", "trim"]


def maybe_trim(table: HudiTable, meta: str, max_commits: int, trim_every: int) -> None:
    """Every ``trim_every`` commits beyond ``max_commits``: trim the oldest completed
    commits (see the module docstring). Never fails the batch, which is committed."""
    completed = table.completed_commits()
    if len(completed) < max_commits + trim_every:
        return
    try:
        limit = table.trim_limit()
        commits = [(ts, table.extra_metadata(ts)) for ts in completed]
        old = [ts for ts in forgettable(commits, max_commits) if limit is None or ts < limit]
        if old:
            trim(table, meta, old)
            log.info("%s: %d old commits left the active timeline", table.base, len(old))
    except Exception as e:  # housekeeping: retried after more commits
        log.warning("%s: timeline trim failed, retried later: %s", table.base, e)


def trim(table: HudiTable, meta: str, times: Sequence[str]) -> None:
    """Remove completed commits ``times`` -- and the completed replacecommits up to the
    newest of them -- from the active timeline (see the module docstring for the order
    and what is kept). The caller holds the table lock; ``meta`` is what it yielded."""
    if not times:
        return
    files = table.files
    through = max(times)
    replaces = [ts for ts in table.completed_replacecommits() if ts <= through]
    for ts in replaces:  # before the replacecommit goes: readers would see them again
        _delete_replaced(table, ts)
    _delete_debris(table, meta, through)
    files.write(TablePaths.own(meta, TRIMMED_RECORD), through.encode())
    doomed = [(ts, instant_files(ts)) for ts in times]
    doomed += [(ts, instant_files(ts, Action.REPLACE_COMMIT)) for ts in replaces]
    doomed += [
        (ts, instant_files(ts, action))
        for ts, action in table.read_timeline(lambda t: t.completed_housekeeping())
        if ts <= through
    ]
    for _, names in sorted(doomed):
        for name in names:
            files.delete(f"{meta}/{name}")
            table.forget_metadata(name)
    files.sync_dir(meta)


def _delete_replaced(table: HudiTable, ts: str) -> None:
    """Base files of the file groups completed replacecommit ``ts`` replaced."""
    files = table.files
    replaced = table.replace_metadata(ts).get("partitionToReplaceFileIds") or {}
    for partition, file_ids in replaced.items():
        ids = set(file_ids or ())
        for name in files.listdir(partition) or []:
            m = BASE_FILE.match(name)
            if m is not None and m.group("file_id") in ids:
                files.delete(f"{partition}/{name}" if partition else name)


def _delete_debris(table: HudiTable, meta: str, through: str) -> None:
    """Files of instants up to ``through`` that never completed, found by their
    markers; they would turn visible once the timeline starts after them."""
    files = table.files
    completed = table.read_timeline(lambda t: {*t.completed, *t.replaced})
    root = f"{meta}/{MARKERS_DIR}"
    listed = files.listdir(root) or []
    for ts in [ts for ts in listed if ts <= through and ts not in completed]:
        marker_root = f"{root}/{ts}"
        for marker in list(files.files_under(marker_root)):
            rel = marker[len(marker_root) + 1 :].removesuffix(".marker.CREATE")
            if files.delete(rel):
                log.warning("deleted %s: staged by instant %s, never committed", files.uri(rel), ts)
        files.remove_tree(marker_root)
