"""Maintenance during drills: the background compaction and orphan cleanup the SIGKILL,
zombie and standby drills run with, and the compaction commits a drill observed in its
tables.

The ``kill``, ``zombie`` and ``standby`` drills run every driver with ``maintenance.compaction`` on
(:data:`DRILL_COMPACTION`: every 5 s, 4 small files per partition, 1 MiB target), so
compaction commits race ingest commits, fences and SIGKILLs (the kill drill's
``compaction-after-write`` / ``compaction-after-commit`` fault points). The rig samples
the tables' compaction commits while the drill runs (:func:`compaction_commits`: Iceberg
snapshots marked ``ingest.compaction=true`` or of operation ``replace``, Hudi completed
replacecommits); snapshot expiry and timeline trimming drop old ones, so the drill keeps
the union of what it saw. A drill with compaction on that saw none proves nothing about
it and fails.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

#: ``maintenance.compaction`` of the kill, zombie and standby drills: a drill's batches (100-300
#: records/s, 1 s trigger, 8 partitions) write ~8 small files a second, so a compaction
#: has work at every run; a 1 MiB target keeps each rewrite small on a 2-core host.
DRILL_COMPACTION: dict[str, Any] = {
    "enabled": True,
    "interval": "5 seconds",
    "minInputFiles": 4,
    "targetFileSizeBytes": 1 << 20,
}
COMPACTION_SCENARIOS = frozenset({"kill", "zombie", "standby"})
#: ``maintenance.orphans`` of the kill, zombie and standby drills: orphan cleanup beside
#: live ingest, compaction and SIGKILLs, with a safety interval short enough that killed
#: batches' files and compacted-away files are swept during the drill -- while every
#: pending instant's files (of any writer of the table) must survive (docs/design.md invariant 11).
DRILL_ORPHANS: dict[str, Any] = {
    "enabled": True,
    "olderThan": "15 seconds",
    "interval": "10 seconds",
}
#: olderThan may not be below commit.catalogRetrySeconds (a commit still retried may
#: reference a file that old); these drills have no catalog outage.
DRILL_CATALOG_RETRY_S = 15
ORPHAN_SCENARIOS = frozenset({"kill", "zombie", "standby"})
SAMPLE_S = 2.0  # Iceberg keeps 30 snapshots: ~30 s of 1 s batches; sampled well inside


def compaction_commits(tables: Any) -> set[str]:
    """``<table>@<commit>`` of every compaction commit the pipeline's tables know now
    (``TableMaintenance.compaction_commits``: Iceberg snapshots still in the metadata, Hudi
    completed replacecommits on the active timeline)."""
    return {f"{m.name}@{c}" for m in tables.maintenance() for c in m.compaction_commits()}


def per_table(commits: Iterable[str]) -> dict[str, int]:
    """Compaction commits per table, from :func:`compaction_commits` names."""
    return dict(sorted(Counter(c.rpartition("@")[0] for c in commits).items()))


def compaction_note(commits: Iterable[str]) -> str:
    counts = per_table(commits)
    total = sum(counts.values())
    where = ", ".join(f"{t}: {n}" for t, n in counts.items())
    return f"{total} compaction commit(s) during the drill" + (f" ({where})" if where else "")
