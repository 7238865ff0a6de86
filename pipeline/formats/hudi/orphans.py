"""Orphan cleanup of one Hudi table: base files nothing references, older than the safety
interval, are deleted (local directories and object stores alike, through
:class:`~pipeline.formats.hudi.storage.TableFiles`).

What counts as referenced is :meth:`TableView.referenced
<pipeline.formats.hudi.view.TableView.referenced>`: listed in the write stats of a
completed commit or replacecommit on the active timeline (files of replaced file groups
included, for time travel, until their replacecommit is trimmed -- the trim deletes them),
of an instant that is on the timeline and not completed (pending: never touched), or from
before the timeline start (readers read those). On top, the caller's ``protected`` paths
(the pipeline's pending instants' listed and staged files). Only base files (Parquet) in
the table's partition directories are candidates: never ``.hoodie/``, partition metadata
or anything else.

The data files are listed before the timeline is read, so a file committed meanwhile is
referenced by then; a file staged meanwhile belongs to a reserved (pending) instant or is
younger than any sane safety interval.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from pipeline.commit.maintenance import OrphanResult
from pipeline.formats.hudi.cow_table import HudiTable
from pipeline.formats.hudi.view import TableView
from pipeline.formats.orphans import sweep

__all__ = ["remove_orphans"]


def _relative(table: HudiTable, path: str) -> str:
    """``path`` (absolute, ``file://`` or ``s3://``) relative to the table base."""
    base = table.base.rstrip("/") + "/"
    path = path.removeprefix("file://") if not base.startswith("file://") else path
    return path.removeprefix(base)


def remove_orphans(
    table: HudiTable,
    name: str,
    older_than_s: float,
    protected: Iterable[str] = (),
    *,
    dry_run: bool = False,
    now: float | None = None,
) -> OrphanResult:
    """Delete (``dry_run``: name) the unreferenced base files of ``table`` last modified
    more than ``older_than_s`` before ``now``."""
    if not table.exists():
        return OrphanResult(name, dry_run=dry_run)
    view = TableView.load(table)
    keep = {_relative(table, p) for p in protected}
    return sweep(
        name,
        view.files,
        held=lambda f: f.rel in keep or view.referenced(f),
        uri=lambda f: table.files.uri(f.rel),
        delete=lambda f: table.files.delete(f.rel),
        older_than_s=older_than_s,
        now=time.time() if now is None else now,
        dry_run=dry_run,
    )
