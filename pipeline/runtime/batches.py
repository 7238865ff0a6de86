"""One micro-batch through the coordinator (Spark's ``foreachBatch`` callback).

offsets  -- this batch's end from Spark's offset log; its start is the previous
            batch's end (remembered, else read), or the source's explicit offsets
write    -- the batch's write adapter (runtime/batch_writes.py) runs the workers (read,
            decode, stage files)
commit   -- ``coordinator.run_batch``: recovery, dedupe, the two-phase commit
report   -- the run's stats, one log line, the observers
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from pipeline.commit.faults import FaultPoint, FaultPoints, format_faults
from pipeline.commit.journal import InstantTimeline
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.commit.protocol import BatchCoordinator
from pipeline.commit.types import BatchOutcome, RereadFn, WriteFn
from pipeline.config import PipelineConfig
from pipeline.errors import PipelineError
from pipeline.formats.base import BatchWrite, PipelineTables
from pipeline.observe.base import Observers
from pipeline.runtime.batch_writes import BatchWrites
from pipeline.runtime.fencing import FenceGuard
from pipeline.runtime.source_settings import SourceSettings
from pipeline.runtime.stats import RunStats
from pipeline.runtime.stopping import StopControl

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


log = logging.getLogger(__name__)

PURGE_EVERY = 50  # batches between purges of finished journal entries


class BatchRunner:
    def __init__(
        self,
        cfg: PipelineConfig,
        *,
        tables: PipelineTables,
        coordinator: BatchCoordinator,
        timeline: InstantTimeline | None,
        faults: FaultPoints,
        source: SourceSettings,
        stats: RunStats,
        observers: Observers,
        fence: FenceGuard,
        stop: StopControl,
        spark: Callable[[], SparkSession],
        before_batch: Sequence[Callable[[PartitionOffsets], None]] = (),
    ) -> None:
        self.cfg = cfg
        self.tables = tables
        self.coordinator = coordinator
        self.timeline = timeline
        self.faults = faults
        self.source = source
        self.stats = stats
        self.observers = observers
        self.fence = fence
        self.stop = stop
        self._spark = spark
        # checks of a batch's end offsets before its effects; each may raise to have the
        # run start again and Spark replay the batch (a registry subject's new version:
        # SchemaAdvanced; a new topic of a pattern routed by template: TableSetGrew)
        self._before_batch = list(before_batch)
        self._incarnation: str | None = None
        # (batch id, its logged end offsets): the next batch's start, without a second read
        self._last_end: tuple[int, PartitionOffsets] | None = None
        # the tasks know no batch id: an armed mid-write fault acts in every batch
        armed = format_faults(
            dataclasses.replace(f, batch=None) for f in faults.at(FaultPoint.MID_WRITE)
        )
        self._writes = BatchWrites(cfg, tables, source, armed)

    def incarnation(self) -> str:
        """The checkpoint's query id (batch ids restart with a new checkpoint)."""
        if self._incarnation is None:
            from pipeline.spark.offset_log import SparkOffsetLog

            log_ = SparkOffsetLog(self._spark(), self.cfg.checkpoint_location)
            self._incarnation = log_.query_id()
        return self._incarnation

    def process_batch(self, df: DataFrame, batch_id: int) -> None:
        """foreachBatch: one batch through the coordinator. A graceful stop waits for it."""
        if not self.stop.enter_batch():
            raise self.stop.halted(batch_id)  # not a failure: never logged as committed
        try:
            try:
                self._process_batch(df, batch_id)
            finally:
                self.stop.leave_batch()
        except Exception as e:
            self.observers.failure(e, batch_id)  # fencing included
            raise

    def _process_batch(self, df: DataFrame, batch_id: int) -> None:
        from pipeline.spark.settle import settle

        start, end = self._offsets(df, batch_id)
        for check in self._before_batch:  # after the offsets: pipeline.decode.registry.watch
            check(end)
        writer = self._writer(df, start, end)
        with self.fence.watch(report=False):  # process_batch reports the failure
            outcome = self.coordinator.run_batch(
                self.incarnation(),
                batch_id,
                start,
                end,
                writer.write,
                reread=self._reread(df),  # the gap check and read coverage (invariant 8)
                count=self._count_records,
            )
        self._report(batch_id, outcome)
        settle()  # after the first batch: the driver's imports and caches are in place
        if self.timeline is not None and batch_id % PURGE_EVERY == 0:
            self.timeline.purge_finished(self.cfg.commit.journal_retention)

    def _offsets(
        self, df: DataFrame, batch_id: int
    ) -> tuple[PartitionOffsets | None, PartitionOffsets]:
        """(start, end) of the batch: its offset-log entry and the previous batch's."""
        from pipeline.spark.offset_log import SparkOffsetLog

        offset_log = SparkOffsetLog(df.sparkSession, self.cfg.checkpoint_location)
        end = offset_log.offsets(batch_id)
        if end is None:
            raise PipelineError(f"offset log entry for batch {batch_id} is missing")
        # an offset log entry never changes once written: the previous batch's end is ours
        last = self._last_end
        start = last[1] if last is not None and last[0] == batch_id - 1 else None
        if start is None:
            start = offset_log.offsets(batch_id - 1)
        self._last_end = (batch_id, end)
        return start, end

    def _reread(self, df: DataFrame) -> RereadFn | None:
        """Writes of other ranges than Spark planned (gap rewind, repairs): the adapter
        named by ``reread_path`` (tasks that read the ranges, whatever the configured
        reader and engine); None when the format writes through its own engine."""
        path = self._writes.reread_path()
        if path is None:
            return None

        def reread(start: PartitionOffsets, end: PartitionOffsets) -> WriteFn:
            return self._writes.named(path, df, start, end).write

        return reread

    def _count_records(
        self, ranges: Mapping[TopicPartition, tuple[int, int]]
    ) -> Mapping[TopicPartition, int]:
        from pipeline.kafka.counting import count_records

        timeout = max(float(self.cfg.source.broker_retry_seconds), 1.0)
        return count_records(self.source.consumer_conf(), ranges, timeout)

    def _writer(
        self, df: DataFrame, start: PartitionOffsets | None, end: PartitionOffsets
    ) -> BatchWrite:
        return self._writes.planned(df, start, end)

    def _report(self, batch_id: int, outcome: BatchOutcome) -> None:
        self.stats.add(outcome)
        log.info(
            "batch %d %s: instant %s, %d records, %d dead letters, %d files",
            batch_id,
            outcome.outcome,
            outcome.instant,
            outcome.records,
            outcome.dead_letter_records,
            outcome.files,
        )
        self.observers.outcome(outcome)
