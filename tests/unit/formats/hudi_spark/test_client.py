"""The settings of Hudi's Spark writer (pipeline.formats.hudi_spark.client): the protocol's
few departures from Hudi's defaults, key generators by table shape, the Spark line check,
the lock and the S3A settings of tables on S3."""

from __future__ import annotations

import pytest

from pipeline.errors import ConfigError
from pipeline.formats.hudi_spark.client import (
    PROTOCOL_OPTIONS,
    Written,
    check_line,
    table_options,
)
from pipeline.storage.s3_settings import S3Settings


def test_only_spark_3_5_runs_hudis_bundle() -> None:
    check_line((3, 5))
    for line in ((4, 0), (4, 3), (3, 4)):
        with pytest.raises(ConfigError) as info:
            check_line(line)
        message = str(info.value)
        assert "\n" not in message and "hudi-spark3.5-bundle_2.12" in message
        assert f"PySpark {line[0]}.{line[1]}" in message and "writer: native" in message


def test_table_options_pick_the_key_generator_and_keep_the_protocol_settings() -> None:
    flat = table_options("t", ["topic", "partition", "offset"], [])
    assert flat["hoodie.datasource.write.keygenerator.class"].endswith("NonpartitionedKeyGenerator")
    assert flat["hoodie.datasource.write.recordkey.field"] == "topic,partition,offset"
    simple = table_options("t", ["id"], ["day"])
    assert simple["hoodie.datasource.write.keygenerator.class"].endswith(".SimpleKeyGenerator")
    complex_ = table_options("t", ["topic", "offset"], ["day"])
    assert complex_["hoodie.datasource.write.keygenerator.class"].endswith("ComplexKeyGenerator")
    for options in (flat, simple, complex_):
        assert PROTOCOL_OPTIONS.items() <= options.items()
    assert PROTOCOL_OPTIONS["hoodie.clean.failed.writes.policy"] == "LAZY"
    with pytest.raises(ConfigError):
        table_options("t", [], [])


def test_written_round_trips_through_json() -> None:
    stats = [
        '{"path": "day=1/f1.parquet", "numWrites": 30, "numInserts": 3}',
        '{"path": "f2.parquet", "numWrites": 4, "numInserts": 4}',
    ]  # f1: a small file insert rewrote, 27 of its records from earlier commits
    w = Written(stats, '{"pending": []}', '{"type": "record"}')
    assert Written.from_json(w.as_json()) == w
    assert w.records == 7 and w.paths == ["day=1/f1.parquet", "f2.parquet"]


def test_tables_on_s3_take_the_conditional_put_lock() -> None:
    local = table_options("t", ["offset"], [])
    on_s3 = table_options("t", ["offset"], [], on_s3=True)
    assert local["hoodie.write.lock.provider"].endswith("FileSystemBasedLockProvider")
    assert on_s3["hoodie.write.lock.provider"] == "ingest.hudi.ConditionalPutLockProvider"
    assert {k: v for k, v in on_s3.items() if k != "hoodie.write.lock.provider"} == {
        k: v for k, v in local.items() if k != "hoodie.write.lock.provider"
    }


def test_s3_settings_become_hadoops_s3a_settings() -> None:
    seaweed = S3Settings.from_properties(
        {
            "s3.endpoint": "http://127.0.0.1:8333",
            "s3.access-key-id": "k",
            "s3.secret-access-key": "s",
            "s3.region": "eu-west-1",
            "s3.request-timeout": "2.5",
        }
    ).hadoop_conf()
    assert seaweed == {
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:8333",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.aws.credentials.provider": (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        ),
        "spark.hadoop.fs.s3a.access.key": "k",
        "spark.hadoop.fs.s3a.secret.key": "s",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
        "spark.hadoop.fs.s3a.connection.timeout": "2500",
    }
    session = S3Settings.from_properties(
        {"s3.access-key-id": "k", "s3.secret-access-key": "s", "s3.session-token": "t"}
    ).hadoop_conf()
    assert session["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith(
        "TemporaryAWSCredentialsProvider"
    )
    assert session["spark.hadoop.fs.s3a.session.token"] == "t"
    assert "spark.hadoop.fs.s3a.path.style.access" not in session  # AWS: the SDK's default
    assert "spark.hadoop.fs.s3a.access.key" not in S3Settings().hadoop_conf()  # AWS's chain
    with pytest.raises(ConfigError) as info:
        S3Settings.from_properties({"s3.profile-name": "dev"}).hadoop_conf()
    assert "\n" not in str(info.value) and "s3.profile-name" in str(info.value)
