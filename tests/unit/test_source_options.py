"""Source options: Spark's strings parsed and validated."""

from __future__ import annotations

import pytest

from pipeline.commit.offsets import TopicPartition
from pipeline.errors import ConfigError
from pipeline.kafka.client import consumer_config
from pipeline.source.options import SourceOptions

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
