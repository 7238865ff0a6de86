"""Schema evolution on restart, on Iceberg and Hudi, with records produced throughout.

Three schemas, one restart each (in-process, shared Spark): the second adds a nested
column and a map, widens ``int`` → ``long`` and ``float`` → ``double`` and makes a
required column optional; the third renames a column (Iceberg; Hudi's readers do not
follow renames, so there it adds another column). Every produced (topic, partition,
offset) is in the table once; rows written before a column existed read it as null
(pyiceberg, hudi-rs).

Driver processes SIGKILLed around the change (``slow``): right after Iceberg's schema
commit, before the query started; with a Hudi instant precommitted in the new schema.
The restart finishes it: every record once, the schema changed once.

A change no restart may make (a narrowing, a dropped column) is one line on stderr, exit
2, and leaves the table's metadata and the checkpoint as they were.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.drivers import (
    arrow_coords,
    hudi_read,
    pipeline_config,
    run_cli,
    run_driver_killed,
    run_driver_ok,
    write_config,
)
from support.kafka_fixtures import KafkaTestBroker

from pipeline.app import Pipeline
from pipeline.config import parse_config
from pipeline.errors import SchemaChangeRefused

Coord = tuple[str, int, int]

DEVICE_V1: dict[str, Any] = {
    "type": "struct",
    "fields": [{"name": "id", "type": "string", "required": True}],
}
DEVICE_V2: dict[str, Any] = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "string", "required": True},
        {"name": "model", "type": "string"},
    ],
}
V1 = [
    {"name": "id", "type": "int", "required": True},
    {"name": "ts", "type": "timestamptz", "required": True},
    {"name": "name", "type": "string", "required": True},
    {"name": "price", "type": "float"},
    {"name": "device", "type": DEVICE_V1},
]
V2 = [
    {"name": "id", "type": "long", "required": True},
    {"name": "ts", "type": "timestamptz", "required": True},
    {"name": "name", "type": "string"},  # required -> optional
    {"name": "price", "type": "double"},
    {"name": "device", "type": DEVICE_V2},
    {"name": "tags", "type": {"type": "map", "value": "string"}},
]
V3_ICEBERG = [*V2[:2], {"name": "title", "type": "string", "renamedFrom": "name"}, *V2[3:]]
V3_HUDI = [*V2, {"name": "note", "type": "string", "doc": "added in v3"}]


def _produce(
    bootstrap: str, topic: str, first: int, count: int, phase: int, rename: bool = True
) -> dict[Coord, Any]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": "5", "acks": "all"})
    out: dict[Coord, Any] = {}
    for n in range(first, first + count):
        record: dict[str, Any] = {
            "id": n if phase == 1 else 3_000_000_000 + n,  # phase 2 ids need a long
            "ts": "2024-06-01T10:00:00Z",
            "name": f"n{n}",
            "price": n / 4,
            "device": {"id": f"d{n}"},
        }
        if phase >= 2:
            record["device"]["model"] = f"m{n}"
            record["tags"] = {"phase": str(phase)}
        if phase == 3 and rename:
            record["title"] = record.pop("name")
        if phase == 3:
            record["note"] = f"note{n}"

        def cb(err: Any, msg: Any, record: dict[str, Any] = record) -> None:
            assert err is None, err
            out[(msg.topic(), msg.partition(), msg.offset())] = record

        producer.produce(topic, value=json.dumps(record).encode(), partition=n % 2, on_delivery=cb)
    producer.flush(30)
    assert len(out) == count
    return out


def canonical_row(row: dict[str, Any], name_column: str) -> tuple[Any, ...]:
    """One row of a table evolved through V1, V2 and V3 as every reader must agree on it:
    coordinates, ``id``, the name (``title`` after Iceberg's rename), ``price``, the nested
    ``device`` fields, the ``tags`` map as sorted pairs (readers give dicts or pairs) and
    ``note`` (Hudi's V3); columns added later are None in older rows."""
    device = row.get("device") or {}
    tags = row.get("tags")
    pairs = sorted(tags.items()) if isinstance(tags, dict) else sorted(tags) if tags else None
    price = row.get("price")
    return (
        row["_kafka_topic"],
        row["_kafka_partition"],
        row["_kafka_offset"],
        row["id"],
        row.get(name_column),
        None if price is None else round(float(price), 3),
        device.get("id"),
        device.get("model"),
        pairs or None,
        row.get("note"),
    )


def evolve_in_three_restarts(
    spark: Any, bootstrap: str, topic: str, tmp: Path, table_format: str
) -> Pipeline:
    """60 records per schema, one restart per schema (V1, V2, then V3: Iceberg renames
    ``name``, Hudi adds ``note``) into ``table_format``; the last pipeline (for the JVM
    readers' tests, which compare every row)."""
    renames = table_format == "iceberg"
    data = pipeline_config(tmp, bootstrap, topic, _sink(tmp, table_format))
    for phase, schema in enumerate([V1, V2, V3_ICEBERG if renames else V3_HUDI], start=1):
        _produce(bootstrap, topic, 1000 * phase, 60, phase, renames)
        data["decode"] = {"schema": schema}
        pipeline = Pipeline(parse_config(data), spark)
        pipeline.run(timeout_s=180)
    return pipeline


def _sink(tmp: Path, table_format: str) -> dict[str, Any]:
    iceberg = {"catalog": {"warehouse": str(tmp / "warehouse")}, "table": "db.events"}
    hudi = {"table": "db.events", "hudi": {"basePath": str(tmp / "h")}}
    if table_format == "iceberg":
        return iceberg
    if table_format == "hudi":
        return {"format": "hudi", **hudi}
    return {"format": "both", **iceberg, **hudi}


def _iceberg(pipeline: Pipeline) -> Any:
    tables = pipeline.tables
    main = tables.iceberg.main if hasattr(tables, "iceberg") else tables.main
    table = main.table()
    assert table is not None
    return table


def _read(pipeline: Pipeline, tmp: Path, table_format: str) -> Any:
    if table_format == "iceberg":
        return _iceberg(pipeline).scan().to_arrow()
    return hudi_read(tmp / "h")


def _reads(pipeline: Pipeline, tmp: Path, table_format: str) -> list[Any]:
    """Every main table's rows (``both``: the Iceberg table's and the Hudi table's)."""
    if table_format != "both":
        return [_read(pipeline, tmp, table_format)]
    return [_read(pipeline, tmp, "iceberg"), _read(pipeline, tmp, "hudi")]


@pytest.mark.parametrize(
    "table_format",
    ["iceberg", "hudi", pytest.param("both", marks=pytest.mark.extended)],  # both: the budget
)
def test_three_restarts_evolve_the_table_and_keep_every_record_once(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path, table_format: str
) -> None:
    topic = kafka_broker.new_topic(f"evolve-{table_format}", 2)
    bootstrap = kafka_broker.bootstrap_servers
    data = pipeline_config(tmp_path, bootstrap, topic, _sink(tmp_path, table_format))
    produced: dict[Coord, Any] = {}
    renames = table_format == "iceberg"  # Hudi's readers do not follow renames
    phases = [V1, V2, V3_ICEBERG if renames else V3_HUDI]
    for phase, schema in enumerate(phases, start=1):
        produced |= _produce(bootstrap, topic, 1000 * phase, 150, phase, renames)
        data["decode"] = {"schema": schema}
        pipeline = Pipeline(parse_config(data), spark)
        pipeline.run(timeout_s=180)
        for rows in _reads(pipeline, tmp_path, table_format):
            assert arrow_coords(rows) == Counter(list(produced)), f"phase {phase}"

    for rows in _reads(pipeline, tmp_path, table_format):
        _assert_rows(rows, produced, renames)
    if table_format != "hudi":
        table = _iceberg(pipeline)
        schema = table.schema()
        assert str(schema.find_field("id").field_type) == "long"
        assert str(schema.find_field("price").field_type) == "double"
        assert not schema.find_field("title" if renames else "name").required
        assert len(table.schemas()) == 3  # one schema change per restart


def _assert_rows(rows: Any, produced: dict[Coord, Any], renames: bool) -> None:
    """Each row holds its record's values; columns added later are null in older rows."""
    by_coord = {
        (t, p, o): r
        for t, p, o, r in zip(
            *(rows[c].to_pylist() for c in ("_kafka_topic", "_kafka_partition", "_kafka_offset")),
            rows.to_pylist(),
            strict=True,
        )
    }
    renamed = "title" if renames else "name"
    for coord, record in produced.items():
        row = by_coord[coord]
        assert row["id"] == record["id"]
        assert row["price"] == pytest.approx(record["price"])
        assert row["device"]["id"] == record["device"]["id"]
        assert row["device"]["model"] == record["device"].get("model")
        tags = row["tags"]
        assert (dict(tags) if tags is not None else None) == record.get("tags"), row
        assert row[renamed] == record.get("title", record.get("name"))
        if not renames:
            assert row["note"] == record.get("note")


def _table_state(tmp: Path, table_format: str) -> dict[str, bytes]:
    """Every file of the table's metadata and of Spark's checkpoint, with its bytes. Not
    ``ingest-run-state.json``: that record of the last run (for ``ingest status``) says
    the run was refused, and why."""
    roots = [tmp / "checkpoint"]
    roots.append(tmp / "warehouse" if table_format == "iceberg" else tmp / "h" / ".hoodie")
    out = {}
    for root in roots:
        for p in sorted(root.rglob("*")):
            if not p.is_file() or p.name == "ingest-run-state.json":
                continue
            if {"metadata", "checkpoint", ".hoodie"} & set(p.parts):
                out[str(p)] = p.read_bytes()
    return out


@pytest.mark.parametrize(
    ("table_format", "change", "message"),
    [
        ("iceberg", "narrow", "column 'id': type change long -> int is not a widening"),
        pytest.param(  # the planner's unit test refuses drops too
            "hudi",
            "drop",
            "column 'price': is in the table but not configured",
            marks=pytest.mark.extended,
        ),
        ("hudi", "rename", "column 'name': renaming to 'title' is not supported"),
    ],
)
def test_a_refused_change_is_one_line_exit_2_and_touches_nothing(
    spark: Any,
    kafka_broker: KafkaTestBroker,
    tmp_path: Path,
    table_format: str,
    change: str,
    message: str,
) -> None:
    topic = kafka_broker.new_topic(f"refuse-{table_format}", 2)
    bootstrap = kafka_broker.bootstrap_servers
    _produce(bootstrap, topic, 1000, 50, 2)
    data = pipeline_config(tmp_path, bootstrap, topic, _sink(tmp_path, table_format))
    data["decode"] = {"schema": V2}
    Pipeline(parse_config(data), spark).run(timeout_s=180)
    before = _table_state(tmp_path, table_format)
    assert before
    if change == "narrow":
        schema = [{"name": "id", "type": "int", "required": True}, *V2[1:]]
    elif change == "drop":
        schema = [f for f in V2 if f["name"] != "price"]
    else:
        schema = V3_ICEBERG
    data["decode"] = {"schema": schema}
    if change == "narrow":  # the command: one line, exit 2
        done = run_cli("run", "--config", str(write_config(tmp_path, data)))
        lines = [ln for ln in done.stderr.splitlines() if ln.startswith("error: ")]
        assert done.returncode == 2, done.stderr[-2000:]
        assert len(lines) == 1 and message in lines[0], done.stderr[-2000:]
        assert "[ingest:schema-change]" in lines[0]
        state = json.loads((tmp_path / "checkpoint" / "ingest-run-state.json").read_text())
        assert message in state["error"]
    else:  # in-process, the same refusal (the command's handling is shown above)
        with pytest.raises(SchemaChangeRefused) as refused:
            Pipeline(parse_config(data), spark).run(timeout_s=60)
        assert message in str(refused.value) and "\n" not in str(refused.value)
    assert _table_state(tmp_path, table_format) == before


@pytest.mark.slow
@pytest.mark.parametrize(
    ("table_format", "fault"),
    [
        ("iceberg", "after-schema-change:kill"),
        # a recommit of an instant precommitted in the new schema (in the rotation)
        pytest.param("hudi", "after-precommit:kill", marks=pytest.mark.extended),
    ],
)
def test_a_driver_killed_around_the_schema_change_loses_nothing(
    kafka_broker: KafkaTestBroker, tmp_path: Path, table_format: str, fault: str
) -> None:
    topic = kafka_broker.new_topic(f"evolve-kill-{table_format}", 2)
    bootstrap = kafka_broker.bootstrap_servers
    data = pipeline_config(tmp_path, bootstrap, topic, _sink(tmp_path, table_format))
    produced = _produce(bootstrap, topic, 1000, 150, 1)
    data["decode"] = {"schema": V1}
    run_driver_ok(write_config(tmp_path, data))
    produced |= _produce(bootstrap, topic, 2000, 150, 2)
    data["decode"] = {"schema": V2}
    config = write_config(tmp_path, data)
    run_driver_killed(config, fault)
    produced |= _produce(bootstrap, topic, 3000, 150, 2)
    run_driver_ok(config)
    pipeline = Pipeline(parse_config(data))
    rows = _read(pipeline, tmp_path, table_format)
    assert arrow_coords(rows) == Counter(list(produced))
    models = Counter(d["model"] is not None for d in rows["device"].to_pylist())
    assert models == Counter({False: 150, True: 300})  # the new column, from phase 2 on
    if table_format == "iceberg":
        table = pipeline.tables.main.table()
        assert table is not None and len(table.schemas()) == 2  # changed once
