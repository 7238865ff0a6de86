"""Metrics of the tables' data files: live files, their average size, compaction and
orphan cleanup (fed by :mod:`pipeline.maintenance_scheduler` through the observers).

``table`` labels are the pipeline's own tables (main, dead-letter; ``both``: three), so
the series stay bounded.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from pipeline.commit.maintenance import CompactionResult, FileStats, OrphanResult

__all__ = ["FileMetrics"]


class FileMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.files = Gauge(
            "ingest_table_data_files",
            "Live data files of the table (what a reader of its head opens).",
            ["table"],
            registry=r,
        )
        self.average = Gauge(
            "ingest_table_data_file_average_bytes",
            "Average size of the table's live data files.",
            ["table"],
            registry=r,
        )
        self.compactions = Counter(
            "ingest_compactions_total",
            "Compaction commits (each replaces small files by fewer larger ones).",
            ["table"],
            registry=r,
        )
        self.compacted = Counter(
            "ingest_compacted_files_total",
            "Small data files replaced by compaction.",
            ["table"],
            registry=r,
        )
        self.orphans = Counter(
            "ingest_orphan_files_removed_total",
            "Unreferenced data files deleted by orphan cleanup.",
            ["table"],
            registry=r,
        )

    def observe(self, result: CompactionResult | OrphanResult | FileStats) -> None:
        if isinstance(result, FileStats):
            self.files.labels(result.table).set(result.files)
            self.average.labels(result.table).set(result.average_bytes)
        elif isinstance(result, CompactionResult):
            if result.commit is not None:
                self.compactions.labels(result.table).inc()
                self.compacted.labels(result.table).inc(result.rewritten_files)
        elif not result.dry_run:
            self.orphans.labels(result.table).inc(len(result.removed))
