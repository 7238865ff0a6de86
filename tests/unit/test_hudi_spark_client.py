"""The settings of Hudi's Spark writer (pipeline.formats.hudi_spark.client): the protocol's
few departures from Hudi's defaults, key generators by table shape, the Spark line check."""

from __future__ import annotations

import pytest

from pipeline.errors import ConfigError
from pipeline.formats.hudi_spark.client import (
    PROTOCOL_OPTIONS,
    Written,
    check_line,
    table_options,
)


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
