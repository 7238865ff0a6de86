"""Avro topics in the Confluent wire format, with their schemas in a real Schema Registry
(Apicurio, started by the test session), into Iceberg and Hudi.

The table's columns come from the subject's latest version at first start (nested: a struct
with a list, a list of structs, a map; a timestamp, a decimal, an enum). Records written
with an older version are resolved to it by Avro's rules (a field the writer lacks takes
its default). Every produced (topic, partition, offset) is in the main or the dead-letter
table exactly once, and the values read back equal what was produced. Bad input lands in
the dead letters with its reason: no magic byte, a schema id the registry does not know, a
truncated payload, a schema the table's cannot read.
"""

from __future__ import annotations

import decimal
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from support.drivers import arrow_coords, pipeline_config
from support.kafka_fixtures import KafkaTestBroker
from support.registry_fixtures import (
    avro_bytes,
    produce_values,
    read_main_and_dead,
    register,
    registry_sink,
)

from lab.registry import SchemaRegistryServer
from pipeline.app import Pipeline
from pipeline.config import parse_config
from pipeline.errors import ConfigError

Coord = tuple[str, int, int]

ITEM = {
    "type": "record",
    "name": "Item",
    "fields": [
        {"name": "sku", "type": "string"},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
    ],
}
V1: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "device",
            "type": {
                "type": "record",
                "name": "Device",
                "fields": [
                    {"name": "id", "type": "string"},
                    {"name": "patches", "type": {"type": "array", "items": "int"}},
                ],
            },
        },
        {"name": "items", "type": {"type": "array", "items": ITEM}},
        {"name": "tags", "type": {"type": "map", "values": "string"}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["WEB", "APP"]}},
    ],
}
# v2 adds an optional field with a default: v1 records read it as null
V2: dict[str, Any] = {
    **V1,
    "fields": [*V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}],
}
T0 = datetime(2024, 6, 1, tzinfo=UTC)


def _record(n: int, v2: bool) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": n,
        "ts": T0 + timedelta(seconds=n),
        "device": {"id": f"d{n % 7}", "patches": list(range(n % 3))},
        "items": [
            {"sku": f"s{n}-{i}", "price": decimal.Decimal(f"{n}.{i:02d}")} for i in range(n % 3)
        ],
        "tags": {"k": str(n % 5)} if n % 4 else {},
        "kind": "APP" if n % 2 else "WEB",
    }
    if v2:
        record["note"] = f"note {n}" if n % 3 else None
    return record


def _expected(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": record["id"],
        "ts": record["ts"],
        "device": record["device"],
        "items": record["items"],
        "tags": sorted(record["tags"].items()),
        "kind": record["kind"],
        "note": record.get("note"),
    }


def _as_read(row: dict[str, Any]) -> dict[str, Any]:
    tags = row["tags"]
    return {
        "id": row["id"],
        "ts": row["ts"].astimezone(UTC),
        "device": row["device"],
        "items": row["items"],
        "tags": sorted(tags.items()) if isinstance(tags, dict) else sorted(tags),
        "kind": row["kind"],
        "note": row["note"],
    }


