"""The ``iceberg`` table format: the :class:`~pipeline.formats.base.TableFormat` of an
Iceberg main table and an Iceberg dead-letter table in ``sink.catalog``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.config import PipelineConfig
from pipeline.formats.base import TableRef, TableSet, TableStatus
from pipeline.formats.routes import table_routes


class IcebergFormat:
    name = "iceberg"

    def open_tables(self, cfg: PipelineConfig, faults: Any = None) -> Any:
        from pipeline.formats.iceberg.pipeline_tables import IcebergTables

        return IcebergTables.from_config(cfg)

    def writable_paths(self, cfg: PipelineConfig) -> list[tuple[str, str]]:
        return [("sink.catalog.warehouse", cfg.sink.catalog.warehouse)]

    def table_sets(self, cfg: PipelineConfig) -> list[TableSet]:
        dead = TableRef("iceberg", cfg.sink.dead_letter_identifier)
        routes = table_routes(cfg)
        if routes is None:
            return [TableSet(TableRef("iceberg", cfg.sink.table), dead)]
        return [
            TableSet(TableRef("iceberg", t.identifier), dead, routes.router, i)
            for i, t in enumerate(routes.tables)
        ]

    def status(self, tables: Any, pipeline_id: str) -> list[TableStatus]:
        from pipeline.formats.iceberg.status import iceberg_table_status

        return [iceberg_table_status(c, pipeline_id) for _, c in tables.mains()]

    def local_sink(self, workdir: Path) -> dict[str, Any]:
        return {}
