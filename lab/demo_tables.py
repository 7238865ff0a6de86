"""``ingest demo --tables N``: N topics into N Iceberg tables through one pipeline
(``sink.routes`` by topic), then every table checked on its own.

The topics are ``events-1`` … ``events-N``; the routes' template names each topic's table
(``demo.events_1`` …; ``sink.table`` is the first of them, so the set is exactly N
tables). The check reads each table and the shared dead-letter table: every record of a
topic once in that topic's table (or among the dead letters), and no record of another
topic in it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.table import Table as RichTable

from pipeline.commit.offsets import TopicPartition
from pipeline.config.routes import table_for_topic

TEMPLATE = "demo.{topic}"
COORDS = ("_kafka_topic", "_kafka_partition", "_kafka_offset")


def demo_topics(tables: int) -> list[str]:
    """The topics of a demo of ``tables`` tables (one: the demo's own ``events``)."""
    return ["events"] if tables == 1 else [f"events-{i}" for i in range(1, tables + 1)]


def table_of(topic: str) -> str:
    return table_for_topic(TEMPLATE, topic)


def routed_sink(sink: dict[str, Any], topics: Sequence[str]) -> dict[str, Any]:
    """``sink`` writing each of ``topics`` to a table of its own."""
    return {**sink, "table": table_of(topics[0]), "routes": {"by": "topic", "template": TEMPLATE}}


@dataclass(frozen=True)
class TableCheck:
    table: str
    topic: str
    produced: int
    rows: int  # in the table
    dead_letters: int  # the topic's records in the dead-letter table
    missing: int
    duplicated: int
    misplaced: int  # rows of another topic in this table

    @property
    def ok(self) -> bool:
        return self.missing == 0 and self.duplicated == 0 and self.misplaced == 0


def _coords(table: Any) -> pa.Table:
    """The coordinates of a pyiceberg table (none when it does not exist)."""
    if table is None:
        return pa.table({c: pa.array([], t) for c, t in zip(COORDS, _TYPES, strict=True)})
    return table.scan(selected_fields=COORDS).to_arrow()


_TYPES = (pa.string(), pa.int32(), pa.int64())


def check_tables(
    tables: Any, topics: Sequence[str], expected: Mapping[TopicPartition, Sequence[int]]
) -> list[TableCheck]:
    """One check per topic's table of the pipeline's routed Iceberg set ``tables``."""
    from pipeline.ops.verify import compare, offsets_by_partition

    by_name = {c.iceberg.name: c for _, c in tables.mains()}
    dead = _coords(tables.dead_letter.table() if tables.dead_letter else None)
    checks = []
    for topic in topics:
        name = table_of(topic)
        rows = _coords(by_name[name].table())
        own = rows.filter(pc.equal(rows["_kafka_topic"], topic))
        dl = dead.filter(pc.equal(dead["_kafka_topic"], topic))
        want = {tp: offs for tp, offs in expected.items() if tp.topic == topic}
        present = offsets_by_partition([*own.to_batches(), *dl.to_batches()])
        t = compare(present, want).totals()
        checks.append(
            TableCheck(
                table=name,
                topic=topic,
                produced=sum(len(o) for o in want.values()),
                rows=rows.num_rows,
                dead_letters=dl.num_rows,
                missing=int(t.missing),
                duplicated=int(t.duplicated),
                misplaced=rows.num_rows - own.num_rows,
            )
        )
    return checks


def print_checks(console: Console, checks: Sequence[TableCheck], lake: object) -> bool:
    """The per-table check and the verdict over the set; whether it passed."""
    view = RichTable(title=f"{len(checks)} topics → {len(checks)} Iceberg tables, one pipeline")
    for col in ("table", "topic", "produced", "rows", "dead letters", "missing", "duplicated"):
        view.add_column(col, justify="left" if col in ("table", "topic") else "right")
    view.add_column("other topics' rows", justify="right")
    for c in checks:
        view.add_row(
            c.table,
            c.topic,
            str(c.produced),
            str(c.rows),
            str(c.dead_letters),
            str(c.missing),
            str(c.duplicated),
            str(c.misplaced),
        )
    console.print(view)
    ok = all(c.ok for c in checks)
    verdict = "[bold green]EXACTLY ONCE[/]" if ok else "[bold red]MISMATCH[/]"
    produced = sum(c.produced for c in checks)
    console.print(
        f"{verdict} across {len(checks)} tables: {produced} produced, "
        f"{sum(c.rows + c.dead_letters for c in checks)} in the tables, "
        f"{sum(c.missing for c in checks)} missing, {sum(c.duplicated for c in checks)} "
        f"duplicated, {sum(c.misplaced for c in checks)} in another topic's table — "
        f"tables under {lake}"
    )
    return ok
