"""End to end: live broker → ingest_kafka → decode → coordinator → Iceberg (real Spark).

Exactly-once is shown by counting (topic, partition, offset) over the main table and
the dead-letter table together.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.drivers import (
    coords,
    iceberg_config,
    logged_records,
    pipeline_config,
    produced,
    run_cli,
    write_config,
)
from support.kafka_fixtures import KafkaTestBroker
from support.pg_fixtures import require_postgres_uri

from lab.generator import GeneratorSpec, produce
from lab.objectstore import S3Server
from pipeline.app import Pipeline


@pytest.mark.core
def test_exactly_once_with_dead_letters_restart_and_replay(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # the in-process drill quiets "pipeline.formats.iceberg" for its display: ask the module itself
    caplog.set_level(logging.INFO, logger="pipeline.formats.iceberg.catalog_table")
    topic = kafka_broker.new_topic("pipe", 4)
    r1 = produce(
        kafka_broker.bootstrap_servers,
        topic,
        GeneratorSpec(count=4000, malformed_fraction=0.05, seed=11),
    )
    cfg = iceberg_config(tmp_path, kafka_broker.bootstrap_servers, topic, maxRecordsPerTrigger=1500)
    p1 = Pipeline(cfg, spark)
    stats = p1.run()
    assert stats.batches == 3
    assert coords(p1) == produced(r1)
    assert stats.dead_letters == r1.malformed
    # each table's commit line counts that table's records, not the batch's
    assert logged_records(caplog.messages) == {
        cfg.sink.table: 4000 - r1.malformed,
        cfg.sink.dead_letter_identifier: r1.malformed,
    }
    main = p1.tables.main.table()
    assert main is not None and len(main.scan().to_arrow()) == 4000 - r1.malformed
    assert len(main.snapshots()) == 3  # one snapshot per batch

    # Crash after the table commit but before Spark's commit log: Spark replays the
    # last batch; the coordinator sees it committed and skips it.
    commits = tmp_path / "checkpoint" / "commits"
    last = max(int(f.name) for f in commits.iterdir() if f.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    r2 = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=1000, seed=12))
    p2 = Pipeline(cfg, spark)
    stats2 = p2.run()
    assert stats2.skipped == 1
    assert coords(p2) == produced(r1, r2)  # nothing twice, nothing lost

    # Checkpoint deleted: startingOffsets=table resumes from the table's offsets.
    import shutil

    shutil.rmtree(tmp_path / "checkpoint")
    r3 = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=500, seed=13))
    p3 = Pipeline(cfg, spark)
    p3.run()
    assert coords(p3) == produced(r1, r2, r3)
    snap = p3.tables.main.table().current_snapshot()  # type: ignore[union-attr]
    summary = snap.summary.additional_properties  # type: ignore[union-attr]
    assert summary["ingest.pipeline-id"] == cfg.id
    ends = {f"{t}:{p}": b + 1 for (t, p), (_, b) in r3.offsets.items()}
    import json

    committed = json.loads(summary["ingest.committed-offsets"])[topic]
    assert {f"{topic}:{p}": v for p, v in committed.items()} == ends


def test_postgresql_catalog(spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path) -> None:
    uri = require_postgres_uri()
    topic = kafka_broker.new_topic("pg", 2)
    r = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=1000, seed=14))
    cfg = iceberg_config(
        tmp_path,
        kafka_broker.bootstrap_servers,
        topic,
        catalog={
            "name": f"pg_{topic.replace('-', '_')}",
            "uri": uri,
            "warehouse": str(tmp_path / "warehouse"),
        },
        table=f"db_{topic.replace('-', '_')}.events",
    )
    p = Pipeline(cfg, spark)
    p.run()
    assert coords(p) == produced(r)


def _run_exits_2(config: Path, text: str) -> subprocess.CompletedProcess[str]:
    """``ingest run`` on a config file holding ``text``: exit code 2."""
    config.write_text(text)
    r = run_cli("run", "--config", str(config))
    assert r.returncode == 2, r.stderr
    return r


def test_bad_config_is_one_clear_line(tmp_path: Path) -> None:
    r = _run_exits_2(
        tmp_path / "bad.yaml",
        "id: x\nsource: {bootstrapServers: 'h:1', topics: [t], isolationLevel: dirty}\n"
        "decode: {schema: [{name: a, type: string}]}\nsink: {table: db.t}\n"
        "checkpointLocation: /c\n",
    )
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert (
        "source.isolationLevel" in lines[0] and "'read_committed' or 'read_uncommitted'" in lines[0]
    )
    assert "Traceback" not in r.stderr


def test_unknown_field_type_is_one_clear_line(tmp_path: Path) -> None:
    r = _run_exits_2(
        tmp_path / "bad.yaml",
        "id: x\nsource: {bootstrapServers: 'h:1', topics: [t]}\n"
        "decode: {schema: [{name: a, type: varchar}]}\n"
        f"sink: {{table: db.t, catalog: {{warehouse: '{tmp_path}/w'}}}}\ncheckpointLocation: /c\n",
    )
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "varchar" in lines[0] and "Traceback" not in r.stderr, r.stderr


@pytest.mark.extended  # CI's budget: test_cli_errors' run-unreachable-broker case covers it
def test_unreachable_broker_is_one_clear_line(tmp_path: Path) -> None:
    r = _run_exits_2(
        tmp_path / "p.yaml",
        "id: x\nsource: {bootstrapServers: '127.0.0.1:1', topics: [t]}\n"
        "decode: {schema: [{name: a, type: string}]}\n"
        f"sink: {{table: db.t, catalog: {{warehouse: '{tmp_path}/w'}}}}\n"
        f"checkpointLocation: '{tmp_path}/c'\n",
    )
    lines = r.stderr.splitlines()  # default verbosity: the error line and nothing else
    assert len(lines) == 1 and "cannot reach Kafka at 127.0.0.1:1" in lines[0], r.stderr


def test_at_least_once_mode_keeps_no_journal(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    topic = kafka_broker.new_topic("alo", 2)
    r = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=600, seed=15))
    base = iceberg_config(tmp_path, kafka_broker.bootstrap_servers, topic)
    cfg = base.model_copy(
        update={"commit": base.commit.model_copy(update={"mode": "at-least-once"})}
    )
    p = Pipeline(cfg, spark)
    assert p.timeline is None
    p.run()
    assert coords(p) == produced(r)
    assert not list((tmp_path / "warehouse").rglob("_ingest"))


@pytest.mark.slow
def test_rest_catalog_end_to_end(
    spark: Any,
    kafka_broker: KafkaTestBroker,
    s3_server: S3Server,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The pipeline through a real REST catalog (OAuth2 on, the warehouse on S3): dead
    letters, a replayed batch, a schema change on restart, a lost checkpoint resumed from
    the table, then ``status``, ``verify``, ``compact`` and the orphan scan on it."""
    from support.rest_fixtures import rest_catalog_server

    from integration.ops.test_verify import _cli
    from pipeline.config import parse_config

    rest_run = rest_catalog_server(tmp_path / "rest", s3_server)
    rest = next(rest_run)
    try:
        topic = kafka_broker.new_topic("rest", 2)
        bootstrap = kafka_broker.bootstrap_servers
        sink = {"catalog": rest.sink_catalog(), "table": "db.events", "partitionBy": ["day(ts)"]}
        raw = pipeline_config(
            tmp_path, bootstrap, topic, sink, source={"maxRecordsPerTrigger": 700}
        )
        r1 = produce(bootstrap, topic, GeneratorSpec(count=1500, malformed_fraction=0.05, seed=31))
        p1 = Pipeline(parse_config(raw), spark)
        assert p1.run().dead_letters == r1.malformed
        assert coords(p1) == produced(r1)

        # the commit log lost after the table commit: the replay is found in the table
        commits = tmp_path / "checkpoint" / "commits"
        last = max(int(f.name) for f in commits.iterdir() if f.name.isdigit())
        (commits / str(last)).unlink()
        (commits / f".{last}.crc").unlink(missing_ok=True)
        # a column added on restart: the table's schema evolves through the catalog
        raw["decode"]["schema"] = [*raw["decode"]["schema"], {"name": "note", "type": "string"}]
        r2 = produce(bootstrap, topic, GeneratorSpec(count=500, seed=32))
        p2 = Pipeline(parse_config(raw), spark)
        assert p2.run().skipped == 1
        assert coords(p2) == produced(r1, r2)
        table = p2.tables.main.table()
        assert table is not None and table.schema().find_field("note") is not None

        shutil.rmtree(tmp_path / "checkpoint")  # startingOffsets: table
        r3 = produce(bootstrap, topic, GeneratorSpec(count=300, seed=33))
        p3 = Pipeline(parse_config(raw), spark)
        p3.run()
        assert coords(p3) == produced(r1, r2, r3)

        config = write_config(tmp_path, raw)
        capsys.readouterr()
        assert _cli("status", "--config", str(config)) == 0
        assert "table db.events:" in capsys.readouterr().out
        assert _cli("verify", "--config", str(config)) == 0
        assert "NOT EXACTLY ONCE" not in capsys.readouterr().out
        assert _cli("compact", "--config", str(config), "--min-input-files", "2") == 0
        assert "table db.events: compacted" in capsys.readouterr().out
        assert _cli("compact", "--config", str(config), "--orphans", "--dry-run") == 0
        assert "table db.events: would remove 0 orphan files" in capsys.readouterr().out
        assert coords(Pipeline(parse_config(raw), spark)) == produced(r1, r2, r3)
    finally:
        rest_run.close()


