"""The ``hudi`` table format written by Hudi's own Spark writer (``sink.hudi.writer:
spark``): the native format's locations and readers, this writer's tables."""

from __future__ import annotations

from typing import Any

from pipeline.config import PipelineConfig
from pipeline.formats.base import TableStatus
from pipeline.formats.hudi.format import HudiFormat


class HudiSparkFormat(HudiFormat):
    """Where the tables are and how they are read is the native format's; what writes
    them and what ``ingest status`` shows is this writer's."""

    def open_tables(self, cfg: PipelineConfig, faults: Any = None) -> Any:
        from pipeline.formats.hudi_spark.tables import HudiSparkTables

        return HudiSparkTables.from_config(cfg)

    def status(self, tables: Any, pipeline_id: str) -> list[TableStatus]:
        return [tables.main.status(pipeline_id)]
