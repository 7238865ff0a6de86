"""Config model: validation errors name the key and the allowed values."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import load_config, parse_config
from pipeline.errors import ConfigError

BASE = {
    "id": "p1",
    "source": {"bootstrapServers": "localhost:9092", "topics": ["events"]},
    "decode": {"schema": [{"name": "a", "type": "string"}]},
    "sink": {"table": "db.events"},
    "checkpointLocation": "/tmp/ckpt",
}


def test_minimal_config_gets_defaults() -> None:
    cfg = parse_config(BASE)
    assert cfg.source.starting_offsets == "table"
    assert cfg.source.fail_on_data_loss is True
    assert cfg.source.isolation_level == "read_committed"
    assert cfg.sink.dead_letter_identifier == "db.events_dead_letter"
    assert cfg.trigger.mode == "processing-time"


def test_unknown_key_is_named() -> None:
    with pytest.raises(ConfigError, match=r"source\.maxRecords: Extra inputs are not permitted"):
        parse_config({**BASE, "source": {**BASE["source"], "maxRecords": 5}})


def test_bad_enum_lists_allowed_values() -> None:
    bad = {**BASE, "source": {**BASE["source"], "isolationLevel": "dirty"}}
    with pytest.raises(
        ConfigError, match=r"source\.isolationLevel.*'read_committed' or 'read_uncommitted'"
    ):
        parse_config(bad)


def test_exactly_one_subscription() -> None:
    bad = {**BASE, "source": {**BASE["source"], "assign": {"events": [0]}}}
    with pytest.raises(ConfigError, match="exactly one of source.topics, source.assign"):
        parse_config(bad)


def test_env_references_and_missing_env(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(
        "id: p1\nsource: {bootstrapServers: '${BOOT}', topics: [e],"
        " kafka: {sasl.password: '${PW:-x}'}}\n"
        "decode: {schema: [{name: a, type: string}]}\nsink: {table: db.t}\ncheckpointLocation: /c\n"
    )
    cfg = load_config(f, env={"BOOT": "h:1"})
    assert cfg.source.bootstrap_servers == "h:1"
    assert cfg.source.kafka == {"sasl.password": "x"}
    with pytest.raises(
        ConfigError, match="source.bootstrapServers: environment variable BOOT is not set"
    ):
        load_config(f, env={})


def test_set_overrides_parse_yaml_values(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    import yaml

    f.write_text(yaml.safe_dump(BASE))
    cfg = load_config(f, ["source.maxRecordsPerTrigger=500", "trigger.mode=available-now"], env={})
    assert cfg.source.max_records_per_trigger == 500
    assert cfg.trigger.mode == "available-now"
    with pytest.raises(
        ConfigError, match=r"source\.maxRecordsPerTrigger.*greater than or equal to 1"
    ):
        load_config(f, ["source.maxRecordsPerTrigger=0"], env={})


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    f = tmp_path / "bad.yaml"
    f.write_text("id: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(f)


def test_json_decode_needs_schema() -> None:
    with pytest.raises(ConfigError, match="decode.schema must list the fields"):
        parse_config({**BASE, "decode": {"format": "json"}})


def test_decode_key_needs_a_registry_value_and_its_record_name() -> None:
    registry = {"format": "avro", "registry": {"url": "http://r"}}
    cfg = parse_config({**BASE, "decode": {**registry, "key": {"format": "protobuf"}}})
    assert cfg.decode.key is not None and cfg.decode.key.column == "key"
    with pytest.raises(ConfigError, match="decode.key needs a registry format .* is json"):
        parse_config({**BASE, "decode": {**BASE["decode"], "key": {"format": "avro"}}})
    strategy = {"url": "http://r", "subjectStrategy": "record-name", "recordName": "shop.Order"}
    with pytest.raises(ConfigError, match="decode.key.recordName is required .* record-name$"):
        parse_config(
            {**BASE, "decode": {"format": "avro", "registry": strategy, "key": {"format": "avro"}}}
        )
    with pytest.raises(ConfigError, match=r"decode\.key\.format: .*'avro', 'protobuf' or"):
        parse_config({**BASE, "decode": {**registry, "key": {"format": "json"}}})


def test_trigger_interval_is_normalised_to_units_spark_parses() -> None:
    from pipeline.config import TriggerConfig

    assert TriggerConfig(interval="500 ms").interval == "500 milliseconds"
    assert TriggerConfig(interval="2s").interval == "2 seconds"
    assert TriggerConfig(interval="1.5 min").interval == "90000 milliseconds"
    assert TriggerConfig(interval="10 seconds").interval == "10 seconds"


def test_ha_defaults_off_and_bad_lease_settings_are_one_line_errors() -> None:
    assert parse_config(BASE).ha.mode == "off"
    cfg = parse_config({**BASE, "ha": {"mode": "auto", "renewSeconds": 0.5, "leaseSeconds": 2}})
    assert (cfg.ha.mode, cfg.ha.renew_seconds, cfg.ha.lease_seconds) == ("auto", 0.5, 2.0)
    with pytest.raises(ConfigError, match=r"ha\.mode: .*'off', 'active', 'standby' or 'auto'"):
        parse_config({**BASE, "ha": {"mode": "passive"}})
    with pytest.raises(ConfigError, match=r"leaseSeconds \(3\) must be at least twice renew"):
        parse_config({**BASE, "ha": {"mode": "auto", "renewSeconds": 2}})
    with pytest.raises(ConfigError, match="ha.mode standby needs commit.mode exactly-once"):
        parse_config({**BASE, "ha": {"mode": "standby"}, "commit": {"mode": "at-least-once"}})


def test_yaml_booleans_validate_as_the_enum_values_they_spell(tmp_path: Path) -> None:
    """YAML 1.1 reads an unquoted ``off`` as false: ``ha: {mode: off}``, as the README and
    the example spell it, and ``--set ha.mode=off`` must mean the value ``off``."""
    f = tmp_path / "p.yaml"
    import yaml

    f.write_text(yaml.safe_dump(BASE) + "ha: {mode: off}\n")
    assert load_config(f, env={}).ha.mode == "off"
    f.write_text(yaml.safe_dump(BASE))
    assert load_config(f, ["ha.mode=off"], env={}).ha.mode == "off"
    assert load_config(f, ["ha.mode=auto", "ha.mode=off"], env={}).ha.mode == "off"
    # a boolean no allowed value spells is still refused, naming the allowed values
    with pytest.raises(ConfigError, match=r"ha\.mode: .*'off', 'active', 'standby' or 'auto'"):
        load_config(f, ["ha.mode=on"], env={})
    # a real boolean option keeps its booleans
    assert load_config(f, ["source.includeHeaders=on"], env={}).source.include_headers is True
