"""The ``hudi`` table format: the :class:`~pipeline.formats.base.TableFormat` of a Hudi
main table and a Hudi dead-letter table (no Iceberg catalog, no pyiceberg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.config import PipelineConfig
from pipeline.errors import ConfigError
from pipeline.formats.base import TableRef, TableSet, TableStatus
from pipeline.formats.routes import table_routes


def hudi_locations(cfg: PipelineConfig) -> tuple[str, str]:
    """``(base path, dead-letter base path)`` as configured (the latter defaults to
    ``<basePath>_dead_letter``)."""
    hudi = cfg.sink.hudi
    if hudi is None:
        raise ConfigError("sink.hudi.basePath is required to read a Hudi table")
    dead = hudi.dead_letter_base_path or hudi.base_path.rstrip("/") + "_dead_letter"
    return hudi.base_path, dead


def hudi_reader(cfg: PipelineConfig, location: str) -> tuple[str, dict[str, str]] | None:
    """``(base URI, hudi-rs storage options)`` of the Hudi table at ``location`` (a base
    path of ``cfg``); None while the table does not exist."""
    from pipeline.formats.hudi.layout import TablePaths
    from pipeline.formats.hudi.storage import S3Files, open_location, reader_options

    props = cfg.sink.hudi.properties if cfg.sink.hudi is not None else {}
    files = open_location(location, props)
    if not TablePaths(files).exists():
        return None
    return files.base, reader_options(files.settings if isinstance(files, S3Files) else None)


class HudiFormat:
    name = "hudi"

    def open_tables(self, cfg: PipelineConfig, faults: Any = None) -> Any:
        from pipeline.formats.hudi.pipeline_tables import HudiTables

        return HudiTables.from_config(cfg)

    def writable_paths(self, cfg: PipelineConfig) -> list[tuple[str, str]]:
        if cfg.sink.hudi is None:
            return []
        base, dead = hudi_locations(cfg)
        return [("sink.hudi.basePath", base), ("sink.hudi.deadLetterBasePath", dead)]

    def table_sets(self, cfg: PipelineConfig) -> list[TableSet]:
        base, dead = hudi_locations(cfg)
        routes = table_routes(cfg)
        if routes is None:
            return [TableSet(TableRef("hudi", base), TableRef("hudi", dead))]
        from pipeline.formats.hudi.pipeline_tables import routed_bases

        return [
            TableSet(TableRef("hudi", location), TableRef("hudi", dead), routes.router, i)
            for i, (_, location) in enumerate(routed_bases(cfg, routes))
        ]

    def status(self, tables: Any, pipeline_id: str) -> list[TableStatus]:
        from pipeline.formats.hudi.status import hudi_table_status

        return [hudi_table_status(c, pipeline_id) for _, c in tables.mains()]

    def local_sink(self, workdir: Path) -> dict[str, Any]:
        return {"hudi": {"basePath": str(workdir / "hudi" / "events")}}
