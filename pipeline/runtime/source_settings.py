"""What the driver tells the Kafka source: the broker check before anything starts, the
source's options, the offsets a new checkpoint starts from, and the data-loss look-up."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.commit.table_set import CommitTables
from pipeline.commit.types import StagedBatch
from pipeline.config import PipelineConfig
from pipeline.errors import PipelineError

if TYPE_CHECKING:
    from pipeline.source.choice import SourceReader

log = logging.getLogger(__name__)


class SourceSettings:
    def __init__(self, cfg: PipelineConfig, tables: CommitTables) -> None:
        self.cfg = cfg
        self.tables = tables
        self.starting_offsets: str | None = None  # the running query's startingOffsets
        self._reader: SourceReader | None = None

    @property
    def reader(self) -> SourceReader:
        """The configured reader (``source.reader``; pipeline/source/choice.py)."""
        if self._reader is None:
            from pipeline.source.choice import source_reader

            self._reader = source_reader(self.cfg.source)
        return self._reader

    def consumer_conf(self) -> dict[str, Any]:
        from pipeline.kafka.client import consumer_config

        s = self.cfg.source
        return consumer_config(s.bootstrap_servers, s.kafka, isolation_level=s.isolation_level)

    def check_broker(self) -> None:
        from pipeline.kafka.client import KafkaMetadata

        s = self.cfg.source
        md = KafkaMetadata(self.consumer_conf(), timeout_s=15)
        md.check_reachable()
        if s.topics:
            md.topic_partitions(s.topics)
        elif s.assign:
            counts = md.topic_partitions(s.assign)
            for topic, parts in s.assign.items():
                missing = [p for p in parts if p >= counts[topic]]
                if missing:
                    raise PipelineError(
                        f"source.assign: topic {topic!r} has {counts[topic]} partitions; "
                        f"partition(s) {missing} do not exist"
                    )

    def options(self) -> dict[str, str]:
        s = self.cfg.source
        opts: dict[str, str] = {"kafka.bootstrap.servers": s.bootstrap_servers}
        opts.update({f"kafka.{k}": v for k, v in s.kafka.items()})
        if s.topics:
            opts["topics"] = ",".join(s.topics)
        elif s.assign:
            opts["assign"] = json.dumps(s.assign)
        elif s.topic_pattern:
            opts["topicPattern"] = s.topic_pattern
        opts["startingOffsets"] = self.resolve_starting_offsets()
        if s.starting_timestamp is not None and s.starting_offsets != "table":
            opts["startingTimestamp"] = str(s.starting_timestamp)
            opts["startingOffsetsByTimestampStrategy"] = s.starting_offsets_by_timestamp_strategy
        if s.max_records_per_trigger:
            opts["maxRecordsPerTrigger"] = str(s.max_records_per_trigger)
        if s.min_records_per_trigger:
            opts["minRecordsPerTrigger"] = str(s.min_records_per_trigger)
        if s.max_trigger_delay:
            opts["maxTriggerDelay"] = s.max_trigger_delay
        if s.min_partitions:
            opts["minPartitions"] = str(s.min_partitions)
        opts["failOnDataLoss"] = str(s.fail_on_data_loss).lower()
        opts["isolationLevel"] = s.isolation_level
        opts["includeHeaders"] = str(s.include_headers).lower()
        opts["brokerRetrySeconds"] = str(s.broker_retry_seconds)
        return opts

    def query_options(self) -> dict[str, str]:
        """The options of the pipeline's query (in its reader's terms); remembers its
        explicit starting offsets."""
        opts = self.reader.query_options(self.options(), self.partition_bounds)
        # timestamps win over startingOffsets
        self.starting_offsets = None if "startingTimestamp" in opts else opts["startingOffsets"]
        return opts

    def rehearsal_options(self) -> dict[str, str]:
        """A warm standby's rehearsal query: the same source, reading nothing old."""
        opts = {**self.options(), "startingOffsets": "latest"}
        opts.pop("startingTimestamp", None)
        return self.reader.query_options(opts, self.partition_bounds)

    def partition_bounds(self) -> dict[TopicPartition, tuple[int, int]]:
        """The source's partitions now, each with its (log start, end)."""
        from pipeline.kafka.client import KafkaMetadata

        s = self.cfg.source
        md = KafkaMetadata(self.consumer_conf(), timeout_s=15)
        tps = md.subscribed(s.assign, s.topics, s.topic_pattern)
        return {tp: (o.low, o.high) for tp, o in md.offsets(tps).items()}

    def resolve_starting_offsets(self) -> str:
        """``table`` → the table's committed end offsets (docs/design.md invariant 6); only
        used by Spark when the checkpoint is new."""
        s = self.cfg.source
        if isinstance(s.starting_offsets, dict):
            return json.dumps(s.starting_offsets)
        if s.starting_offsets != "table":
            return self._pinned(s.starting_offsets)
        self.tables.refresh()  # where reading starts: a fresh read (docs/design.md invariant 14)
        committed = self.tables.committed_offsets(self.cfg.id)
        if committed:
            log.info("resuming from the table's committed offsets %s", committed.to_json())
            return committed.to_json()  # partitions not listed start at earliest
        return self._pinned(s.starting_offsets_fallback)

    def _pinned(self, choice: str) -> str:
        """``earliest``/``latest`` as explicit offsets, read from the broker now: the
        driver then knows where the new checkpoint's first batch starts
        (:meth:`explicit_start`), so the tasks read and decode its ranges themselves (the
        arrow engine, the only one for registry formats) instead of Spark decoding the
        batch's rows with ``from_json``, many times the CPU of the next batches (figures in
        docs/bench.md). Kept as they are for a topic pattern
        (its partitions are found later)."""
        s = self.cfg.source
        if s.topic_pattern:
            return choice
        pick = 0 if choice == "earliest" else 1
        return PartitionOffsets(
            {tp: ends[pick] for tp, ends in self.partition_bounds().items()}
        ).to_json()

    def explicit_start(self, end: PartitionOffsets) -> PartitionOffsets | None:
        """Start of a checkpoint's first batch when the source's initial offsets are
        explicit for every partition in ``end`` (resumed from the table, or pinned by
        :meth:`_pinned`); None otherwise (a topic pattern's, or a partition added since:
        only the batch's own DataFrame knows its start, and that batch uses the Spark
        engine)."""
        text = self.starting_offsets
        if not text or not text.lstrip().startswith("{"):
            return None
        try:
            given = PartitionOffsets.from_json(text)
        except (ValueError, json.JSONDecodeError):
            return None
        if any(given.get(tp, -1) < 0 for tp in end):
            return None
        return PartitionOffsets({tp: given[tp] for tp in end})

    def data_loss(
        self, staged: StagedBatch, ranges: dict[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, tuple[int, int]]:
        """Ranges whose head was deleted by retention before we read it
        (only possible with failOnDataLoss=false; otherwise the source stopped)."""
        if self.cfg.source.fail_on_data_loss:
            return {}
        first = {TopicPartition(s.topic, s.partition): s.min_offset for s in staged.stats}
        suspects = [tp for tp, (s, e) in ranges.items() if first.get(tp, e) > s]
        if not suspects:
            return {}
        from pipeline.kafka.client import KafkaMetadata

        low = KafkaMetadata(self.consumer_conf()).offsets(suspects)
        out = {}
        for tp in suspects:
            s, e = ranges[tp]
            lost_end = min(low[tp].low, first.get(tp, e), e)
            if lost_end > s:
                out[tp] = (s, lost_end)
                log.warning(
                    "data loss on %s: offsets [%d, %d) were deleted by retention", tp, s, lost_end
                )
        return out
