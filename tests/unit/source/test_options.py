"""Source options: Spark's strings parsed and validated; size-aware admission:
``minRecordsPerTrigger`` / ``maxTriggerDelay`` (pure decision, source option parsing and
config validation)."""

from __future__ import annotations

import pytest

from pipeline.commit.offsets import TopicPartition, available_records, hold_trigger
from pipeline.config import parse_config, spark_duration_seconds
from pipeline.errors import ConfigError
from pipeline.kafka.client import consumer_config
from pipeline.source.options import DEFAULT_MAX_TRIGGER_DELAY_S, SourceOptions

B = {"kafka.bootstrap.servers": "h:1"}


def test_assign_and_starting_json() -> None:
    o = SourceOptions.parse(
        {
            **B,
            "assign": '{"t": [1, 0]}',
            "startingOffsets": '{"t": {"0": 5, "1": -2}}',
            "maxRecordsPerTrigger": "100",
            "minPartitions": "4",
            "failOnDataLoss": "false",
        }
    )
    assert o.assign == {"t": [0, 1]}
    assert o.starting_offsets_json == {TopicPartition("t", 0): 5, TopicPartition("t", 1): -2}
    assert (o.max_records_per_trigger, o.min_partitions, o.fail_on_data_loss) == (100, 4, False)


@pytest.mark.parametrize(
    ("opts", "msg"),
    [
        ({}, "exactly one of assign, topics, topicPattern"),
        ({"topics": "a", "assign": '{"a":[0]}'}, "exactly one of"),
        ({"assign": "[1]"}, "must be JSON like"),
        ({"topics": "a", "startingOffsets": "oldest"}, "allowed: earliest, latest, or JSON"),
        ({"topics": "a", "failOnDataLoss": "maybe"}, "allowed: true, false"),
        ({"topics": "a", "minPartitions": "0"}, "minPartitions=0 must be >= 1"),
        ({"topics": "a", "groupId": "x"}, "unknown source option"),
        ({"topics": "a", "isolationLevel": "x"}, "allowed: read_committed, read_uncommitted"),
    ],
)
def test_bad_options_name_the_problem(opts: dict[str, str], msg: str) -> None:
    with pytest.raises(ConfigError, match=msg):
        SourceOptions.parse({**B, **opts})


def test_bootstrap_required() -> None:
    with pytest.raises(ConfigError, match="kafka.bootstrap.servers is required"):
        SourceOptions.parse({"topics": "a"})


def test_consumer_never_commits_and_is_tuned() -> None:
    conf = consumer_config("h:1", {"security.protocol": "SASL_SSL"})
    assert conf["enable.auto.commit"] == "false"
    assert conf["enable.auto.offset.store"] == "false"
    assert conf["fetch.queue.backoff.ms"] == "10"
    assert conf["security.protocol"] == "SASL_SSL"
    with pytest.raises(ConfigError, match="managed by the pipeline checkpoint"):
        consumer_config("h:1", {"enable.auto.commit": "true"})


# Size-aware admission

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_available_records_counts_only_what_is_beyond_start() -> None:
    start = {A0: 10, A1: 5, B0: 0}
    # a partition behind its start (never after reconcile) counts 0; a missing one too
    assert available_records(start, {A0: 40, A1: 3}) == 30
    assert available_records(start, {A0: 10, A1: 5, B0: 0}) == 0


@pytest.mark.parametrize(
    ("available", "waited", "held"),
    [
        (0, 0.0, True),
        (99, 59.9, True),  # too few, not waited long enough
        (100, 0.0, False),  # the minimum is met
        (250, 0.0, False),
        (1, 60.0, False),  # the delay has passed: whatever is there
        (0, 600.0, False),  # not held, though plan_end then finds nothing to read
    ],
)
def test_hold_until_minimum_or_delay(available: int, waited: float, held: bool) -> None:
    assert hold_trigger(available, 100, waited, 60.0) is held


def test_never_held_without_a_minimum_or_when_everything_must_be_read() -> None:
    assert hold_trigger(0, None, 0.0, 60.0) is False
    assert hold_trigger(5, 100, 0.0, 60.0, read_all=True) is False  # AvailableNow / once


