"""``ingest compact``: compaction or orphan cleanup of a pipeline's tables, once.

It runs beside a live pipeline or without one. It holds no writer epoch (it must not
fence the running writer out): its commits are optimistic like the pipeline's own, carry
the head's checkpoint forward unchanged and re-plan when an ingest commit wins the race.
"""

from __future__ import annotations

from rich.console import Console

from pipeline.commit.faults import FaultPoints
from pipeline.commit.maintenance import CompactionPolicy, CompactionResult, OrphanResult
from pipeline.config import PipelineConfig
from pipeline.errors import ConfigError
from pipeline.formats import registry
from pipeline.maintenance_scheduler import Maintenance, compaction_policy

__all__ = ["run_compact"]


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def run_compact(
    cfg: PipelineConfig,
    console: Console,
    *,
    orphans: bool = False,
    older_than_s: float | None = None,
    dry_run: bool = False,
    target_file_size_bytes: int | None = None,
    min_input_files: int | None = None,
) -> list[CompactionResult] | list[OrphanResult]:
    """Compact every table of the pipeline (or, ``orphans``, remove orphan files) and
    print one line per table."""
    window = cfg.commit.catalog_retry_seconds
    if older_than_s is not None and older_than_s < window:
        raise ConfigError(
            f"--older-than {older_than_s:g} s is below commit.catalogRetrySeconds ({window:g} s):"
            " a commit still being retried may reference a file that old"
        )
    tables = registry.table_format(cfg).open_tables(cfg, FaultPoints(""))
    maintenance = Maintenance(cfg, tables)
    if orphans:
        removed = maintenance.remove_orphans(older_than_s, dry_run=dry_run)
        for r in removed:
            verb = "would remove" if r.dry_run else "removed"
            console.print(
                f"{r.table}: {verb} {len(r.removed)} orphan files ({_mib(r.removed_bytes)}); "
                f"kept {r.too_young} younger than the safety interval, {r.referenced} referenced"
                + (f"; {len(r.errors)} not removed (see log)" if r.errors else ""),
                markup=False,
                highlight=False,
            )
        return removed
    base = compaction_policy(cfg)
    policy = CompactionPolicy(
        target_file_size_bytes=target_file_size_bytes or base.target_file_size_bytes,
        min_input_files=min_input_files or base.min_input_files,
    )
    if dry_run:
        raise ConfigError("--dry-run applies to --orphans only")
    before = {s.table: s for s in maintenance.file_stats()}
    compacted = maintenance.compact(policy)
    after = {s.table: s for s in maintenance.file_stats()}
    for c in compacted:
        b, a = before[c.table], after[c.table]
        what = (
            f"compacted {c.rewritten_files} files into {c.written_files} (commit {c.commit})"
            if c.commit
            else "nothing to compact"
        )
        console.print(
            f"{c.table}: {what}; live data files {b.files} -> {a.files}, "
            f"average {_mib(b.average_bytes)} -> {_mib(a.average_bytes)}",
            markup=False,
            highlight=False,
        )
    return compacted
