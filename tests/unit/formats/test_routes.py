"""A routed set resolved from the configuration: its tables in order and the router."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.commit.types import MAIN
from pipeline.config import parse_config
from pipeline.errors import ConfigError
from pipeline.formats.routes import check_route_field, table_routes

BASE: dict[str, Any] = {
    "id": "p1",
    "source": {"bootstrapServers": "localhost:9092", "topics": ["orders", "pay-ments", "misc"]},
    "decode": {"schema": [{"name": "kind", "type": "string"}]},
    "sink": {"table": "db.events", "partitionBy": ["kind"], "tableProperties": {"x": "1"}},
    "checkpointLocation": "/tmp/ckpt",
}


def _routes(routes: dict[str, Any], **source: Any) -> Any:
    doc = {**BASE, "sink": {**BASE["sink"], "routes": routes}}
    if source:
        doc["source"] = {"bootstrapServers": "localhost:9092", **source}
    return table_routes(parse_config(doc))


def test_no_routes_no_set() -> None:
    assert table_routes(parse_config(BASE)) is None


def test_sink_table_comes_first_as_main_and_overrides_apply_per_table() -> None:
    routes = _routes(
        {
            "by": "topic",
            "tables": {
                "orders": {"table": "db.orders", "partitionBy": [], "tableProperties": {"y": "2"}}
            },
            "template": "lake.{topic}",
        }
    )
    names = [(t.name, t.identifier) for t in routes.tables]
    assert names == [
        (MAIN, "db.events"),
        ("db.orders", "db.orders"),
        ("lake.pay_ments", "lake.pay_ments"),
        ("lake.misc", "lake.misc"),
    ]
    orders = routes.tables[1]
    assert orders.partition_by == () and orders.table_properties == {"x": "1", "y": "2"}
    assert routes.tables[2].partition_by == ("kind",)
    assert routes.router.column == "_kafka_topic"
    assert routes.router.exact == {"orders": 1, "pay-ments": 2, "misc": 3}


def test_a_route_may_name_sink_table_itself() -> None:
    routes = _routes({"by": "topic", "tables": {"orders": "db.events", "misc": "db.m"}})
    assert [t.identifier for t in routes.tables] == ["db.events", "db.m"]
    assert routes.router.exact == {"orders": 0, "misc": 1} and routes.router.default == 0


def test_field_routes_keep_their_order_and_a_default() -> None:
    routes = _routes(
        {
            "by": "field",
            "field": "kind",
            "match": "regex",
            "tables": {"a.*": "db.a", "ab": "db.b"},
            "default": "db.rest",
        }
    )
    assert [t.identifier for t in routes.tables] == ["db.events", "db.rest", "db.a", "db.b"]
    assert routes.router.patterns == (("a.*", 2), ("ab", 3)) and routes.router.default == 1
    check_route_field(routes, ["kind", "_kafka_topic"])
    with pytest.raises(ConfigError, match="sink.routes.field 'kind' is not a column"):
        check_route_field(routes, ["other"])


@pytest.mark.parametrize(
    ("routes", "source", "message"),
    [
        ({"by": "topic", "tables": {"nope": "db.n"}}, {}, "topics the source does not read: nope"),
        (
            {
                "by": "topic",
                "tables": {"orders": "db.x", "misc": {"table": "db.x", "partitionBy": []}},
            },
            {},
            "db.x is routed to twice with different settings",
        ),
        ({"by": "topic", "tables": {"orders": "db.events_dead_letter"}}, {}, "is the dead-letter"),
    ],
)
def test_a_set_the_source_or_the_tables_contradict_is_refused(
    routes: dict[str, Any], source: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        _routes(routes, **source)


@pytest.mark.parametrize(
    ("sink", "entry", "message"),
    [
        ({}, {"table": "db.a", "basePath": "/x"}, "tables.orders.basePath is not a setting of"),
        (
            {"format": "hudi", "partitionBy": [], "hudi": {"basePath": "/h/events"}},
            {"table": "db.a", "partitionBy": ["kind"]},
            "tables.orders.partitionBy is not a setting of sink.format hudi",
        ),
        (
            {"format": "both", "hudi": {"basePath": "/h/events"}},
            {"table": "db.a"},
            "sink.routes is for sink.format iceberg or hudi, not both",
        ),
    ],
)
def test_a_route_setting_of_the_other_format_is_refused(
    sink: dict[str, Any], entry: dict[str, Any], message: str
) -> None:
    doc = {**BASE, "sink": {**BASE["sink"], **sink}}
    doc["sink"]["routes"] = {"by": "topic", "tables": {"orders": entry}}
    with pytest.raises(ConfigError, match=message):
        table_routes(parse_config(doc))


def test_hudi_tables_get_a_base_path_beside_the_default_tables_unless_given() -> None:
    from pipeline.formats.hudi.pipeline_tables import routed_bases

    doc = {
        **BASE,
        "sink": {
            "format": "hudi",
            "table": "db.events",
            "hudi": {"basePath": "/lake/hudi/events"},
            "routes": {
                "by": "topic",
                "tables": {"orders": "db.orders", "misc": {"table": "x.m", "basePath": "/o/m"}},
            },
        },
    }
    cfg = parse_config(doc)
    bases = [(t.identifier, b) for t, b in routed_bases(cfg, table_routes(cfg))]
    assert bases == [
        ("db.events", "/lake/hudi/events"),
        ("db.orders", "/lake/hudi/orders"),
        ("x.m", "/o/m"),
    ]
    doc["sink"]["routes"]["tables"]["misc"] = "other.orders"
    cfg = parse_config(doc)
    with pytest.raises(ConfigError, match="would share the Hudi base path /lake/hudi/orders"):
        routed_bases(cfg, table_routes(cfg))


def test_a_pattern_s_new_topic_check_decides_from_the_opened_set_s_router() -> None:
    """The check holds a batch to the router the workers route with, never a second
    resolution of the pattern (which could know a topic the opened set does not)."""
    from pipeline.commit.offsets import PartitionOffsets, TopicPartition
    from pipeline.errors import TableSetGrew
    from pipeline.formats.routes import new_topic_check
    from pipeline.spark.routes import Router

    doc = {
        **BASE,
        "source": {"bootstrapServers": "127.0.0.1:9", "topicPattern": "o.*"},
        "sink": {**BASE["sink"], "routes": {"by": "topic", "template": "lake.{topic}"}},
    }
    check = new_topic_check(parse_config(doc), Router("_kafka_topic", {"orders": 1}))
    assert check is not None
    check(PartitionOffsets({TopicPartition("orders", 0): 5}))
    with pytest.raises(TableSetGrew, match=r"ox -> lake\.ox"):
        check(PartitionOffsets({TopicPartition("orders", 0): 5, TopicPartition("ox", 0): 0}))
    assert new_topic_check(parse_config(BASE), None) is None  # no routes: no check
