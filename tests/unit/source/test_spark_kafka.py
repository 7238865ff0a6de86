"""``source.reader``: the switch (versions, the env default) and Spark's Kafka source's
options as the adapter writes them (pipeline/source/choice.py, pipeline/source/spark_kafka.py)."""

from __future__ import annotations

import json

import pytest

from pipeline.commit.offsets import TopicPartition
from pipeline.errors import ConfigError, DataLossError
from pipeline.source.choice import reader_name
from pipeline.source.spark_kafka import (
    explain_failure,
    jar_set,
    java_client_settings,
    spark_options,
)

TP0, TP1, TP2 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
BOUNDS = {TP0: (5, 50), TP1: (0, 10), TP2: (100, 200)}


def test_auto_is_python_from_4_2_and_spark_below(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INGEST_SOURCE_READER", raising=False)
    assert reader_name("auto", (4, 3)) == "python"
    assert reader_name("auto", (4, 2)) == "python"
    assert reader_name("auto", (4, 1)) == "spark"
    assert reader_name("auto", (3, 5)) == "spark"
    monkeypatch.setenv("INGEST_SOURCE_READER", "spark")
    assert reader_name("auto", (4, 3)) == "spark"
    assert reader_name("python", (4, 3)) == "python"  # the config wins
    monkeypatch.setenv("INGEST_SOURCE_READER", "flink")
    with pytest.raises(ConfigError, match="INGEST_SOURCE_READER='flink'; allowed: python, spark"):
        reader_name("auto", (4, 3))


def test_python_reader_below_4_2_is_one_line_naming_the_version() -> None:
    with pytest.raises(ConfigError) as e:
        reader_name("python", (3, 5))
    assert str(e.value) == (
        "[ingest:config] source.reader: python needs PySpark >= 4.2 (installed: 3.5); "
        "use source.reader: spark (Spark's Kafka source)"
    )


def test_jar_set_per_spark_line() -> None:
    assert jar_set((3, 5)) == "spark-kafka-3.5"
    assert jar_set((4, 1)) == "spark-kafka-4.1"
    assert jar_set((4, 3)) == "spark-kafka-4.2"  # no 4.3 jar served: 4.2's runs it
    with pytest.raises(ConfigError, match=r"Spark 3\.4; supported Spark lines: 3\.5, 4\.0"):
        jar_set((3, 4))


def test_options_are_spark_names_over_an_explicit_assignment() -> None:
    common = {
        "kafka.bootstrap.servers": "k:9092",
        "kafka.client.id": "me",
        "topics": "a,b",
        "startingOffsets": json.dumps({"a": {"0": 7}, "gone": {"0": 1}}),
        "maxRecordsPerTrigger": "1000",
        "minRecordsPerTrigger": "10",
        "maxTriggerDelay": "30s",
        "minPartitions": "4",
        "failOnDataLoss": "true",
        "isolationLevel": "read_committed",
        "includeHeaders": "false",
        "brokerRetrySeconds": "120",
    }
    out = spark_options(common, BOUNDS)
    assert out == {
        "kafka.bootstrap.servers": "k:9092",
        "kafka.client.id": "me",
        "assign": json.dumps({"a": [0, 1], "b": [0]}, sort_keys=True),
        # listed: kept; unlisted: their log start; not assigned ("gone"): left out
        "startingOffsets": '{"a":{"0":7,"1":0},"b":{"0":100}}',
        "maxOffsetsPerTrigger": "1000",
        "minOffsetsPerTrigger": "10",
        "maxTriggerDelay": "30s",
        "minPartitions": "4",
        "failOnDataLoss": "true",
        "kafka.isolation.level": "read_committed",
        "includeHeaders": "false",
        "kafka.default.api.timeout.ms": "120000",
    }


@pytest.mark.parametrize(
    ("starting", "expected"),
    [
        ("earliest", {"a": {"0": 5, "1": 0}, "b": {"0": 100}}),
        ("latest", {"a": {"0": 50, "1": 10}, "b": {"0": 200}}),
        (json.dumps({"a": {"0": -1, "1": -2}}), {"a": {"0": 50, "1": 0}, "b": {"0": 100}}),
    ],
)
def test_starting_offsets_are_numbers_for_every_partition(
    starting: str, expected: dict[str, dict[str, int]]
) -> None:
    opts = {"kafka.bootstrap.servers": "k", "startingOffsets": starting}
    assert json.loads(spark_options(opts, BOUNDS)["startingOffsets"]) == expected


def test_a_timestamp_start_drops_the_offsets() -> None:
    opts = {"kafka.bootstrap.servers": "k", "startingOffsets": "earliest"}
    out = spark_options({**opts, "startingTimestamp": "1700000000000"}, BOUNDS)
    assert out["startingTimestamp"] == "1700000000000" and "startingOffsets" not in out


def test_no_partitions_is_refused() -> None:
    with pytest.raises(ConfigError, match="have no partitions"):
        spark_options({"kafka.bootstrap.servers": "k"}, {})


def test_security_settings_become_the_java_clients() -> None:
    out = java_client_settings(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "ingest",
            "sasl.password": 'p"w',
            "ssl.ca.location": "/etc/ca.pem",
        }
    )
    assert out == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="ingest" password="p\\"w";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/ca.pem",
    }


