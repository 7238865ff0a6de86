"""``ingest_kafka``: a PySpark Python streaming data source over explicitly assigned ranges.

Spark calls the planning methods (``initialOffset``, ``latestOffset``, ``partitions``) in
one long-lived Python worker and ``read`` in task workers. Offsets travel through Spark's
offset log as ``{"topic": {"partition": next_offset}, "#topicIds": {"topic": id}}``; Kafka
consumer groups are never used (docs/design.md invariant 1).

With ``decode.engine: arrow`` this source is the batch's *offset planner* only (its
offset log, its admission control): the write tasks read the planned ranges themselves
(pipeline/spark/batch/ranges.py) and ``read`` does not run. It runs when the batch
DataFrame's rows are what the tasks take: the spark engine, and a batch whose start the
driver does not know (pipeline/spark/batch/paths.py).

Planning rules
  * ``latestOffset`` reconciles the start with the broker (new partitions appear in the
    end offsets at their log start and are read from the next batch on, so every batch's
    ranges are fixed by two logged offset maps and a replay reads the same records);
    vanished partitions, a re-created topic (its id changed), a truncated log (same id,
    end below our offset) and retention loss raise tagged pipeline errors.
  * Admission control: ``maxRecordsPerTrigger`` through Spark's ``ReadMaxRows`` limit,
    ignored when Spark passes ``ReadAllAvailable`` (Trigger.AvailableNow, ``once``).
    ``minRecordsPerTrigger`` / ``maxTriggerDelay`` are applied by the reader itself:
    ``latestOffset`` returns the start unchanged (Spark runs no batch) while too few
    records are available and the delay since the last admitted batch (or since the
    reader started) has not passed. pyspark's ``ReadMinRows`` cannot carry both: it has
    no delay, and Spark hands ``latestOffset`` back exactly the one built-in limit
    ``getDefaultReadLimit`` returned (no composite with ``ReadMaxRows``). It is still the
    default limit when only a minimum is set, because a ``ReadAllAvailable`` default
    could not be told apart from the one ``Trigger.Once`` passes. The minimum is ignored
    under ``ReadAllAvailable`` (``once``) and once an AvailableNow target is fixed: those
    runs read everything up to their end.
  * ``Trigger.AvailableNow``: the target is fixed when Spark calls
    ``prepareForTriggerAvailableNow``; nothing beyond it is planned.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from pipeline.commit.offsets import (
    OffsetRange,
    PartitionOffsets,
    TopicPartition,
    available_records,
    hold_trigger,
    offsets_with_topic_ids,
    plan_end,
    planned_ranges,
    reconcile,
    split_ranges,
    topic_ids_in,
)
from pipeline.errors import ConfigError
from pipeline.source.options import SOURCE_NAME, SPARK_DDL, SPARK_DDL_HEADERS, SourceOptions

if TYPE_CHECKING:
    import pyarrow as pa


class RangePartition(InputPartition):
    """One Spark task: the exact offset ranges it reads (pickled to the task)."""

    def __init__(self, ranges: Sequence[OffsetRange]) -> None:
        super().__init__(tuple(ranges))
        self.ranges: tuple[OffsetRange, ...] = tuple(ranges)


class KafkaDataSource(DataSource):
    """Register with ``spark.dataSource.register(KafkaDataSource)``; read with
    ``spark.readStream.format("ingest_kafka").options(...)``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        opts = SourceOptions.parse(dict(self.options))
        return SPARK_DDL_HEADERS if opts.include_headers else SPARK_DDL

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(SourceOptions.parse(dict(self.options)))


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._metadata: Any = None
        self._target: PartitionOffsets | None = None  # Trigger.AvailableNow cap
        self._reported: PartitionOffsets | None = None  # broker ends seen by latestOffset
        # when the last batch was admitted (or the reader started): maxTriggerDelay's clock
        self._admitted_at = time.monotonic()

    # -- planning (long-lived planner worker) ---------------------------------------
    @property
    def metadata(self) -> Any:
        if self._metadata is None:
            from pipeline.kafka.client import KafkaMetadata

            self._metadata = KafkaMetadata(
                self.options.consumer_conf(), retry_s=self.options.broker_retry_s
            )
        return self._metadata

    def _current_partitions(self) -> list[TopicPartition]:
        o = self.options
        return self.metadata.subscribed(o.assign, o.topics, o.topic_pattern)

    def initialOffset(self) -> dict:
        o = self.options
        tps = self._current_partitions()
        broker = self.metadata.offsets(tps)
        if o.starting_timestamp_ms is not None:
            start = self._timestamp_starts(tps, broker)
        else:
            start = {}
            explicit = o.starting_offsets_json or {}
            for tp in tps:
                spec = explicit.get(tp, -2 if o.starting_offsets == "earliest" else -1)
                if o.starting_offsets_json is not None and tp not in explicit:
                    spec = o.default_for_unlisted
                if spec == -2:
                    start[tp] = broker[tp].low
                elif spec == -1:
                    start[tp] = broker[tp].high
                else:
                    start[tp] = spec
        ids = self.metadata.topic_ids(tp.topic for tp in tps)
        return offsets_with_topic_ids(PartitionOffsets(start), ids)

    def _timestamp_starts(
        self, tps: list[TopicPartition], broker: dict[TopicPartition, Any]
    ) -> dict[TopicPartition, int]:
        """Where ``startingTimestamp`` starts each partition. A partition holding records
        but none at or after the timestamp is an error unless the strategy is ``latest``
        (then it starts at its end); an empty partition starts at its end either way."""
        ts = self.options.starting_timestamp_ms or 0
        found = self.metadata.offsets_for_timestamp(tps, ts)
        past = [tp for tp in tps if found[tp] is None and broker[tp].high > broker[tp].low]
        if past and self.options.timestamp_strategy == "error":
            shown = ", ".join(str(tp) for tp in past[:5]) + (" ..." if len(past) > 5 else "")
            raise ConfigError(
                f"startingTimestamp={ts}: no record at or after it in {len(past)} "
                f"partition(s) ({shown}); set startingOffsetsByTimestampStrategy=latest to "
                "start those at their end"
            )
        return {tp: found[tp] if found[tp] is not None else broker[tp].high for tp in tps}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = PartitionOffsets.from_dict(start)
        tps = sorted(self._current_partitions())
        broker = self.metadata.offsets(tps)
        ids = self.metadata.topic_ids({tp.topic for tp in tps} | {tp.topic for tp in begin})
        rec = reconcile(
            begin,
            broker,
            fail_on_data_loss=self.options.fail_on_data_loss,
            recorded_ids=topic_ids_in(start),
            current_ids=ids,
        )
        latest = {tp: b.high for tp, b in broker.items()}
        # Spark asks reportLatestOffset right after this: answer from the same listing
        self._reported = PartitionOffsets(latest)
        if self._target is not None:
            latest = {tp: min(h, self._target.get(tp, rec.start[tp])) for tp, h in latest.items()}
        now = time.monotonic()
        if hold_trigger(
            available_records(rec.start, latest),
            self.options.min_records_per_trigger,
            now - self._admitted_at,
            self.options.max_trigger_delay_s,
            read_all=isinstance(limit, ReadAllAvailable) or self._target is not None,
        ):
            return start  # unchanged: Spark runs no batch
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        # New partitions only enter the offset map this batch; their data is read from the
        # next one, so each batch's ranges are fully determined by logged offsets.
        known = PartitionOffsets({tp: off for tp, off in rec.start.items() if tp in begin})
        end = plan_end(known, latest, max_rows)
        new = {tp: rec.start[tp] for tp in rec.new_partitions}
        planned = end.updated(new)
        if planned == begin:
            return start  # nothing new; the same entry, so Spark runs no batch
        self._admitted_at = now
        return offsets_with_topic_ids(planned, ids)

    def getDefaultReadLimit(self) -> ReadLimit:
        # Spark passes this limit back to latestOffset; Trigger.Once passes
        # ReadAllAvailable instead. The minimum itself is read from the options.
        o = self.options
        if o.max_records_per_trigger:
            return ReadMaxRows(o.max_records_per_trigger)
        if o.min_records_per_trigger:
            return ReadMinRows(o.min_records_per_trigger)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict | None:
        if self._reported is not None:  # listed by this trigger's latestOffset
            reported, self._reported = self._reported, None
            return reported.to_dict()
        try:
            tps = self._current_partitions()
            return PartitionOffsets(
                {tp: b.high for tp, b in self.metadata.offsets(tps).items()}
            ).to_dict()
        except Exception:
            return None

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self._current_partitions()
        self._target = PartitionOffsets(
            {tp: b.high for tp, b in self.metadata.offsets(tps).items()}
        )

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        ranges = planned_ranges(PartitionOffsets.from_dict(start), PartitionOffsets.from_dict(end))
        pieces = split_ranges(ranges, self.options.min_partitions)
        return [RangePartition([r]) for r in pieces]

    def commit(self, end: dict) -> None:
        # Deliberately nothing: Kafka is never told what we consumed (docs/design.md invariant 1).
        return None

    # -- reading (task workers) -----------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # imported here: the processes that only create or plan the source (one each at a
        # query's start, each importing it anew) need neither pyarrow nor the reader
        from pipeline.source.reader import read_ranges

        assert isinstance(partition, RangePartition)
        yield from read_ranges(
            self.options.consumer_conf(),
            partition.ranges,
            include_headers=self.options.include_headers,
            fail_on_data_loss=self.options.fail_on_data_loss,
            stall_timeout_s=max(self.options.broker_retry_s, 1.0),
        )
