"""Routed sets end to end: live broker → pipeline → several Iceberg tables (real Spark).

Exactly-once across the set is shown by counting: every (topic, partition, offset)
produced appears once over the tables together, and each in the table its route names.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.drivers import COORD_COLUMNS, hudi_coords, iceberg_coords, pipeline_config, produced
from support.kafka_fixtures import KafkaTestBroker

from lab.generator import GeneratorSpec, ProduceResult, produce
from pipeline.app import Pipeline
from pipeline.commit.faults import FaultInjected
from pipeline.commit.instant import BatchIdentity
from pipeline.commit.types import DEAD_LETTER
from pipeline.config import parse_config
from pipeline.errors import ConfigError
from pipeline.ops.verify import verify_pipeline

Coord = tuple[str, int, int]


def _config(
    tmp: Path, bootstrap: str, topics: list[str], routes: dict[str, Any], **top: Any
) -> Any:
    doc = pipeline_config(
        tmp,
        bootstrap,
        topics[0],
        {"catalog": {"warehouse": str(tmp / "warehouse")}, "table": "db.other", "routes": routes},
        source={"topics": topics, "maxRecordsPerTrigger": 1200},
        **top,
    )
    return parse_config(doc)


def _by_table(p: Pipeline) -> dict[str, Counter[Coord]]:
    """(topic, partition, offset) per main table of ``p``'s set, by identifier."""
    return {
        c.iceberg.name: iceberg_coords(c)
        for _, c in p.tables.mains()  # type: ignore[attr-defined]
    }


def _of(coords: Counter[Coord], topic: str) -> Counter[Coord]:
    return Counter({c: n for c, n in coords.items() if c[0] == topic})


def _assert_routed(p: Pipeline, results: list[ProduceResult], routes: dict[str, str]) -> None:
    """Every record produced once over the set, each topic's good records in its table."""
    tables = _by_table(p)
    dead = iceberg_coords(p.tables.commit_tables().get(DEAD_LETTER))
    every = produced(*results)
    assert sum(tables.values(), Counter()) + dead == every  # once each, none missing
    for topic, table in routes.items():
        assert tables[table] + _of(dead, topic) == _of(every, topic)