@pytest.mark.parametrize("table_format", ["iceberg", pytest.param("hudi", marks=pytest.mark.slow)])
def test_avro_records_of_two_versions_land_once_with_their_values(
    spark: Any,
    kafka_broker: KafkaTestBroker,
    schema_registry: SchemaRegistryServer,
    tmp_path: Path,
    table_format: str,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_broker.new_topic(f"avro-{table_format}", 2)
    subject = f"{topic}-value"
    v1 = register(schema_registry.url, subject, V1)
    v2 = register(schema_registry.url, subject, V2)
    records = [_record(n, v2=n % 2 == 0) for n in range(300)]
    values = [
        avro_bytes(v2 if n % 2 == 0 else v1, V2 if n % 2 == 0 else V1, r)
        for n, r in enumerate(records)
    ]
    good = values[:]
    # bad input: no magic byte, an id the registry does not know, a truncated payload, and a
    # schema the table cannot read (a required field of the table missing, no default)
    other = register(
        schema_registry.url,
        f"{topic}-other",
        {"type": "record", "name": "X", "fields": [{"name": "x", "type": "int"}]},
    )
    bad = {
        b'{"id": 1}': "not in the Confluent wire format",
        b"\x00" + (987654).to_bytes(4, "big") + b"\x02": "schema id 987654: not in the registry",
        values[3][:-4]: f"schema id {v1}: does not decode",
        avro_bytes(
            other,
            {"type": "record", "name": "X", "fields": [{"name": "x", "type": "int"}]},
            {"x": 1},
        ): (f"schema id {other}: cannot be read as the table's schema"),
    }
    coords = produce_values(bootstrap, topic, good + list(bad))
    produced = dict(zip(coords, records, strict=False))
    reasons_wanted = dict(zip(coords[len(good) :], bad.values(), strict=True))

    data = pipeline_config(tmp_path, bootstrap, topic, registry_sink(tmp_path, table_format))
    data["decode"] = {"format": "avro", "registry": {"url": schema_registry.url}}
    pipeline = Pipeline(parse_config(data), spark)
    assert pipeline.cfg.decode.registry is not None and pipeline.cfg.decode.registry.schema_id == v2
    pipeline.run(timeout_s=180)

    main, dead = read_main_and_dead(pipeline, tmp_path, table_format)
    assert arrow_coords(main) + arrow_coords(dead) == Counter(coords)  # exactly once
    got_reasons = dict(
        zip(
            zip(
                *(
                    dead[c].to_pylist()
                    for c in ("_kafka_topic", "_kafka_partition", "_kafka_offset")
                ),
                strict=True,
            ),
            dead["error"].to_pylist(),
            strict=True,
        )
    )
    assert set(got_reasons) == set(reasons_wanted)
    for coord, reason in reasons_wanted.items():
        assert got_reasons[coord].startswith(reason), (coord, got_reasons[coord])
    rows = main.to_pylist()
    by_coord = {(r["_kafka_topic"], r["_kafka_partition"], r["_kafka_offset"]): r for r in rows}
    assert {c: _as_read(by_coord[c]) for c in produced} == {
        c: _expected(r) for c, r in produced.items()
    }


def test_a_subject_the_registry_does_not_know_is_one_line(
    kafka_broker: KafkaTestBroker, schema_registry: SchemaRegistryServer, tmp_path: Path
) -> None:
    topic = kafka_broker.new_topic("avro-nosubject", 1)
    data = pipeline_config(
        tmp_path, kafka_broker.bootstrap_servers, topic, registry_sink(tmp_path, "iceberg")
    )
    data["decode"] = {"format": "avro", "registry": {"url": schema_registry.url}}
    with pytest.raises(ConfigError, match=f"subject '{topic}-value': not in the registry"):
        Pipeline(parse_config(data))


# -- a subject that gets new versions while the pipeline runs -------------------------------

E1: dict[str, Any] = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "count", "type": "int"},
        {
            "name": "device",
            "type": {"type": "record", "name": "Dev", "fields": [{"name": "id", "type": "string"}]},
        },
    ],
}
# v2: an optional field added inside the struct (and one at the top level)
E2: dict[str, Any] = {
    **E1,
    "fields": [
        *E1["fields"][:2],
        {
            "name": "device",
            "type": {
                "type": "record",
                "name": "Dev",
                "fields": [
                    {"name": "id", "type": "string"},
                    {"name": "model", "type": ["null", "string"], "default": None},
                ],
            },
        },
        {"name": "source", "type": ["null", "string"], "default": None},
    ],
}
# v3: int widened to long
E3: dict[str, Any] = {
    **E2,
    "fields": [E2["fields"][0], {"name": "count", "type": "long"}, *E2["fields"][2:]],
}


