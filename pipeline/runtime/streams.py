"""The driver's Spark session (built on first use) and the streaming queries it starts:
the pipeline's query and a warm standby's rehearsal of it."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pipeline.config import PipelineConfig
from pipeline.source.choice import SourceReader

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


class SparkHandle:
    """The session given to the pipeline, else one built from ``cfg.spark`` on first use
    (with the source reader's jars); the reader's format is registered on it either way."""

    def __init__(
        self,
        cfg: PipelineConfig,
        reader: SourceReader,
        spark: SparkSession | None = None,
        needs: Callable[[], tuple[list[str], dict[str, str]]] | None = None,
    ) -> None:
        self.cfg = cfg
        self.reader = reader
        self._spark = spark
        self._needs = needs  # the table writer's jars and session settings
        if spark is not None:
            reader.register(spark)

    def get(self) -> SparkSession:
        if self._spark is None:
            from pipeline.spark.session import build_spark
            from pipeline.spark.worker_daemon import FORMAT_ENV

            # a JVM started here passes it on to the local worker daemon (its imports)
            os.environ.setdefault(FORMAT_ENV, self.cfg.sink.format)
            s = self.cfg.spark
            jars, conf = self._needs() if self._needs is not None else ([], {})
            self._spark = build_spark(
                s.app_name,
                s.master,
                {**conf, **s.conf},
                jars=[*self.reader.jars(), *jars],
                suggested=self.reader.session_defaults(),
                class_archive=s.class_archive,
                driver_jit=s.driver_jit,
            )
            self.reader.register(self._spark)
        return self._spark


def start_stream(
    spark: SparkSession,
    source_format: str,
    options: dict[str, str],
    foreach_batch: Callable[[DataFrame, int], None],
    *,
    checkpoint: str,
    name: str,
    trigger: dict[str, Any],
) -> StreamingQuery:
    """A started query: raw Kafka rows of the reader's source into ``foreach_batch``. The
    batch writer decodes (spark/batch/), so Spark has no decode plan to re-analyse every
    batch when the arrow engine never runs it."""
    return (
        spark.readStream.format(source_format)
        .options(**options)
        .load()
        .writeStream.foreachBatch(foreach_batch)
        .option("checkpointLocation", checkpoint)
        .trigger(**trigger)
        .queryName(name)
        .start()
    )


def trigger_of(cfg: PipelineConfig) -> dict[str, Any]:
    """``trigger(**...)`` arguments of the configured trigger."""
    t = cfg.trigger
    if t.mode == "available-now":
        return {"availableNow": True}
    if t.mode == "once":
        return {"once": True}
    return {"processingTime": t.interval}
