"""The one switch of the Kafka source: ``source.reader``, and the two adapters behind it.

    python  our streaming data source ``ingest_kafka`` (pipeline/source/datasource.py):
            needs PySpark >= 4.2 (the Python data source's admission control)
    spark   Spark's own Kafka source (pipeline/source/spark_kafka.py): every Spark line
            with a jar set in the manifest (3.5, 4.0, 4.1, 4.2; 4.3 runs the 4.2 jars)

Both plan a batch into Spark's offset log in the same form and hand ``foreachBatch`` a
DataFrame of the same raw rows. What the arrow engine takes from a reader is its typed
``arrow_input`` (:class:`ArrowInput`): Spark's Kafka source reads the records in the JVM,
so the tasks decode the DataFrame's rows; our data source would read them in a Python
worker and hand them back to another, so there the tasks read the batch's ranges from
Kafka themselves and the data source is the batch's *offset planner* only (Spark's offset
log, admission control). The write path is picked from it in one place
(pipeline/spark/batch/paths.py). ``auto`` (the default) is ``$INGEST_SOURCE_READER``
when set, else ``python`` where it runs (the cheaper of the two: docs/bench.md), else
``spark``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from pipeline.commit.offsets import TopicPartition
from pipeline.config import SourceConfig
from pipeline.errors import ConfigError, PipelineError
from pipeline.source.arrow_input import ArrowInput
from pipeline.source.spark_line import spark_version

PYTHON_READER_SINCE = (4, 2)
READERS = ("python", "spark")


def reader_name(chosen: str = "auto", version: tuple[int, int] | None = None) -> str:
    """The reader ``source.reader: chosen`` runs with; a reader this Spark cannot run is
    refused in one line."""
    version = version or spark_version()
    if chosen == "auto":
        chosen = os.environ.get("INGEST_SOURCE_READER", "").strip().lower() or (
            "python" if version >= PYTHON_READER_SINCE else "spark"
        )
        if chosen not in READERS:
            raise ConfigError(f"INGEST_SOURCE_READER={chosen!r}; allowed: {', '.join(READERS)}")
    if chosen == "python" and version < PYTHON_READER_SINCE:
        raise ConfigError(
            f"source.reader: python needs PySpark >= 4.2 (installed: "
            f"{version[0]}.{version[1]}); use source.reader: spark (Spark's Kafka source)"
        )
    return chosen


class SourceReader(Protocol):
    """How the pipeline's query reads Kafka: the Spark format, what the session needs, and
    the query's options from the common ones (``SourceSettings.options``)."""

    name: str
    format: str
    arrow_input: ArrowInput  # what the arrow engine's tasks take from this reader

    def batch_rows(self, df: Any, min_partitions: int | None) -> Any:
        """The batch DataFrame ``df`` as the tasks that scan it should get it."""
        ...

    def jars(self) -> list[str]:
        """Jars the session needs on its class path."""
        ...

    def session_defaults(self) -> dict[str, str]:
        """Spark settings the reader suggests (spark-submit's and ``spark.conf`` win)."""
        ...

    def register(self, spark: Any) -> None:
        """Make the format known to ``spark``."""
        ...

    def query_options(
        self,
        options: Mapping[str, str],
        bounds: Callable[[], Mapping[TopicPartition, tuple[int, int]]],
    ) -> dict[str, str]:
        """The query's options from the common ones; ``bounds()``: the resolved partitions
        with their (log start, end), asked only by a reader that needs them."""
        ...

    def explain_failure(self, error: BaseException) -> PipelineError | None:
        """The one-line error for a query failure of this reader's own, else None."""
        ...


def source_reader(source: SourceConfig, version: tuple[int, int] | None = None) -> SourceReader:
    version = version or spark_version()
    if reader_name(source.reader, version) == "spark":
        from pipeline.source.spark_kafka import SparkKafkaReader

        return SparkKafkaReader(version)
    from pipeline.source.python_reader import PythonKafkaReader

    return PythonKafkaReader()
