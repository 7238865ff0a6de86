"""``source``: the Kafka topics, offsets and consumer settings."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from pipeline.config.base import _Model, masked_settings
from pipeline.durations import normalize_duration


class SourceConfig(_Model):
    bootstrap_servers: str = Field(min_length=1)
    # which Kafka source plans and reads: ``python`` (our streaming data source, PySpark
    # >= 4.2) or ``spark`` (Spark's own Kafka source, every supported Spark line);
    # ``auto``: $INGEST_SOURCE_READER, else python where it runs, else spark
    # (pipeline/source/choice.py)
    reader: Literal["auto", "python", "spark"] = "auto"
    topics: list[str] | None = None
    assign: dict[str, list[int]] | None = None
    topic_pattern: str | None = None
    # "table": resume from the committed offsets of the table (docs/design.md invariant 6)
    starting_offsets: Literal["table", "earliest", "latest"] | dict[str, dict[str, int]] = "table"
    starting_offsets_fallback: Literal["earliest", "latest"] = "earliest"
    starting_timestamp: int | None = Field(default=None, ge=0)
    starting_offsets_by_timestamp_strategy: Literal["error", "latest"] = "error"
    max_records_per_trigger: int | None = Field(default=None, ge=1)
    # hold a trigger until this many records are available, or maxTriggerDelay has passed
    # since the last batch (default 15 minutes; Trigger.AvailableNow / once ignore both)
    min_records_per_trigger: int | None = Field(default=None, ge=1)
    max_trigger_delay: str | None = None
    min_partitions: int | None = Field(default=None, ge=1)
    fail_on_data_loss: bool = True
    isolation_level: Literal["read_committed", "read_uncommitted"] = "read_committed"
    include_headers: bool = False
    # how long planning and reading wait for an unreachable broker before the query fails
    broker_retry_seconds: int = Field(default=120, ge=0)
    kafka: dict[str, str] = Field(default_factory=dict)

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, (masked_settings(value) if name == "kafka" else value)

    @field_validator("kafka", mode="before")
    @classmethod
    def _empty_kafka(cls, v: Any) -> Any:
        return {} if v is None else {k: str(x) for k, x in v.items()} if isinstance(v, dict) else v

    @field_validator("max_trigger_delay")
    @classmethod
    def _max_trigger_delay(cls, v: str | None) -> str | None:
        return None if v is None else normalize_duration("source.maxTriggerDelay", v)

    @model_validator(mode="after")
    def _admission(self) -> SourceConfig:
        lo, hi = self.min_records_per_trigger, self.max_records_per_trigger
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(
                f"source.minRecordsPerTrigger ({lo}) must not exceed "
                f"source.maxRecordsPerTrigger ({hi})"
            )
        if self.max_trigger_delay is not None and lo is None:
            raise ValueError(
                "source.maxTriggerDelay needs source.minRecordsPerTrigger (it bounds that wait)"
            )
        return self

    @model_validator(mode="after")
    def _one_subscription(self) -> SourceConfig:
        chosen = [n for n in ("topics", "assign", "topic_pattern") if getattr(self, n)]
        if len(chosen) != 1:
            raise ValueError(
                "exactly one of source.topics, source.assign, source.topicPattern must be set"
                f" (got {', '.join(chosen) or 'none'})"
            )
        return self