def test_source_options_parse_and_default_delay() -> None:
    b = {"kafka.bootstrap.servers": "h:1", "topics": "t"}
    o = SourceOptions.parse(b)
    assert (o.min_records_per_trigger, o.max_trigger_delay_s) == (None, 900.0)
    o = SourceOptions.parse({**b, "minRecordsPerTrigger": "100"})
    assert (o.min_records_per_trigger, o.max_trigger_delay_s) == (100, DEFAULT_MAX_TRIGGER_DELAY_S)
    o = SourceOptions.parse(
        {
            **b,
            "minRecordsPerTrigger": "100",
            "maxRecordsPerTrigger": "100",
            "maxTriggerDelay": "500 ms",
        }
    )
    assert (o.min_records_per_trigger, o.max_trigger_delay_s) == (100, 0.5)


@pytest.mark.parametrize(
    ("opts", "msg"),
    [
        ({"minRecordsPerTrigger": "0"}, "minRecordsPerTrigger=0 must be >= 1"),
        (
            {"minRecordsPerTrigger": "500", "maxRecordsPerTrigger": "100"},
            "minRecordsPerTrigger=500 must not exceed maxRecordsPerTrigger=100",
        ),
        ({"maxTriggerDelay": "1 minute"}, "maxTriggerDelay needs minRecordsPerTrigger"),
        (
            {"minRecordsPerTrigger": "5", "maxTriggerDelay": "soon"},
            "maxTriggerDelay must look like '10 seconds'.*got 'soon'",
        ),
    ],
)
def test_bad_source_options_name_both_keys(opts: dict[str, str], msg: str) -> None:
    with pytest.raises(ConfigError, match=msg):
        SourceOptions.parse({"kafka.bootstrap.servers": "h:1", "topics": "t", **opts})


def test_durations_in_seconds() -> None:
    assert spark_duration_seconds("k", "15 minutes") == 900
    assert spark_duration_seconds("k", "2s") == 2
    assert spark_duration_seconds("k", "1.5 min") == 90
    assert spark_duration_seconds("k", "250 ms") == 0.25
    with pytest.raises(ValueError, match="k must look like"):
        spark_duration_seconds("k", "15m")


BASE = {
    "id": "p1",
    "source": {"bootstrapServers": "localhost:9092", "topics": ["events"]},
    "decode": {"schema": [{"name": "a", "type": "string"}]},
    "sink": {"table": "db.events"},
    "checkpointLocation": "/tmp/ckpt",
}


def _source(**kw: object) -> dict[str, object]:
    return {**BASE, "source": {**BASE["source"], **kw}}


def test_config_keys_are_normalised_for_spark() -> None:
    s = parse_config(_source(minRecordsPerTrigger=1000, maxTriggerDelay="30 s")).source
    assert (s.min_records_per_trigger, s.max_trigger_delay) == (1000, "30 seconds")
    # what the app passes (pipeline/app.py source_options) parses as the source option
    o = SourceOptions.parse(
        {"kafka.bootstrap.servers": "h:1", "topics": "t", "minRecordsPerTrigger": "1000"}
        | {"maxTriggerDelay": s.max_trigger_delay}
    )
    assert (o.min_records_per_trigger, o.max_trigger_delay_s) == (1000, 30.0)
    s = parse_config(_source(minRecordsPerTrigger=1000)).source
    assert s.max_trigger_delay is None  # the source's default (15 minutes) applies


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        (
            {"minRecordsPerTrigger": 200, "maxRecordsPerTrigger": 100},
            r"^\[ingest:config\] invalid config: source: source\.minRecordsPerTrigger \(200\) "
            r"must not exceed source\.maxRecordsPerTrigger \(100\)$",
        ),
        (
            {"maxTriggerDelay": "1 minute"},
            r"source\.maxTriggerDelay needs source\.minRecordsPerTrigger",
        ),
        (
            {"minRecordsPerTrigger": 1, "maxTriggerDelay": "later"},
            r"source\.maxTriggerDelay: source\.maxTriggerDelay must look like '10 seconds'",
        ),
        ({"minRecordsPerTrigger": 0}, r"source\.minRecordsPerTrigger.*greater than or equal to 1"),
    ],
)
def test_config_errors_are_one_line_and_name_the_keys(kw: dict[str, object], msg: str) -> None:
    with pytest.raises(ConfigError, match=msg) as e:
        parse_config(_source(**kw))
    assert "\n" not in str(e.value)
