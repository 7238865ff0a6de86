"""A pipeline's routed tables, resolved from ``sink.routes`` when it starts.

:func:`table_routes` turns the configuration into the ordered tables of the set
(:class:`RoutedTable`: ``sink.table`` first, under the set name ``main``, then every other
table in the order the routes name them) and the workers' :class:`~pipeline.spark.routes.Router`,
whose indices are positions in that order. Every format that writes routed tables opens
them from here, so one configuration means one set everywhere: the writer, ``ingest
status``, ``ingest verify`` and the drills.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from pipeline.commit.offsets import PartitionOffsets
from pipeline.commit.types import MAIN
from pipeline.config import PipelineConfig
from pipeline.config.routes import RoutesConfig, RouteTable, table_for_topic
from pipeline.errors import ConfigError, TableSetGrew
from pipeline.spark.routes import Router

__all__ = [
    "RoutedTable",
    "TableRoutes",
    "check_route_field",
    "main_tables",
    "new_topic_check",
    "table_routes",
]


@dataclass(frozen=True)
class RoutedTable:
    """One main table of a routed set, its per-table settings resolved."""

    name: str  # in the set (and the journal's staged-file lists): main, else the identifier
    identifier: str
    partition_by: tuple[str, ...]
    table_properties: dict[str, str]
    target_file_size_bytes: int
    # Hudi tables: the route's overrides of sink.hudi (None: the format's default)
    base_path: str | None = None
    record_key_fields: tuple[str, ...] | None = None
    partition_fields: tuple[str, ...] | None = None


@dataclass(frozen=True)
class TableRoutes:
    tables: tuple[RoutedTable, ...]  # the set's main tables; the first is sink.table
    router: Router


def main_tables(cfg: PipelineConfig, routes: TableRoutes | None) -> tuple[RoutedTable, ...]:
    """The set's main tables in order: the routed ones, or ``sink.table`` alone."""
    if routes is not None:
        return routes.tables
    sink = cfg.sink
    return (
        RoutedTable(
            MAIN,
            sink.table,
            tuple(sink.partition_by),
            dict(sink.table_properties),
            sink.target_file_size_bytes,
        ),
    )


def _source_topics(cfg: PipelineConfig) -> list[str] | None:
    """The topics the source names (None: a topic pattern, resolved by the broker)."""
    if cfg.source.topics:
        return list(cfg.source.topics)
    if cfg.source.assign:
        return list(cfg.source.assign)
    return None


def _matching_topics(cfg: PipelineConfig) -> list[str]:
    """The topics ``source.topicPattern`` matches now, as the broker lists them."""
    from pipeline.kafka.client import KafkaMetadata, consumer_config

    s = cfg.source
    conf = consumer_config(s.bootstrap_servers, s.kafka, isolation_level=s.isolation_level)
    return KafkaMetadata(conf, timeout_s=15).topics_matching(s.topic_pattern or "")


def _entries(cfg: PipelineConfig, routes: RoutesConfig) -> list[tuple[str, RouteTable]]:
    """``(topic, field value or pattern -> its table)`` in the configuration's order,
    the template expanded over the source's topics."""
    entries = list(routes.tables.items())
    if routes.by != "topic":
        return entries
    topics = _source_topics(cfg)
    if topics is not None:
        unread = sorted(set(routes.tables) - set(topics))
        if unread:
            raise ConfigError(
                f"sink.routes.tables names topics the source does not read: {', '.join(unread)}"
            )
    if routes.template is not None:
        if topics is None:  # a pattern: its topics now; a later one restarts the run
            topics = _matching_topics(cfg)
        entries += [
            (t, RouteTable(table=table_for_topic(routes.template, t)))
            for t in topics
            if t not in routes.tables
        ]
    return entries


def _resolve(cfg: PipelineConfig, identifier: str, entry: RouteTable | None) -> RoutedTable:
    sink = cfg.sink
    return RoutedTable(
        name=MAIN if identifier == sink.table else identifier,
        identifier=identifier,
        partition_by=tuple(
            entry.partition_by
            if entry is not None and entry.partition_by is not None
            else sink.partition_by
        ),
        table_properties={**sink.table_properties, **(entry.table_properties if entry else {})},
        target_file_size_bytes=(
            entry.target_file_size_bytes
            if entry is not None and entry.target_file_size_bytes is not None
            else sink.target_file_size_bytes
        ),
        base_path=entry.base_path if entry else None,
        record_key_fields=_tuple(entry.record_key_fields if entry else None),
        partition_fields=_tuple(entry.partition_fields if entry else None),
    )


