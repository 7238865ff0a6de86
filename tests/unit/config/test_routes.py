"""``sink.routes``: each way to route is validated in one line naming the key."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.config import parse_config
from pipeline.config.routes import table_for_topic
from pipeline.errors import ConfigError

BASE: dict[str, Any] = {
    "id": "p1",
    "source": {"bootstrapServers": "localhost:9092", "topics": ["orders", "pay-ments"]},
    "decode": {"schema": [{"name": "kind", "type": "string"}]},
    "sink": {"table": "db.events"},
    "checkpointLocation": "/tmp/ckpt",
}


def _with(routes: dict[str, Any]) -> Any:
    return parse_config({**BASE, "sink": {**BASE["sink"], "routes": routes}})


def test_a_bare_identifier_is_short_for_a_table_entry() -> None:
    cfg = _with({"by": "topic", "tables": {"orders": "db.orders"}})
    assert cfg.sink.routes.tables["orders"].table == "db.orders"
    assert cfg.sink.routes.tables["orders"].partition_by is None


@pytest.mark.parametrize(
    ("routes", "message"),
    [
        ({"by": "field", "tables": {"a": "db.a"}}, "sink.routes.field is required"),
        ({"by": "topic", "field": "kind", "tables": {"a": "db.a"}}, "are for sink.routes.by field"),
        ({"by": "topic"}, "needs tables or a template"),
        ({"by": "topic", "template": "lake.events"}, "must contain {topic}"),
        ({"by": "topic", "template": "{topic}"}, "does not make a table identifier"),
        ({"by": "field", "field": "k", "template": "db.{topic}"}, "template is for"),
        ({"by": "field", "field": "k", "match": "regex", "tables": {"(": "db.a"}}, "not a regular"),
        ({"by": "topic", "tables": {"orders": "no_namespace"}}, "tables.orders.table"),
        ({"by": "row"}, "'topic' or 'field'"),
    ],
)
def test_a_bad_route_is_refused_naming_the_key(routes: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("{", r"\{")):
        _with(routes)


def test_a_topic_becomes_an_identifier_through_the_template() -> None:
    assert table_for_topic("lake.{topic}", "pay-ments.v1") == "lake.pay_ments_v1"
