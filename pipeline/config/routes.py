"""``sink.routes``: which table each record goes to, when a pipeline writes several.

Two ways to route (``by``):

* ``topic`` -- the record's topic picks its table: ``tables`` maps topic names to tables,
  and ``template`` (e.g. ``lake.{topic}``) names the table of every other topic the
  source reads (with ``source.topicPattern``: the topics it matches when the run starts,
  and a topic that starts matching later gets its table when its first batch comes:
  the run starts again with it);
* ``field`` -- a decoded column's value picks it: ``tables`` maps values (``match:
  exact``) or regular expressions over them (``match: regex``, the first that matches
  wins) to tables.

Records no entry names go to ``default`` (``sink.table`` unless set).

A table entry is an identifier or an object with per-table overrides of the sink's
``partitionBy``, ``tableProperties`` and ``targetFileSizeBytes`` (Iceberg), and of
``sink.hudi``'s ``basePath``, ``recordKeyFields`` and ``partitionFields`` (Hudi; the base
path defaults to ``<the directory of sink.hudi.basePath>/<table name>``). The set of tables is
fixed when the pipeline starts (docs/design.md invariant 16).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from pipeline.config.base import _Model

__all__ = ["IDENTIFIER", "RouteTable", "RoutesConfig", "table_for_topic"]

#: A table identifier: a namespace and a name, dot-separated.
IDENTIFIER = r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+$"
_NOT_A_WORD = re.compile(r"\W")


class RouteTable(_Model):
    """One routed table and what it sets apart from the sink's defaults."""

    table: str = Field(pattern=IDENTIFIER)
    partition_by: list[str] | None = None
    table_properties: dict[str, str] = Field(default_factory=dict)
    target_file_size_bytes: int | None = Field(default=None, ge=1024)
    base_path: str | None = Field(default=None, min_length=1)  # Hudi
    record_key_fields: list[str] | None = None  # Hudi
    partition_fields: list[str] | None = None  # Hudi


class RoutesConfig(_Model):
    by: Literal["topic", "field"]
    field: str | None = None  # by: field -- the decoded column whose value routes
    match: Literal["exact", "regex"] = "exact"  # by: field
    tables: dict[str, RouteTable] = Field(default_factory=dict)
    template: str | None = None  # by: topic -- {topic} is the topic, non-word chars -> _
    default: str | None = Field(default=None, pattern=IDENTIFIER)  # default: sink.table

    @field_validator("tables", mode="before")
    @classmethod
    def _bare_identifiers(cls, value: object) -> object:
        """``topic: lake.t`` is short for ``topic: {table: lake.t}``."""
        if not isinstance(value, dict):
            return value
        return {k: {"table": v} if isinstance(v, str) else v for k, v in value.items()}

    @model_validator(mode="after")
    def _one_way(self) -> RoutesConfig:
        if self.by == "field":
            if not self.field:
                raise ValueError("sink.routes.field is required when sink.routes.by is field")
            if self.template is not None:
                raise ValueError("sink.routes.template is for sink.routes.by topic")
            if self.match == "regex":
                for pattern in self.tables:
                    try:
                        re.compile(pattern)
                    except re.error as e:
                        raise ValueError(
                            f"sink.routes.tables: {pattern!r} is not a regular expression: {e}"
                        ) from None
        else:
            if self.field is not None or self.match != "exact":
                raise ValueError("sink.routes.field and match are for sink.routes.by field")
            if self.template is not None:
                if "{topic}" not in self.template:
                    raise ValueError("sink.routes.template must contain {topic}")
                if not re.match(IDENTIFIER, self.template.replace("{topic}", "t")):
                    raise ValueError(
                        f"sink.routes.template {self.template!r} does not make a table "
                        "identifier (namespace.name)"
                    )
            elif not self.tables:
                raise ValueError("sink.routes needs tables or a template")
        return self


def table_for_topic(template: str, topic: str) -> str:
    """The table ``template`` names for ``topic`` (characters an identifier may not
    hold become ``_``)."""
    return template.replace("{topic}", _NOT_A_WORD.sub("_", topic))