def _tuple(values: list[str] | None) -> tuple[str, ...] | None:
    return tuple(values) if values is not None else None


_HUDI_KEYS = {"base_path": "basePath", "record_key_fields": "recordKeyFields"}
_HUDI_KEYS["partition_fields"] = "partitionFields"
_ICEBERG_KEYS = {"partition_by": "partitionBy", "table_properties": "tableProperties"}


def _check_format_keys(cfg: PipelineConfig, entries: list[tuple[str, RouteTable]]) -> None:
    """ConfigError for a route's override the configured format does not have."""
    fmt = cfg.sink.format
    if fmt == "both":
        raise ConfigError("sink.routes is for sink.format iceberg or hudi, not both")
    foreign = _HUDI_KEYS if fmt == "iceberg" else _ICEBERG_KEYS
    for key, entry in entries:
        for attr, name in foreign.items():
            if getattr(entry, attr):
                raise ConfigError(
                    f"sink.routes.tables.{key}.{name} is not a setting of sink.format {fmt}"
                )


def table_routes(cfg: PipelineConfig) -> TableRoutes | None:
    """The routed set of ``cfg`` (None: one main table, no routes). ConfigError when two
    routes give one table different settings or a route names the dead-letter table."""
    routes = cfg.sink.routes
    if routes is None:
        return None
    entries = _entries(cfg, routes)
    default = routes.default or cfg.sink.table
    chosen: dict[str, RouteTable | None] = {cfg.sink.table: None}
    if default != cfg.sink.table:
        chosen[default] = None
    for _, entry in entries:
        earlier = chosen.get(entry.table)
        if earlier is not None and earlier != entry:
            raise ConfigError(
                f"sink.routes: table {entry.table} is routed to twice with different settings"
            )
        chosen[entry.table] = entry
    if cfg.sink.dead_letter_identifier in chosen:
        raise ConfigError(
            f"sink.routes: {cfg.sink.dead_letter_identifier} is the dead-letter table, "
            "not a routed table"
        )
    _check_format_keys(cfg, entries)
    tables = tuple(_resolve(cfg, identifier, e) for identifier, e in chosen.items())
    index = {t.identifier: i for i, t in enumerate(tables)}
    exact: dict[str, int] = {}
    patterns: list[tuple[str, int]] = []
    for value, entry in entries:
        if routes.match == "regex":
            patterns.append((value, index[entry.table]))
        else:
            exact[value] = index[entry.table]
    column = "_kafka_topic" if routes.by == "topic" else str(routes.field)
    router = Router(column, exact, tuple(patterns), index[default])
    return TableRoutes(tables, router)


def new_topic_check(
    cfg: PipelineConfig, router: Router | None
) -> Callable[[PartitionOffsets], None] | None:
    """With ``source.topicPattern`` and ``sink.routes.template``: the check, before each
    batch, that every topic of the batch has its table in the set the pipeline opened
    (``router``, the one its workers route with); TableSetGrew (the run starts again with
    it, Spark replays the batch) otherwise."""
    routes = cfg.sink.routes
    if routes is None or routes.template is None or _source_topics(cfg) is not None:
        return None
    assert router is not None  # a routed set's tables route
    known = set(router.exact)
    template = routes.template

    def check(end: PartitionOffsets) -> None:
        new = sorted({tp.topic for tp in end} - known)
        if new:
            tables = ", ".join(f"{t} -> {table_for_topic(template, t)}" for t in new)
            raise TableSetGrew(f"new topic(s) of source.topicPattern: {tables}")

    return check


def check_route_field(routes: TableRoutes, columns: list[str]) -> None:
    """ConfigError unless the router's column is one of the table's ``columns``."""
    if routes.router.column not in columns:
        raise ConfigError(
            f"sink.routes.field {routes.router.column!r} is not a column of the table "
            f"(columns: {', '.join(c for c in columns if not re.match('_kafka_', c))})"
        )
