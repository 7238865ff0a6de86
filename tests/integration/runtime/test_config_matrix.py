"""Every documented value of the keys that change the data path, covered pairwise.

The keys and values are :data:`AXES`; :func:`pairwise_cases` generates the cases with
``allpairspy`` (not hand-picked), and :func:`test_cases_are_pairwise_complete` proves that
every pair of values of every two keys appears in at least one case.

Each case is a short in-process run on the shared SparkSession against the live broker:
a 2-partition topic, a few dozen records (in JSON mode every fifth one malformed, every
other one with a header). Exactly once is shown by counting (topic, partition, offset)
over the main table(s) and the dead-letter table: every expected record exactly once,
nothing else; the dead letters are exactly the malformed records (raw mode: none); and
the rows carry what was produced (raw mode: the key/value bytes, headers when included).

How the runs are shaped
  * ``source.startingOffsets``: ``table`` (an empty table falls back to earliest),
    ``earliest``, an explicit JSON map (skips the first records of each partition, so the
    arrow engine reads the first batch itself), ``latest`` (records produced before the
    query starts are never ingested: the query first commits its empty first batch, then
    a second wave is produced and read -- by a restart with the same checkpoint under
    ``available-now`` / ``once``, by the running query under ``processing-time``).
  * ``trigger.mode: processing-time``: a second wave is produced once the first batch is
    committed, and the query is stopped when every expected record is committed.
  * ``trigger.mode: available-now``: ``source.maxRecordsPerTrigger`` splits the topic
    into several batches, so batches after the first run on the configured engine.
  * partitioning "with": ``sink.partitionBy`` for the Iceberg table and
    ``sink.hudi.partitionFields`` for the Hudi table (``partitionBy`` is Iceberg only;
    a Hudi sink refuses it with a one-line ConfigError, asserted separately below).

The full cartesian product (2,304 cases, ~4 s each) is not run: too slow even for ``-m slow``.
"""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.kafka_fixtures import KafkaTestBroker

from pipeline.app import Pipeline, RunStats
from pipeline.config import parse_config
from pipeline.errors import ConfigError

Coord = tuple[str, int, int]

#: The keys that change the data path and every documented value of each.
AXES: dict[str, list[Any]] = {
    "decode.format": ["json", "raw"],
    "decode.engine": ["arrow", "spark"],
    "source.includeHeaders": [False, True],
    "sink.format": ["iceberg", "hudi", "both"],
    "source.startingOffsets": ["table", "earliest", "latest", "explicit"],
    "source.minPartitions": [None, 4],  # unset, more than the topic's 2 partitions
    "commit.mode": ["exactly-once", "at-least-once"],
    "trigger.mode": ["processing-time", "available-now", "once"],
    "partitioning": ["none", "partitioned"],
}

PARTITIONS = 2
PER_PARTITION = 15  # records per partition per wave
SKIP = {0: 3, 1: 1}  # explicit startingOffsets: first offset read in each partition
SCHEMA = [
    {"name": "id", "type": "long", "required": True},
    {"name": "name", "type": "string"},
    {"name": "ts", "type": "timestamptz"},
]


def pairwise_cases() -> list[dict[str, Any]]:
    from allpairspy import AllPairs

    keys = list(AXES)
    return [dict(zip(keys, row, strict=True)) for row in AllPairs([AXES[k] for k in keys])]


CASES = pairwise_cases()


def _case_id(case: dict[str, Any]) -> str:
    short = {None: "minP-unset", 4: "minP-4", False: "nohdr", True: "hdr"}
    return (
        "-".join(short.get(v, str(v)) if not isinstance(v, str) else v for v in case.values())
        .replace("exactly-once", "eo")
        .replace("at-least-once", "alo")
    )