def test_topics_routed_to_tables_exactly_once_across_a_crash_and_a_lost_checkpoint(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    a, b, c = (kafka_broker.new_topic(n, 2) for n in ("ra", "rb", "rc"))
    routes = {"by": "topic", "tables": {a: "db.a", b: {"table": "db.b", "partitionBy": []}}}
    cfg = _config(tmp_path, bootstrap, [a, b, c], routes)
    spec = GeneratorSpec(count=800, malformed_fraction=0.05, seed=3)
    r = [produce(bootstrap, t, spec) for t in (a, b, c)]

    where = {a: "db.a", b: "db.b", c: "db.other"}
    p1 = Pipeline(cfg, spark)
    p1.run()
    _assert_routed(p1, r, where)

    # only topic a gets records: the idle tables commit the batch too (no files)
    r.append(produce(bootstrap, a, GeneratorSpec(count=300, seed=4)))
    p2 = Pipeline(cfg, spark)
    p2.run()
    set2 = p2.tables.commit_tables()
    offsets = {name: t.committed_offsets(cfg.id) for name, t in set2.mains()}
    assert len(set(map(str, offsets.values()))) == 1  # every table stands at the same offsets
    ids = {name: t.iceberg.latest_checkpoint(cfg.id).batch_id for name, t in set2.mains()}
    assert len(set(ids.values())) == 1

    # a crash after the first table's commit: the restart rolls the batch forward
    r.append(produce(bootstrap, b, GeneratorSpec(count=300, seed=5)))
    r.append(produce(bootstrap, c, GeneratorSpec(count=300, seed=6)))
    crashing = _config(
        tmp_path, bootstrap, [a, b, c], routes, commit={"faults": "between-table-commits:raise"}
    )
    with pytest.raises(Exception) as crashed:
        Pipeline(crashing, spark).run()
    assert isinstance(crashed.value, FaultInjected) or "fault injected" in str(crashed.value)
    p3 = Pipeline(cfg, spark)
    p3.run()
    last = p3.tables.commit_tables()
    cp = last.main.iceberg.latest_checkpoint(cfg.id)
    assert last.is_committed(BatchIdentity(cfg.id, cp.incarnation, cp.batch_id))

    # the checkpoint lost: the set's offsets say where to resume
    shutil.rmtree(tmp_path / "checkpoint")
    r.append(produce(bootstrap, c, GeneratorSpec(count=200, seed=7)))
    p4 = Pipeline(cfg, spark)
    p4.run()
    _assert_routed(p4, r, where)


@pytest.mark.slow
def test_a_field_value_routes_each_row_to_its_table_and_others_to_the_default(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_broker.new_topic("rf", 3)
    routes = {
        "by": "field",
        "field": "event_type",
        "match": "regex",
        "tables": {"view|click": "db.browse", "purchase": "db.money"},
    }
    cfg = _config(tmp_path, bootstrap, [topic], routes)
    r = produce(bootstrap, topic, GeneratorSpec(count=3000, seed=9))
    p = Pipeline(cfg, spark)
    p.run()
    kinds: dict[str, set[str]] = {}
    total: Counter[Coord] = Counter()
    for _, committer in p.tables.mains():  # type: ignore[attr-defined]
        rows = committer.table().scan(selected_fields=(*COORD_COLUMNS, "event_type")).to_arrow()
        kinds[committer.iceberg.name] = set(rows["event_type"].to_pylist())
        total.update(iceberg_coords(committer))
    assert kinds["db.browse"] == {"view", "click"}
    assert kinds["db.money"] == {"purchase"}
    assert kinds["db.other"] and not kinds["db.other"] & {"view", "click", "purchase"}
    assert total == produced(r)


def test_a_route_to_a_column_the_table_lacks_is_refused_in_one_line(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    topic = kafka_broker.new_topic("rx", 1)
    cfg = _config(
        tmp_path, kafka_broker.bootstrap_servers, [topic], {"by": "field", "field": "nope"}
    )
    with pytest.raises(ConfigError, match="sink.routes.field 'nope' is not a column"):
        Pipeline(cfg, spark).run()


@pytest.mark.slow
def test_native_hudi_tables_take_their_topics_exactly_once_across_a_crash(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    """The same rules on the native Hudi writer: each topic in its own Hudi table (read by
    hudi-rs), an idle table's commit, a crash between two tables' commits rolled forward."""
    bootstrap = kafka_broker.bootstrap_servers
    a, b = (kafka_broker.new_topic(n, 2) for n in ("ha", "hb"))
    doc = pipeline_config(
        tmp_path,
        bootstrap,
        a,
        {
            "format": "hudi",
            "table": "db.events",
            "hudi": {"basePath": str(tmp_path / "hudi" / "events")},
            "routes": {"by": "topic", "tables": {a: "db.a", b: "db.b"}},
        },
        source={"topics": [a, b], "maxRecordsPerTrigger": 1000},
    )
    r = [
        produce(bootstrap, t, GeneratorSpec(count=700, malformed_fraction=0.05, seed=s))
        for t, s in ((a, 1), (b, 2))
    ]
    Pipeline(parse_config(doc), spark).run()
    r.append(produce(bootstrap, b, GeneratorSpec(count=300, seed=3)))
    crashing = {**doc, "commit": {"faults": "between-table-commits:raise"}}
    with pytest.raises(Exception, match="fault injected"):
        Pipeline(parse_config(crashing), spark).run()
    p = Pipeline(parse_config(doc), spark)
    p.run()
    hudi = tmp_path / "hudi"
    got = {name: hudi_coords(hudi / name) for name in ("a", "b", "events")}
    dead = hudi_coords(hudi / "events_dead_letter")
    every = produced(*r)
    assert got["events"] == Counter()  # the default table: idle, committed, empty
    assert got["a"] + got["b"] + dead == every
    assert got["a"] + _of(dead, a) == _of(every, a) and got["b"] + _of(dead, b) == _of(every, b)
    ends = {n: c.committed_offsets(doc["id"]) for n, c in p.tables.commit_tables().mains()}
    assert len({str(o) for o in ends.values()}) == 1  # every table holds the last batch
    (report,) = verify_pipeline(parse_config(doc), payload=True)  # the set, through hudi-rs
    assert report.ok and report.complete, report.verdict()
    assert sum(t.records for t in report.tables) == sum(every.values())


@pytest.mark.slow
@pytest.mark.extended  # CI's budget: in the rotation
def test_the_many_tables_example_runs_as_documented(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    """``conf/pipeline.tables.yaml`` as it stands: its two named topics and one templated
    topic, each record once in its topic's table."""
    from pipeline.config import load_config

    bootstrap = kafka_broker.bootstrap_servers
    third = kafka_broker.new_topic("clicks", 2)
    for topic in ("orders", "payments"):
        kafka_broker.create_topic(topic, 2)
    r = [
        produce(bootstrap, t, GeneratorSpec(count=300, seed=i))
        for i, t in enumerate(("orders", "payments", third))
    ]
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "THIRD_TOPIC": third,
        "WAREHOUSE": str(tmp_path / "warehouse"),
        "CHECKPOINT_LOCATION": str(tmp_path / "checkpoint"),
    }
    example = Path(__file__).parents[3] / "conf" / "pipeline.tables.yaml"
    cfg = load_config(example, ["trigger.mode=available-now", "metrics.enabled=false"], env)
    p = Pipeline(cfg, spark)
    p.run()
    where = {"orders": "lake.orders", "payments": "lake.payments"}
    where[third] = "lake.t_" + third.replace("-", "_").replace(".", "_")
    _assert_routed(p, r, where)
    assert _by_table(p)["lake.unrouted"] == Counter()


@pytest.mark.slow
def test_a_topic_that_starts_matching_the_pattern_gets_its_table_from_its_first_offset(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    """``source.topicPattern`` with ``routes.template``: a topic created while the pipeline
    runs stops the run before its first batch has an effect; the run starts again with
    the topic's table and Spark replays the batch: every record of both topics once, each
    in its topic's table."""
    import time

    from pipeline.app import run_following_registry

    bootstrap = kafka_broker.bootstrap_servers
    first = kafka_broker.new_topic("rp", 2)
    prefix = first.rsplit("-", 1)[0]
    later = f"{prefix}-late"
    doc = pipeline_config(
        tmp_path,
        bootstrap,
        first,
        {
            "catalog": {"warehouse": str(tmp_path / "warehouse")},
            "table": "db.other",
            "routes": {"by": "topic", "template": "db.t_{topic}"},
        },
        source={"topicPattern": f"{prefix}-.*", "reader": "python"},
    )
    doc["source"].pop("topics")
    doc["trigger"] = {"mode": "processing-time", "interval": "1 second"}
    r = [produce(bootstrap, first, GeneratorSpec(count=400, seed=21))]
    phase = {"n": 0, "at": time.monotonic()}
    starts: list[Pipeline] = []

    def tick(stats: Any) -> None:
        if phase["n"] == 0 and stats.batches >= 1:
            kafka_broker.create_topic(later, 2)
            r.append(produce(bootstrap, later, GeneratorSpec(count=300, seed=22)))
            phase["n"], phase["at"] = 1, time.monotonic()

    def until(stats: Any) -> bool:
        return len(starts) > 1 and time.monotonic() - phase["at"] > 12

    run_following_registry(
        parse_config(doc), spark, started=starts.append, tick=tick, until=until, timeout_s=240
    )
    assert len(starts) == 2  # the new topic started the run once more
    final = Pipeline(parse_config(doc), spark)
    names = [c.iceberg.name for _, c in final.tables.mains()]  # type: ignore[attr-defined]
    table_of = {t: "db.t_" + t.replace("-", "_").replace(".", "_") for t in (first, later)}
    assert names == ["db.other", *table_of.values()]
    _assert_routed(final, r, table_of)