def test_the_rest_catalog_example_runs_as_documented(
    spark: Any, kafka_broker: KafkaTestBroker, s3_server: S3Server, tmp_path: Path
) -> None:
    """``conf/pipeline.rest-catalog.yaml`` as it stands, its variables set as a Secret would
    set them, against the lab's REST catalog: every record once."""
    from support.rest_fixtures import rest_catalog_server

    from pipeline.config import load_config

    rest_run = rest_catalog_server(tmp_path / "rest", s3_server)
    rest = next(rest_run)
    try:
        topic = kafka_broker.new_topic("rest-example", 2)
        r = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=400, seed=34))
        env = {
            "KAFKA_BOOTSTRAP_SERVERS": kafka_broker.bootstrap_servers,
            "KAFKA_TOPIC": topic,
            "ICEBERG_REST_URI": rest.uri,
            "ICEBERG_WAREHOUSE": rest.warehouse,
            "ICEBERG_CREDENTIAL": rest.client.credential,
            "ICEBERG_TOKEN_URI": rest.token_uri,
            "ICEBERG_SCOPE": rest.client.scope,
            "S3_ENDPOINT": s3_server.endpoint,
            "AWS_REGION": s3_server.region,
            "AWS_ACCESS_KEY_ID": s3_server.access_key,
            "AWS_SECRET_ACCESS_KEY": s3_server.secret_key,
            "S3_PATH_STYLE": "true",
            "CHECKPOINT_LOCATION": str(tmp_path / "checkpoint"),
        }
        example = Path(__file__).parents[4] / "conf" / "pipeline.rest-catalog.yaml"
        cfg = load_config(example, ["trigger.mode=available-now", "metrics.enabled=false"], env)
        p = Pipeline(cfg, spark)
        p.run()
        assert coords(p) == produced(r)
    finally:
        rest_run.close()
