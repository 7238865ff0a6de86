"""Options of the ``ingest_kafka`` source, parsed and validated from Spark's strings.

Names follow Spark's built-in Kafka source where the meaning is the same, so users can
move a job over by changing the format name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.commit.offsets import TopicPartition
from pipeline.durations import spark_duration_seconds
from pipeline.errors import ConfigError

# the rows the source gives Spark (``record_schema`` in reader.py is their Arrow form)
SPARK_DDL = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
    "timestamp TIMESTAMP, timestampType INT"
)
SPARK_DDL_HEADERS = SPARK_DDL + ", headers ARRAY<STRUCT<key: STRING, value: BINARY>>"

SOURCE_NAME = "ingest_kafka"  # the format name the Python reader registers
KNOWN = {
    "assign",
    "topics",
    "subscribe",
    "topicpattern",
    "subscribepattern",
    "startingoffsets",
    "startingtimestamp",
    "startingoffsetsbytimestampstrategy",
    "maxrecordspertrigger",
    "minrecordspertrigger",
    "maxtriggerdelay",
    "minpartitions",
    "failondataloss",
    "isolationlevel",
    "includeheaders",
    "brokerretryseconds",
}
DEFAULT_MAX_TRIGGER_DELAY_S = 15 * 60.0  # as Spark's Kafka source: "15m"


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    assign: dict[str, list[int]] | None = None
    topics: list[str] | None = None
    topic_pattern: str | None = None
    starting_offsets: str = "earliest"  # earliest | latest | json
    starting_offsets_json: dict[TopicPartition, int] | None = None
    default_for_unlisted: int = -2
    starting_timestamp_ms: int | None = None
    # a partition with no record at or after the timestamp: "error" (Spark's default) or
    # "latest" (start it at its end)
    timestamp_strategy: str = "error"
    max_records_per_trigger: int | None = None
    # no batch while fewer records are available and less than max_trigger_delay_s has
    # passed since the last batch (Spark's Kafka source: minOffsetsPerTrigger)
    min_records_per_trigger: int | None = None
    max_trigger_delay_s: float = DEFAULT_MAX_TRIGGER_DELAY_S
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    isolation_level: str = "read_committed"
    include_headers: bool = False
    broker_retry_s: float = 120.0  # planning/reading wait this long for unreachable brokers
    kafka: dict[str, str] = field(default_factory=dict)

    def consumer_conf(self) -> dict[str, Any]:
        from pipeline.kafka.client import consumer_config

        return consumer_config(
            self.bootstrap_servers, self.kafka, isolation_level=self.isolation_level
        )

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SourceOptions:
        opts = {k.lower(): v for k, v in raw.items()}
        kafka = {k[len("kafka.") :]: v for k, v in raw.items() if k.lower().startswith("kafka.")}
        unknown = sorted(
            k for k in opts if not k.startswith("kafka.") and k not in KNOWN | {"path"}
        )
        if unknown:
            raise ConfigError(
                f"unknown source option(s) {', '.join(unknown)}; allowed: "
                "assign, topics, topicPattern, startingOffsets, startingTimestamp, "
                "startingOffsetsByTimestampStrategy, "
                "maxRecordsPerTrigger, minRecordsPerTrigger, maxTriggerDelay, minPartitions, "
                "failOnDataLoss, isolationLevel, includeHeaders, brokerRetrySeconds, kafka.*"
            )
        bootstrap = kafka.pop("bootstrap.servers", None)
        if not bootstrap:
            raise ConfigError("source option kafka.bootstrap.servers is required")

        assign = _parse_assign(opts["assign"]) if "assign" in opts else None
        topics_raw = opts.get("topics") or opts.get("subscribe")
        topics = [t.strip() for t in topics_raw.split(",") if t.strip()] if topics_raw else None
        pattern = opts.get("topicpattern") or opts.get("subscribepattern")
        chosen = [
            n for n, v in (("assign", assign), ("topics", topics), ("topicPattern", pattern)) if v
        ]
        if len(chosen) != 1:
            raise ConfigError(
                "exactly one of assign, topics, topicPattern must be set "
                f"(got {', '.join(chosen) or 'none'})"
            )

        starting = opts.get("startingoffsets", "earliest").strip()
        starting_json: dict[TopicPartition, int] | None = None
        if starting not in ("earliest", "latest"):
            starting_json = _parse_starting(starting)
            starting = "json"
        ts = opts.get("startingtimestamp")
        ts_ms = _int("startingTimestamp", ts, minimum=0) if ts is not None else None
        strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise ConfigError(
                f"startingOffsetsByTimestampStrategy={strategy!r}; allowed: error, latest"
            )

        iso = opts.get("isolationlevel", "read_committed")
        if iso not in ("read_committed", "read_uncommitted"):
            raise ConfigError(f"isolationLevel={iso!r}; allowed: read_committed, read_uncommitted")
        mrpt = opts.get("maxrecordspertrigger")
        max_rows = _int("maxRecordsPerTrigger", mrpt, 1) if mrpt else None
        min_rows, delay_s = _min_rows(opts, max_rows)
        minp = opts.get("minpartitions")
        return cls(
            bootstrap_servers=bootstrap,
            assign=assign,
            topics=topics,
            topic_pattern=pattern,
            starting_offsets=starting,
            starting_offsets_json=starting_json,
            starting_timestamp_ms=ts_ms,
            timestamp_strategy=strategy,
            max_records_per_trigger=max_rows,
            min_records_per_trigger=min_rows,
            max_trigger_delay_s=delay_s,
            min_partitions=_int("minPartitions", minp, 1) if minp else None,
            fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss", "true")),
            isolation_level=iso,
            include_headers=_bool("includeHeaders", opts.get("includeheaders", "false")),
            broker_retry_s=_int("brokerRetrySeconds", opts.get("brokerretryseconds", "120"), 0),
            kafka=kafka,
        )


def _min_rows(opts: Mapping[str, str], max_rows: int | None) -> tuple[int | None, float]:
    """``minRecordsPerTrigger`` and ``maxTriggerDelay`` (in seconds), checked together."""
    raw_min, raw_delay = opts.get("minrecordspertrigger"), opts.get("maxtriggerdelay")
    min_rows = _int("minRecordsPerTrigger", raw_min, 1) if raw_min else None
    if min_rows is not None and max_rows is not None and min_rows > max_rows:
        raise ConfigError(
            f"minRecordsPerTrigger={min_rows} must not exceed maxRecordsPerTrigger={max_rows}"
        )
    if raw_delay is None:
        return min_rows, DEFAULT_MAX_TRIGGER_DELAY_S
    if min_rows is None:
        raise ConfigError("maxTriggerDelay needs minRecordsPerTrigger (it bounds that wait)")
    try:
        return min_rows, spark_duration_seconds("maxTriggerDelay", raw_delay)
    except ValueError as e:
        raise ConfigError(f"{e} (got {raw_delay!r})") from None


def _int(name: str, value: str, minimum: int) -> int:
    try:
        n = int(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not an integer") from None
    if n < minimum:
        raise ConfigError(f"{name}={n} must be >= {minimum}")
    return n


def _bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise ConfigError(f"{name}={value!r}; allowed: true, false")


def _parse_assign(text: str) -> dict[str, list[int]]:
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or not data:
            raise ValueError
        out = {str(t): sorted({int(p) for p in ps}) for t, ps in data.items()}
        if any(not ps or min(ps) < 0 for ps in out.values()):
            raise ValueError
        return out
    except (ValueError, TypeError):
        raise ConfigError(
            f'assign={text!r} must be JSON like {{"topic": [0, 1]}} '
            "(non-negative partition numbers)"
        ) from None


def _parse_starting(text: str) -> dict[TopicPartition, int]:
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError
        out = {}
        for topic, parts in data.items():
            for p, off in parts.items():
                off = int(off)
                if off < -2:
                    raise ValueError
                out[TopicPartition(str(topic), int(p))] = off
        return out
    except (ValueError, TypeError, AttributeError):
        raise ConfigError(
            f"startingOffsets={text!r}; allowed: earliest, latest, or JSON like "
            '{"topic": {"0": 42, "1": -2}} (-2 = earliest, -1 = latest)'
        ) from None