def _event(n: int, version: int) -> dict[str, Any]:
    e: dict[str, Any] = {"id": n, "count": n * 10, "device": {"id": f"d{n}"}}
    if version >= 2:
        e["device"]["model"] = f"m{n}"
        e["source"] = "app"
    if version == 3:
        e["count"] = 3_000_000_000 + n  # needs the long
    return e


@pytest.mark.slow
@pytest.mark.parametrize(
    # Hudi: extended (CI budget); CI reads Avro into Hudi in the test above
    "table_format",
    ["iceberg", pytest.param("hudi", marks=pytest.mark.extended)],
)
def test_new_versions_while_running_evolve_the_table_once_and_lose_nothing(
    spark: Any,
    kafka_broker: KafkaTestBroker,
    schema_registry: SchemaRegistryServer,
    tmp_path: Path,
    table_format: str,
) -> None:
    """Three versions registered while the pipeline runs, their records interleaved with
    older writers': each new version restarts the query before the batch that could carry
    it has a side effect, the table evolves once per version, and every record is in the
    table once with the values its writer wrote (nulls for fields its version lacked)."""
    from pipeline.app import run_following_registry

    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_broker.new_topic(f"avro-evolve-{table_format}", 2)
    subject = f"{topic}-value"
    ids = {1: register(schema_registry.url, subject, E1)}
    schemas = {1: E1, 2: E2, 3: E3}
    produced: dict[Coord, dict[str, Any]] = {}

    def send(first: int, versions: list[int]) -> None:
        records = [(_event(first + i, v), v) for i, v in enumerate(versions)]
        values = [avro_bytes(ids[v], schemas[v], e) for e, v in records]
        coords = produce_values(bootstrap, topic, values)
        produced.update({c: e for c, (e, _) in zip(coords, records, strict=True)})

    send(0, [1] * 40)
    phase = {"n": 0, "at": time.monotonic()}

    def tick(stats: Any) -> None:
        if stats.batches < 1 or time.monotonic() - phase["at"] < 3:
            return
        if phase["n"] == 0:  # v2 registered; its records and v1's interleaved
            ids[2] = register(schema_registry.url, subject, E2)
            send(100, [2, 1] * 20)
        elif phase["n"] == 1:
            ids[3] = register(schema_registry.url, subject, E3)
            send(200, [3, 2, 1] * 14)
        else:
            return
        phase["n"] += 1
        phase["at"] = time.monotonic()

    def until(stats: Any) -> bool:
        return phase["n"] == 2 and time.monotonic() - phase["at"] > 15

    data = pipeline_config(tmp_path, bootstrap, topic, registry_sink(tmp_path, table_format))
    data["decode"] = {"format": "avro", "registry": {"url": schema_registry.url}}
    data["trigger"] = {"mode": "processing-time", "interval": "1 second"}
    run_following_registry(parse_config(data), spark, tick=tick, until=until, timeout_s=240)

    final = Pipeline(parse_config(data), spark)
    assert final.cfg.decode.registry is not None and final.cfg.decode.registry.schema_id == ids[3]
    main, dead = read_main_and_dead(final, tmp_path, table_format)
    assert dead is None or dead.num_rows == 0
    assert arrow_coords(main) == Counter(list(produced))  # every record once
    by_coord = {
        (r["_kafka_topic"], r["_kafka_partition"], r["_kafka_offset"]): r for r in main.to_pylist()
    }
    for coord, e in produced.items():
        row = by_coord[coord]
        assert (row["id"], row["count"], row["device"]["id"]) == (
            e["id"],
            e["count"],
            e["device"]["id"],
        )
        assert row["device"]["model"] == e["device"].get("model")
        assert row["source"] == e.get("source")
    if table_format == "iceberg":
        table = final.tables.main.table()  # type: ignore[attr-defined]
        assert len(table.schemas()) == 3  # v1, then one evolution per new version
        assert str(table.schema().find_field("count").field_type) == "long"