def test_a_librdkafka_only_setting_is_one_line() -> None:
    with pytest.raises(ConfigError, match=r"source.kafka.queued.max.messages.kbytes: not passed"):
        java_client_settings({"queued.max.messages.kbytes": "1024"})
    with pytest.raises(ConfigError, match="OAUTHBEARER"):
        java_client_settings({"sasl.mechanism": "OAUTHBEARER", "sasl.username": "x"})


def test_spark_data_loss_failure_is_our_one_line() -> None:
    spark_text = (
        "org.apache.spark.sql.streaming.StreamingQueryException: Query [id = 1] terminated\n"
        "Caused by: java.lang.IllegalStateException: Cannot fetch offset 3 (GroupId: x, "
        "TopicPartition: t-0). Some data may have been lost because they are not available "
        "in Kafka any more; either the data was aged out by Kafka or the topic may have been "
        "deleted before all the data in the topic was processed."
    )
    err = explain_failure(RuntimeError(spark_text))
    assert isinstance(err, DataLossError)
    assert "\n" not in str(
        err
    ) and "stopped: cannot fetch offset 3 of t-0 (records were deleted" in str(err)
    assert str(err).startswith("[ingest:data-loss] Spark's Kafka source stopped")
    assert explain_failure(RuntimeError("something else entirely")) is None
    moved = (
        "java.lang.IllegalStateException: Partition t-1's offset was changed from 9 to 2, "
        "some data may have been missed.\n\tat org.apache"
    )
    err = explain_failure(RuntimeError(moved))
    assert (
        err is not None
        and "stopped: Partition t-1's offset was changed from 9 to 2, "
        "some data may have been missed. (records were deleted"
        in str(err)
    )
    spark_4 = (
        "KafkaIllegalStateException: Some data may have been lost because they are not "
        "available in Kafka any more;\neither the data was aged out by Kafka\nReason: Could "
        "not read records in offset [200, 600) for topic partition t-0\nwith consumer group g"
    )
    err = explain_failure(RuntimeError(spark_4))
    assert (
        err is not None
        and "stopped: Could not read records in offset [200, 600) for topic partition t-0 "
        "(records were deleted"
        in str(err)
    )


def test_spark_readers_session_keeps_one_consumer_per_partition() -> None:
    """Spark's pool of Kafka consumers closes its oldest idle ones whenever it holds its
    soft capacity (64 by default), so past 64 partitions every batch made new consumers
    (2.0 CPU-s a 2,000-record batch at 128 partitions). The reader suggests a capacity no
    topic set here reaches; the Python reader suggests nothing."""
    from pipeline.source.python_reader import PythonKafkaReader
    from pipeline.source.spark_kafka import CONSUMER_POOL_KEY, SparkKafkaReader

    suggested = SparkKafkaReader((4, 2)).session_defaults()
    assert int(suggested[CONSUMER_POOL_KEY]) >= 1024
    assert CONSUMER_POOL_KEY == "spark.kafka.consumer.cache.capacity"
    assert PythonKafkaReader().session_defaults() == {}


def test_a_readers_suggested_settings_yield_to_the_users() -> None:
    """Suggested: used unless spark-submit's conf or the pipeline's ``spark.conf`` sets
    the key."""
    from pipeline.spark.session import session_options

    def options(conf: dict[str, str], given: dict[str, str]) -> dict[str, str]:
        return session_options("app", "local[2]", conf, given=given, suggested={"k": "1"})

    assert options({}, {})["k"] == "1"
    assert options({"k": "2"}, {})["k"] == "2"
    assert "k" not in options({}, {"k": "3"})  # the submitted JVM's conf holds it already