def test_cases_are_pairwise_complete() -> None:
    """Every pair of values of every two keys appears in at least one generated case."""
    assert len(CASES) < len(list(itertools.product(*AXES.values())))
    for a, b in itertools.combinations(AXES, 2):
        seen = {(c[a], c[b]) for c in CASES}
        missing = set(itertools.product(AXES[a], AXES[b])) - seen
        assert not missing, f"{a} x {b}: pairs never generated: {sorted(missing, key=str)}"
    for c in CASES:  # every case uses only listed values
        assert set(c) == set(AXES) and all(c[k] in AXES[k] for k in AXES)


# -- producing ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Produced:
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]] | None
    malformed: bool  # in JSON mode: a dead letter


def produce_wave(bootstrap: str, topic: str, wave: int) -> dict[Coord, Produced]:
    """``PER_PARTITION`` records to each partition; every fifth value is not valid for
    the schema (truncated JSON, bytes that are not UTF-8, a missing required field)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": "5", "acks": "all"})
    out: dict[Coord, Produced] = {}
    errors: list[Any] = []

    def on_delivery(rec: Produced) -> Any:
        def cb(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                out[(msg.topic(), msg.partition(), msg.offset())] = rec

        return cb

    for i in range(PER_PARTITION * PARTITIONS):
        n = wave * 1000 + i
        text = json.dumps({"id": n, "name": f"n{n}", "ts": f"2024-06-0{1 + n % 3}T10:00:00Z"})
        value = text.encode()
        malformed = i % 5 == 2
        if malformed:  # truncated, not UTF-8, a required field missing
            value = [value[:7], b"\x00\xff\xfe" + bytes([i]), b'{"name": "no id"}'][i % 3]
        headers = [("trace", f"t{n}".encode())] if i % 2 else None
        rec = Produced(f"k{n}".encode(), value, headers, malformed)
        producer.produce(
            topic,
            key=rec.key,
            value=rec.value,
            partition=i % PARTITIONS,
            headers=headers,
            on_delivery=on_delivery(rec),
        )
    producer.flush(30)
    assert not errors and len(out) == PER_PARTITION * PARTITIONS, errors
    return out


# -- configuring and reading back ----------------------------------------------------------


def case_config(case: dict[str, Any], tmp: Path, bootstrap: str, topic: str) -> dict[str, Any]:
    raw = case["decode.format"] == "raw"
    partitioned = case["partitioning"] == "partitioned"
    start = case["source.startingOffsets"]
    source: dict[str, Any] = {
        "bootstrapServers": bootstrap,
        "topics": [topic],
        "includeHeaders": case["source.includeHeaders"],
        "startingOffsets": (
            {topic: {str(p): off for p, off in SKIP.items()}} if start == "explicit" else start
        ),
    }
    if case["source.minPartitions"] is not None:
        source["minPartitions"] = case["source.minPartitions"]
    trigger: dict[str, Any] = {"mode": case["trigger.mode"]}
    if case["trigger.mode"] == "available-now":
        source["maxRecordsPerTrigger"] = PER_PARTITION * PARTITIONS // 2 + 1  # two batches
    elif case["trigger.mode"] == "processing-time":
        trigger["interval"] = "200 milliseconds"
    decode: dict[str, Any] = {"format": case["decode.format"], "engine": case["decode.engine"]}
    if not raw:
        decode["schema"] = SCHEMA
    sink: dict[str, Any] = {
        "format": case["sink.format"],
        "catalog": {"warehouse": str(tmp / "warehouse")},
        "table": "db.t",
    }
    if case["sink.format"] in ("iceberg", "both") and partitioned:
        sink["partitionBy"] = ["_kafka_partition"] if raw else ["day(ts)"]
    if case["sink.format"] in ("hudi", "both"):
        sink["hudi"] = {"basePath": str(tmp / "hudi" / "t")}
        if partitioned:
            sink["hudi"]["partitionFields"] = ["_kafka_partition"] if raw else ["name"]
    return {
        "id": f"m-{topic}",
        "source": source,
        "decode": decode,
        "sink": sink,
        "checkpointLocation": str(tmp / "checkpoint"),
        "commit": {"mode": case["commit.mode"]},
        "trigger": trigger,
        "metrics": {"enabled": False},
    }


def _iceberg(tmp: Path, identifier: str) -> pa.Table | None:
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchTableError

    from pipeline.config import CatalogConfig

    props = CatalogConfig(warehouse=str(tmp / "warehouse")).pyiceberg_properties()
    try:
        return load_catalog("lake", **props).load_table(identifier).scan().to_arrow()
    except NoSuchTableError:
        return None


def _hudi(base: Path) -> pa.Table | None:
    hudi = pytest.importorskip("hudi")
    if not (base / ".hoodie").is_dir():
        return None
    batches = hudi.HudiTableBuilder.from_base_uri(str(base)).build().read()
    return pa.Table.from_batches(batches) if batches else None


def tables(case: dict[str, Any], tmp: Path) -> tuple[dict[str, pa.Table | None], pa.Table | None]:
    """({name: main table}, dead-letter table) as read by pyiceberg / hudi-rs."""
    fmt = case["sink.format"]
    mains: dict[str, pa.Table | None] = {}
    if fmt in ("iceberg", "both"):
        mains["iceberg"] = _iceberg(tmp, "db.t")
    if fmt in ("hudi", "both"):
        mains["hudi"] = _hudi(tmp / "hudi" / "t")
    if fmt == "hudi":
        dead = _hudi(tmp / "hudi" / "t_dead_letter")
    else:
        dead = _iceberg(tmp, "db.t_dead_letter")
    return mains, dead


def rows(t: pa.Table | None) -> Iterator[tuple[Coord, dict[str, Any]]]:
    for r in t.to_pylist() if t is not None else []:
        yield (r["_kafka_topic"], r["_kafka_partition"], r["_kafka_offset"]), r


def _headers(h: Any) -> list[tuple[str, bytes]] | None:
    return [(x["key"], bytes(x["value"])) for x in h] if h else None


def check(case: dict[str, Any], tmp: Path, expected: dict[Coord, Produced]) -> None:
    raw = case["decode.format"] == "raw"
    hdrs = case["source.includeHeaders"]
    bad = {c for c, p in expected.items() if p.malformed and not raw}
    mains, dead_table = tables(case, tmp)
    dead = Counter(c for c, _ in rows(dead_table))
    assert set(dead) == bad and all(n == 1 for n in dead.values()), "dead letters"
    for c, r in rows(dead_table):
        p = expected[c]
        assert (bytes(r["key"]), bytes(r["value"])) == (p.key, p.value)
        assert _headers(r["headers"]) == (p.headers if hdrs else None)
        assert r["error"]
    for name, table in mains.items():
        main = Counter(c for c, _ in rows(table))
        both = main + dead
        assert set(both) == set(expected), f"{name}: records missing or foreign"
        assert max(both.values()) == 1, f"{name}: records twice"
        for c, r in rows(table):
            p = expected[c]
            if raw:
                assert (bytes(r["key"]), bytes(r["value"])) == (p.key, p.value), name
                assert _headers(r["headers"]) == (p.headers if hdrs else None), name
            else:
                assert r["id"] == json.loads(p.value)["id"] and r["name"] == f"n{r['id']}"


# -- the matrix ---------------------------------------------------------------------------

RUN_TIMEOUT_S = 90.0


def _run(p: Pipeline, until: Any = None, tick: Any = None) -> RunStats:
    stats = p.run(until=until, tick=tick, timeout_s=RUN_TIMEOUT_S)
    assert stats.error is None
    return stats


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_matrix_case(
    case: dict[str, Any], spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_broker.new_topic("mx", PARTITIONS)
    cfg = parse_config(case_config(case, tmp_path, bootstrap, topic))
    start, mode = case["source.startingOffsets"], case["trigger.mode"]

    first = produce_wave(bootstrap, topic, 0)
    expected: dict[Coord, Produced] = {}
    if start == "explicit":
        expected.update({c: p for c, p in first.items() if c[2] >= SKIP[c[1]]})
    elif start != "latest":
        expected.update(first)

    if mode == "processing-time":
        # second wave once the first batch is committed (for latest: its start is fixed)
        waves: list[dict[Coord, Produced]] = []

        def tick(stats: RunStats) -> None:
            if not waves and stats.batches + stats.skipped >= 1:
                waves.append(produce_wave(bootstrap, topic, 1))
                expected.update(waves[0])

        def done(stats: RunStats) -> bool:
            return bool(waves) and stats.records + stats.dead_letters >= len(expected)

        t0 = time.monotonic()
        _run(Pipeline(cfg, spark), until=done, tick=tick)
        assert waves and time.monotonic() - t0 < RUN_TIMEOUT_S, "expected records not reached"
    else:
        stats = _run(Pipeline(cfg, spark))
        if start == "latest":
            assert stats.records + stats.dead_letters == 0  # produced before the start
            second = produce_wave(bootstrap, topic, 1)
            expected.update(second)
            _run(Pipeline(cfg, spark))  # same checkpoint: resumes after its empty batch
    check(case, tmp_path, expected)


def test_partition_by_on_a_hudi_sink_is_one_clear_error(tmp_path: Path) -> None:
    case = dict(CASES[0], **{"sink.format": "hudi"})
    data = case_config(case, tmp_path, "127.0.0.1:1", "t")
    data["sink"]["partitionBy"] = ["day(ts)"]
    with pytest.raises(ConfigError) as e:
        Pipeline(parse_config(data))
    msg = str(e.value)
    assert "\n" not in msg and "sink.hudi.partitionFields" in msg


# -- raw mode without headers (the decoder once left out a column) ---------------------------


@pytest.mark.parametrize("engine", ["arrow", "spark"])
def test_raw_mode_without_headers_keeps_key_and_value(
    engine: str, spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    """``decode: {format: raw}``, default ``includeHeaders: false``, earliest,
    Iceberg: 500 JSON records in a 2-partition topic, all committed exactly once with
    their key/value bytes (the decoder left out the raw table's ``headers`` column)."""
    from lab.generator import GeneratorSpec, generate_events, produce

    topic = kafka_broker.new_topic("rawnh", 2)
    spec = GeneratorSpec(count=500, seed=19)
    r = produce(kafka_broker.bootstrap_servers, topic, spec)
    assert r.produced == 500
    cfg = parse_config(
        {
            "id": f"raw-{topic}",
            "source": {
                "bootstrapServers": kafka_broker.bootstrap_servers,
                "topics": [topic],
                "startingOffsets": "earliest",
                # three batches: the arrow engine reads the later ones itself
                "maxRecordsPerTrigger": 200,
            },
            "decode": {"format": "raw", "engine": engine},
            "sink": {"catalog": {"warehouse": str(tmp_path / "warehouse")}, "table": "db.t"},
            "checkpointLocation": str(tmp_path / "checkpoint"),
            "trigger": {"mode": "available-now"},
            "metrics": {"enabled": False},
        }
    )
    stats = _run(Pipeline(cfg, spark))
    assert stats.dead_letters == 0 and stats.records == 500
    t = _iceberg(tmp_path, "db.t")
    assert t is not None and t.num_rows == 500
    got = Counter((bytes(row["key"]), bytes(row["value"])) for _, row in rows(t))
    assert got == Counter(generate_events(spec))
    assert len({c for c, _ in rows(t)}) == 500
    # null in the files; pyiceberg's scan reads a null list as [] (either means none)
    assert not any(t["headers"].to_pylist())
    dead = _iceberg(tmp_path, "db.t_dead_letter")
    assert dead is None or dead.num_rows == 0
