"""Operators see each table of a routed set: ``ingest compact``, ``ingest verify`` and
``ingest status`` on three Iceberg tables one pipeline wrote (live broker, real Spark).

One pipeline run serves every check (CI time): compaction of each table first, then the
set verified exactly once across its tables (compaction commits add no rows), the status
text, the metrics per table (records committed, data files), and last a row copied into
the wrong table, which verify reports against that table by name.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from rich.console import Console
from support.drivers import pipeline_config
from support.kafka_fixtures import KafkaTestBroker

from lab.generator import GeneratorSpec, produce
from pipeline.app import Pipeline
from pipeline.config import parse_config
from pipeline.maintenance_scheduler import Maintenance
from pipeline.observe.files import FileMetrics
from pipeline.ops.compact import run_compact
from pipeline.ops.status import print_status
from pipeline.ops.verify import verify_pipeline

TABLES = ("db.other", "db.a", "db.b")


def test_compact_verify_and_status_see_every_table_of_a_routed_set(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    a, b, c = (kafka_broker.new_topic(n, 2) for n in ("oa", "ob", "oc"))
    sink = {
        "catalog": {"warehouse": str(tmp_path / "warehouse")},
        "table": "db.other",
        "routes": {"by": "topic", "tables": {a: "db.a", b: "db.b"}},
    }
    doc = pipeline_config(
        tmp_path, bootstrap, a, sink, source={"topics": [a, b, c], "maxRecordsPerTrigger": 600}
    )
    cfg = parse_config(doc)
    for i, t in enumerate((a, b, c)):
        produce(bootstrap, t, GeneratorSpec(count=500, malformed_fraction=0.05, seed=i))
    pipeline = Pipeline(cfg, spark)
    metrics = pipeline.attach_metrics(serve=False)
    try:
        pipeline.run()
    finally:
        metrics.stop()
    committed = {
        s.labels["table"]: s.value
        for m in metrics.table_records.collect()
        for s in m.samples
        if s.name.endswith("_total")
    }

    out = io.StringIO()
    compacted = run_compact(cfg, Console(file=out, width=300), min_input_files=2)
    done = {r.table: r for r in compacted}
    for table in TABLES:  # every main table of the set is compacted
        result = done[f"table {table}"]
        assert result.commit is not None and result.rewritten_files >= 2, done
        assert f"table {table}: compacted " in out.getvalue()

    (report,) = verify_pipeline(cfg, payload=True, window=250)  # the set: one report
    assert report.ok and report.complete, report.verdict()
    assert report.verdict().startswith("EXACTLY ONCE for all 1,500 committed records")
    per_table = {t.table: t for t in report.tables}
    assert list(per_table)[:3] == list(TABLES) and per_table[TABLES[0]].index == 0
    dead = report.tables[-1]
    assert dead.index is None and dead.records > 0  # the shared dead letters, counted once
    assert sum(t.records for t in report.tables) == report.totals().present == 1500
    assert all(per_table[t].records > 400 for t in TABLES)
    assert committed == {t: per_table[t].records for t in TABLES}  # records per table metric

    out = io.StringIO()
    print_status(cfg, Console(file=out, width=300))
    text = out.getvalue()
    for table in TABLES:
        assert f"table {table}: batch " in text
    assert "routed set: 3 tables, every table holds batch " in text
    assert "committed offsets (all 3 tables)" in text

    files = FileMetrics(CollectorRegistry())
    for stats in Maintenance(cfg, pipeline.tables).file_stats():
        files.observe(stats)
    labelled = {s.labels["table"] for m in files.files.collect() for s in m.samples}
    assert {f"table {t}" for t in TABLES} <= labelled

    # a record of topic a copied into db.b: duplicated and misrouted, in db.b
    db_a = dict(pipeline.tables.mains())["db.a"].table()  # type: ignore[attr-defined]
    db_b = dict(pipeline.tables.mains())["db.b"].table()  # type: ignore[attr-defined]
    db_b.append(db_a.scan(limit=1).to_arrow().cast(db_b.schema().as_arrow()))
    (report,) = verify_pipeline(cfg, payload=False)
    tables = {t.table: t for t in report.tables}
    assert not report.ok and tables["db.b"].misrouted == 1 and tables["db.b"].duplicated == 1
    assert tables["db.a"].duplicated == 1 and tables["db.a"].misrouted == 0
    assert "db.b (1 duplicated, 1 misrouted)" in report.verdict()
