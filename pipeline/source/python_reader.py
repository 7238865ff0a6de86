"""``source.reader: python``: the pipeline's own streaming data source (``ingest_kafka``,
pipeline/source/datasource.py) behind the reader interface of pipeline/source/choice.py.
Its options are the common ones as they are. With the arrow engine it is the batch's
offset planner (``ArrowInput.OFFSET_RANGES``): Spark's offset log and admission control
come from it, and the write tasks read the planned ranges from Kafka themselves; with the
spark engine its DataFrame's rows are read through it (``KafkaStreamReader.read``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pipeline.commit.offsets import TopicPartition
from pipeline.errors import PipelineError
from pipeline.source.arrow_input import ArrowInput
from pipeline.source.options import SOURCE_NAME

_REGISTERED: set[int] = set()  # sessions the data source is registered with


class PythonKafkaReader:
    name = "python"
    format = SOURCE_NAME
    arrow_input = ArrowInput.OFFSET_RANGES

    def batch_rows(self, df: Any, min_partitions: int | None) -> Any:
        return df  # a task per planned range already (``KafkaStreamReader.partitions``)

    def jars(self) -> list[str]:
        return []

    def session_defaults(self) -> dict[str, str]:
        return {}

    def register(self, spark: Any) -> None:
        """Once per session (pipelines of one process share it)."""
        if id(spark) in _REGISTERED:
            return
        from pipeline.source.datasource import KafkaDataSource  # PySpark >= 4.2

        spark.dataSource.register(KafkaDataSource)
        _REGISTERED.add(id(spark))

    def query_options(
        self,
        options: Mapping[str, str],
        bounds: Callable[[], Mapping[TopicPartition, tuple[int, int]]],
    ) -> dict[str, str]:
        return dict(options)

    def explain_failure(self, error: BaseException) -> PipelineError | None:
        return None  # its errors carry their [ingest:...] tag already
