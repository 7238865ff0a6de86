"""The commits Hudi archived off its active timeline (timeline layout 2, table version 8+):
the LSM history under ``.hoodie/timeline/history``.

Hudi keeps ``hoodie.keep.max.commits`` (30 by default) completed instants active and moves
older ones into Parquet files listed by the manifest ``manifest_<v>`` that ``_version_``
names; a file lists instants with ``instantTime``, ``completionTime`` and ``action``.
Compaction of the history writes a new manifest version before deleting the files it
merged, so a read that loses that race reads again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

HISTORY = Path(".hoodie") / "timeline" / "history"


def archived_commits(base: Path) -> dict[str, str]:
    """Requested -> completion time of every archived ``commit`` instant of the table at
    ``base`` (empty when nothing was archived)."""
    history = base / HISTORY
    for attempt in range(3):
        try:
            return _read(history)
        except FileNotFoundError:
            if attempt == 2:
                raise
    return {}


def _read(history: Path) -> dict[str, str]:
    version_file = history / "_version_"
    if not version_file.is_file():
        return {}
    version = version_file.read_text().strip()
    manifest = json.loads((history / f"manifest_{version}").read_text())
    out: dict[str, str] = {}
    for entry in manifest.get("files") or []:
        table = pq.read_table(
            history / entry["fileName"], columns=["instantTime", "completionTime", "action"]
        )
        for requested, completed, action in zip(
            *(table.column(c).to_pylist() for c in ("instantTime", "completionTime", "action")),
            strict=True,
        ):
            if action == "commit":
                out[str(requested)] = str(completed)
    return out
