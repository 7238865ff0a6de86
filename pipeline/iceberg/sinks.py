"""The pipeline's Iceberg tables (main + dead-letter) as coordinator commit targets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from pipeline.commit.coordinator import Checkpoint
from pipeline.config import PipelineConfig
from pipeline.iceberg.schema import (
    KAFKA_COLUMN_NAMES,
    FieldSpec,
    build_partition_spec,
    build_schema,
    dead_letter_schema,
    spark_ddl,
)
from pipeline.iceberg.table import CommitCheckpoint, IcebergTableSink, load_catalog
from pipeline.iceberg.writer import write_data_files
from pipeline.source.offsets import PartitionOffsets, TopicPartition
from pipeline.spark.writer import TaskPlan


class IcebergCommitter:
    """Adapts an ``IcebergTableSink`` to the coordinator's ``TableCommitter`` protocol."""

    def __init__(self, sink: IcebergTableSink) -> None:
        self.sink = sink

    def is_committed(self, pipeline_id: str, incarnation: str, batch_id: int) -> bool:
        return self.sink.is_committed(pipeline_id, incarnation, batch_id)

    def committed_offsets(self, pipeline_id: str) -> PartitionOffsets | None:
        cp = self.sink.latest_checkpoint(pipeline_id)
        if cp is None:
            return None
        return PartitionOffsets(
            {TopicPartition(t, p): off for (t, p), off in cp.committed_offsets.items()}
        )

    def commit(self, files: list[bytes], checkpoint: Checkpoint) -> None:
        self.sink.commit(
            files,
            CommitCheckpoint(
                pipeline_id=checkpoint.pipeline_id,
                incarnation=checkpoint.incarnation,
                batch_id=checkpoint.batch_id,
                epoch=checkpoint.epoch,
                ranges=checkpoint.ranges,
                committed_offsets=dict(checkpoint.committed),
                records=checkpoint.records,
                data_loss=checkpoint.data_loss or None,
                dead_letter_records=checkpoint.dead_letter_records,
            ),
        )

    def table(self) -> Table | None:
        return self.sink.load()


@dataclass
class IcebergSinks:
    main: IcebergCommitter
    dead_letter: IcebergCommitter | None
    main_schema: Schema
    data_ddl: str  # Spark DDL of the decoded (non-Kafka) columns
    flush_bytes: int

    @classmethod
    def from_config(cls, cfg: PipelineConfig) -> IcebergSinks:
        sink = cfg.sink
        catalog = load_catalog(sink.catalog.name, sink.catalog.pyiceberg_properties())
        raw = cfg.decode.format == "raw"
        fields = [FieldSpec(f.name, f.type, f.required, f.doc) for f in cfg.decode.schema_]
        schema = build_schema(fields, raw=raw)
        spec = (
            build_partition_spec(schema, sink.partition_by)
            if sink.partition_by
            else (UNPARTITIONED_PARTITION_SPEC)
        )
        props = {
            "write.target-file-size-bytes": str(sink.target_file_size_bytes),
            **sink.table_properties,
        }
        main = IcebergTableSink(catalog, sink.table, schema, spec, props)
        dead = IcebergTableSink(
            catalog,
            sink.dead_letter_identifier,
            dead_letter_schema(),
            UNPARTITIONED_PARTITION_SPEC,
            sink.table_properties,
        )
        data_schema = Schema(
            *[f for f in schema.fields if f.name not in KAFKA_COLUMN_NAMES and not raw]
        )
        return cls(
            main=IcebergCommitter(main),
            dead_letter=IcebergCommitter(dead),
            main_schema=schema,
            data_ddl=spark_ddl(data_schema) if not raw else "",
            flush_bytes=min(sink.target_file_size_bytes, 256 * 1024 * 1024),
        )

    def task_plan(self, write_uuid: str) -> TaskPlan:
        dead: Any = self.dead_letter
        return TaskPlan(
            write_files=write_data_files,
            main_ctx=self.main.sink.write_context(write_uuid),
            main_columns=tuple(f.name for f in self.main_schema.fields),
            dead_letter_ctx=dead.sink.write_context(write_uuid) if dead else None,
            dead_letter_columns=tuple(f.name for f in dead_letter_schema().fields),
            flush_bytes=self.flush_bytes,
        )
