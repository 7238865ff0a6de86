"""The one switch on the configured table format: which :class:`TableFormat` serves a
pipeline. Everything else asks the format (:mod:`pipeline.formats.base`)."""

from __future__ import annotations

from pipeline.commit.faults import FaultPoints
from pipeline.config import PipelineConfig
from pipeline.errors import ConfigError
from pipeline.formats.base import PipelineTables, TableFormat

__all__ = ["FORMAT_NAMES", "format_named", "open_tables", "table_format"]

FORMAT_NAMES: tuple[str, ...] = ("iceberg", "hudi", "both")


def format_named(name: str) -> TableFormat:
    """The format called ``name`` (``iceberg``, ``hudi`` or ``both``)."""
    if name == "iceberg":
        from pipeline.formats.iceberg.format import IcebergFormat

        return IcebergFormat()
    if name == "hudi":
        from pipeline.formats.hudi.format import HudiFormat

        return HudiFormat()
    if name == "both":
        from pipeline.formats.both import DualFormat

        return DualFormat()
    raise ConfigError(f"table format {name!r}: allowed: {', '.join(FORMAT_NAMES)}")


def table_format(cfg: PipelineConfig) -> TableFormat:
    """The format of ``cfg``'s sink (``hudi`` written by Hudi's own Spark writer when
    ``sink.hudi.writer`` is ``spark``)."""
    hudi = cfg.sink.hudi
    if cfg.sink.format == "hudi" and hudi is not None and hudi.writer == "spark":
        from pipeline.formats.hudi_spark.format import HudiSparkFormat

        return HudiSparkFormat()
    return format_named(cfg.sink.format)


def open_tables(cfg: PipelineConfig, faults: FaultPoints | None = None) -> PipelineTables:
    """The pipeline's tables (main + dead-letter committers, timeline, task plan)."""
    return table_format(cfg).open_tables(cfg, faults)
