"""``sink.hudi.writer: spark``: the pipeline writing Hudi tables through Hudi's own Spark
writer (``hudi-spark3.5-bundle_2.12``), on PySpark 3.5.7 in its own environment
(``scripts/spark-line-env.sh 3.5.7``), reading real Apache Kafka with Spark's Kafka source.

Driver processes are started and SIGKILLed at the protocol's fault points (after the
write: the next run rolls the instant back through Hudi; after the precommit: it recommits
it from the journal's statistics). Both decode engines: Arrow for the partitioned table,
Spark SQL for the unpartitioned one. The tables -- main (partitioned by country, or not) and
dead letters -- are then read by hudi-rs, by Hudi's own Spark datasource (snapshot; each
commit incrementally, which must return exactly the ranges its checkpoint records; time
travel as of each commit) and by ``ingest verify``: every (topic, partition, offset)
produced is in exactly one of them, once. The tables are Hudi's own: table version 9.

On any other Spark line the option is refused in one line naming the supported one.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.drivers import (
    arrow_coords,
    hudi_coords,
    hudi_read,
    pipeline_config,
    produced,
    run_cli,
    write_config,
)
from support.jvm_readers import check_commits, coord_counts, hudi_spark_read
from support.kafka_fixtures import KafkaTestBroker
from support.s3_fixtures import S3Server
from support.spark_lines import python_of

from lab.generator import GeneratorSpec, produce
from pipeline.config import parse_config
from pipeline.errors import ConfigError
from pipeline.formats.hudi.storage import open_location
from pipeline.formats.registry import open_tables
from pipeline.source.spark_line import spark_version

ROOT = Path(__file__).resolve().parents[4]


def _config(tmp: Path, bootstrap: str, topic: str, partitioned: bool = True) -> dict[str, Any]:
    hudi: dict[str, Any] = {"basePath": str(tmp / "hudi" / "events"), "writer": "spark"}
    if partitioned:
        hudi["partitionFields"] = ["country"]
    sink = {"format": "hudi", "table": "db.events", "hudi": hudi}
    source = {"reader": "spark", "maxRecordsPerTrigger": 300}
    cfg = pipeline_config(tmp, bootstrap, topic, sink, source=source)
    # the partitioned table decodes with the Arrow decoder (the default), the other with Spark
    cfg["decode"]["engine"] = "arrow" if partitioned else "spark"
    return cfg


def _readers_agree(
    jvm_reader: dict[str, str],
    config: Path,
    base: Path | str,
    want: Any,
    s3: Any = None,
    commits: int = 3,
) -> None:
    """hudi-rs, Hudi's Spark datasource and ``ingest verify`` on the two tables (``s3``:
    the ``S3Server`` they are on), which hold at least ``commits`` commits."""
    dead = f"{base}_dead_letter"
    main_rs, dead_rs = (arrow_coords(hudi_read(b, s3)) for b in (base, dead))
    assert main_rs + dead_rs == want  # every offset once, nothing else
    assert sum(dead_rs.values()) > 0 and not (set(main_rs) & set(dead_rs))
    docs = hudi_spark_read(jvm_reader, base, dead, s3=s3)
    assert coord_counts(docs[str(base)]["coords"]) == main_rs
    assert coord_counts(docs[dead]["coords"]) == dead_rs
    assert check_commits(docs[str(base)], docs[dead]) >= commits
    verified = run_cli("verify", "--config", str(config), timeout=300)
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]


def _run(python: str, config: Path, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "INGEST_SPARK_LOG_LEVEL": "ERROR"}
    env.pop("INGEST_FAULT", None)
    if fault:
        env["INGEST_FAULT"] = fault
    return subprocess.run(
        [python, "-m", "pipeline", "run", "--config", str(config)],
        capture_output=True, text=True, timeout=600, env=env, cwd=ROOT,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.hudi_spark
def test_pipeline_through_hudis_spark_writer_is_exactly_once_across_kills(
    jvm_reader: dict[str, str], kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    python = python_of("3.5.7")
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_broker.new_topic("hudi-spark", 2)
    config = write_config(tmp_path, _config(tmp_path, bootstrap, topic))
    base = tmp_path / "hudi" / "events"
    results = []
    for i, fault in enumerate((None, "after-precommit:kill", "after-write:kill")):
        spec = GeneratorSpec(count=400, malformed_fraction=0.05, seed=70 + i)
        results.append(produce(bootstrap, topic, spec))
        r = _run(python, config, fault)
        if fault is None:
            assert r.returncode == 0, r.stderr[-3000:]
        else:  # the next run recovers: recommits the precommitted instant, rolls back the other
            assert r.returncode == -signal.SIGKILL, (fault, r.returncode, r.stderr[-3000:])
            r = _run(python, config)
            assert r.returncode == 0, r.stderr[-3000:]
            if fault.startswith("after-precommit"):
                assert "recommitted" in r.stdout, r.stdout[-3000:]

    assert sum(hudi_coords(Path(f"{base}_dead_letter")).values()) == 3 * 20  # the malformed
    _readers_agree(jvm_reader, config, base, produced(*results))
    properties = (base / ".hoodie" / "hoodie.properties").read_text()
    assert "hoodie.table.version=9" in properties  # Hudi's own writer made it
    assert {p.name.split("=")[0] for p in base.iterdir() if not p.name.startswith(".")} == {
        "country"
    }


@pytest.mark.slow
@pytest.mark.hudi_spark
@pytest.mark.extended  # CI's budget: in the rotation
def test_an_unpartitioned_table_reads_the_same_in_every_reader(
    jvm_reader: dict[str, str], kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    python = python_of("3.5.7")
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_broker.new_topic("hudi-spark-flat", 3)
    config = write_config(tmp_path, _config(tmp_path, bootstrap, topic, partitioned=False))
    result = produce(bootstrap, topic, GeneratorSpec(count=900, malformed_fraction=0.03, seed=7))
    r = _run(python, config)
    assert r.returncode == 0, r.stderr[-3000:]
    base = tmp_path / "hudi" / "events"
    assert not [p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")]
    _readers_agree(jvm_reader, config, base, produced(result))


@pytest.mark.slow
@pytest.mark.hudi_spark
@pytest.mark.extended  # CI's budget: in the rotation
def test_tables_on_s3_are_exactly_once_across_kills(
    jvm_reader: dict[str, str], kafka_broker: KafkaTestBroker, s3_server: S3Server, tmp_path: Path
) -> None:
    """Hudi's writer on SeaweedFS through Hadoop's S3A client: a recommit and a rollback
    there, the journal and fence records beside the table, every reader agreeing."""
    python = python_of("3.5.7")
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_broker.new_topic("hudi-spark-s3", 2)
    cfg = _config(tmp_path, bootstrap, topic)
    base = f"s3://{s3_server.new_bucket('hudi-spark')}/lake/events"
    cfg["sink"]["hudi"].update(basePath=base, properties=s3_server.properties())
    config = write_config(tmp_path, cfg)
    results = []
    for i, fault in enumerate(("after-precommit:kill", "after-write:kill")):
        spec = GeneratorSpec(count=300, malformed_fraction=0.05, seed=90 + i)
        results.append(produce(bootstrap, topic, spec))
        r = _run(python, config, fault)
        assert r.returncode == -signal.SIGKILL, (fault, r.returncode, r.stderr[-3000:])
        r = _run(python, config)
        assert r.returncode == 0, r.stderr[-3000:]
        if fault.startswith("after-precommit"):
            assert "recommitted" in r.stdout, r.stdout[-3000:]
    _readers_agree(jvm_reader, config, base, produced(*results), s3=s3_server, commits=2)
    files = open_location(base, s3_server.properties())
    assert b"hoodie.table.version=9" in (files.read(".hoodie/hoodie.properties") or b"")
    assert files.listdir(".hoodie/.ingest/journal")  # our journal sits beside Hudi's timeline


def test_writer_spark_is_refused_on_other_spark_lines(tmp_path: Path) -> None:
    if spark_version() == (3, 5):
        pytest.skip("this is PySpark 3.5, where writer: spark runs (the test above)")
    cfg = parse_config(_config(tmp_path, "127.0.0.1:9", "t"))
    with pytest.raises(ConfigError) as info:
        open_tables(cfg)
    line = str(info.value)
    assert "\n" not in line and "Spark 3.5" in line and "writer: native" in line, line
    assert Counter(line.split()).get("[ingest:config]", 0) == 1, line


@pytest.mark.slow
@pytest.mark.hudi_spark
@pytest.mark.extended  # CI's budget: in the rotation
def test_routed_topics_through_hudis_spark_writer_are_exactly_once_across_a_kill(
    kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    """``sink.routes`` on Hudi's writer: each topic in its own table (read by hudi-rs), the
    default table idle but committed, a kill between two tables' commits rolled forward."""
    python = python_of("3.5.7")
    bootstrap = kafka_broker.bootstrap_servers
    a, b = (kafka_broker.new_topic(n, 2) for n in ("hsa", "hsb"))
    cfg = _config(tmp_path, bootstrap, a, partitioned=False)
    cfg["source"]["topics"] = [a, b]
    cfg["sink"]["routes"] = {"by": "topic", "tables": {a: "db.a", b: "db.b"}}
    config = write_config(tmp_path, cfg)
    results = [
        produce(bootstrap, t, GeneratorSpec(count=300, malformed_fraction=0.05, seed=s))
        for t, s in ((a, 81), (b, 82))
    ]
    r = _run(python, config, "between-table-commits:kill")
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr[-3000:])
    r = _run(python, config)
    assert r.returncode == 0, r.stderr[-3000:]
    hudi = tmp_path / "hudi"
    got = {name: hudi_coords(hudi / name) for name in ("a", "b", "events")}
    dead = hudi_coords(hudi / "events_dead_letter")
    every = produced(*results)
    assert got["a"] + got["b"] + dead == every and not got["events"]
    assert {c[0] for c in got["a"]} == {a} and {c[0] for c in got["b"]} == {b}
    timelines = [hudi / n / ".hoodie" / "timeline" for n in ("a", "b", "events")]
    assert all(list(t.glob("*.commit")) for t in timelines)  # the idle table committed too