# -- the registry away ------------------------------------------------------------------------


def test_an_unreachable_registry_is_one_line_and_exit_2_after_the_retry_window(
    kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    from support.drivers import run_cli, write_config

    from lab.ports import free_port

    topic = kafka_broker.new_topic("avro-noregistry", 1)
    data = pipeline_config(
        tmp_path, kafka_broker.bootstrap_servers, topic, registry_sink(tmp_path, "iceberg")
    )
    url = f"http://127.0.0.1:{free_port()}/apis/ccompat/v7"  # nothing listens there
    data["decode"] = {"format": "avro", "registry": {"url": url, "retrySeconds": 3}}
    t0 = time.monotonic()
    r = run_cli("run", "--config", str(write_config(tmp_path, data)))
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "[ingest:registry-unavailable]" in lines[0], r.stderr
    assert "retrySeconds=3" in lines[0] and url in lines[0]
    assert time.monotonic() - t0 >= 3


# extended (CI budget): CI has the registry unreachable at start, the same retry window
@pytest.mark.slow
@pytest.mark.extended
def test_a_registry_that_goes_away_mid_run_stops_the_run_with_nothing_half_written(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    """A registry of the test's own, stopped after the first commit: the next batch's check
    retries for retrySeconds, then the run stops with the one-line error; what was committed
    is whole, and nothing of the batch the registry could not vouch for is in the table."""
    from lab.registry import start_registry
    from pipeline.app import run_following_registry
    from pipeline.errors import find_pipeline_error

    registry = start_registry(tmp_path / "registry")
    try:
        bootstrap = kafka_broker.bootstrap_servers
        topic = kafka_broker.new_topic("avro-outage", 2)
        sid = register(registry.url, f"{topic}-value", E1)
        coords = produce_values(
            bootstrap, topic, [avro_bytes(sid, E1, _event(n, 1)) for n in range(50)]
        )
        data = pipeline_config(tmp_path, bootstrap, topic, registry_sink(tmp_path, "iceberg"))
        data["decode"] = {"format": "avro", "registry": {"url": registry.url, "retrySeconds": 4}}
        data["trigger"] = {"mode": "processing-time", "interval": "1 second"}

        def tick(stats: Any) -> None:
            if stats.batches >= 1 and registry.process is not None:
                registry.stop()
                produce_values(
                    bootstrap, topic, [avro_bytes(sid, E1, _event(n, 1)) for n in range(50, 60)]
                )

        with pytest.raises(Exception) as caught:
            run_following_registry(parse_config(data), spark, tick=tick, timeout_s=120)
        line = find_pipeline_error(caught.value, tagged=True) or ""
        assert line.startswith("[ingest:registry-unavailable]") and "retrySeconds=4" in line, line
        from pyiceberg.catalog.sql import SqlCatalog

        wh = tmp_path / "warehouse"
        catalog = SqlCatalog("lake", uri=f"sqlite:///{wh}/catalog.db", warehouse=wh.as_uri())
        main = catalog.load_table("db.orders").scan().to_arrow()
        assert arrow_coords(main) == Counter(coords)  # the first batch, whole; nothing after
    finally:
        registry.close()


# extended (CI budget): the demo's parts are each in CI (the Avro path, the registry start)
@pytest.mark.slow
@pytest.mark.extended
def test_the_avro_demo_passes_its_own_check(tmp_path: Path) -> None:
    from support.drivers import run_cli

    r = run_cli(
        "demo", "--format", "avro", "--events", "2000", "--rate", "2000",
        "--partitions", "2", "--lake", str(tmp_path / "lake"), timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert r.stdout.count("EXACTLY ONCE") == 2, r.stdout[-3000:]
    assert "Schema Registry" in r.stdout
