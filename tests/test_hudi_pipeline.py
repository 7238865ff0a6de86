"""End to end into Hudi: live broker → ingest_kafka → decode → coordinator → native Hudi
copy-on-write tables (real Spark), checked through hudi-rs (the ``hudi`` package).

Exactly-once is shown by counting (topic, partition, offset) over the main table and the
dead-letter table together, as read by hudi-rs -- an independent Hudi reader.

* In-process (shared SparkSession): dead letters, a replayed batch skipped, a deleted
  checkpoint resumed from the table's commit metadata.
* Crash points: ``ingest run`` subprocesses SIGKILLed at a named fault point
  (``INGEST_FAULT=<point>:kill``), restarted. One kill + recommit case runs by default;
  the whole chain is ``slow``.
* Optional: Spark's own Hudi reader, when the Hudi Spark bundle is on the classpath.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from drivers import logged_records
from drivers import run_driver as _run
from kafka_fixtures import KafkaTestBroker, unique_topic

from pipeline.app import Pipeline
from pipeline.config import load_config, parse_config
from pipeline.formats.hudi.sinks import HudiSinks
from pipeline.tools.generator import GeneratorSpec, event_schema_fields, produce

hudi = pytest.importorskip("hudi")

ROOT = Path(__file__).resolve().parent.parent


def hudi_config(tmp: Path, bootstrap: str, topic: str, **source: Any) -> dict[str, Any]:
    return {
        "id": f"p-{topic}",
        "source": {"bootstrapServers": bootstrap, "topics": [topic], **source},
        "decode": {"schema": event_schema_fields()},
        "sink": {
            "format": "hudi",
            "table": "db.events",
            "hudi": {"basePath": str(tmp / "lake" / "events"), "partitionFields": ["country"]},
        },
        "checkpointLocation": str(tmp / "checkpoint"),
        "trigger": {"mode": "available-now"},
        "metrics": {"enabled": False},
    }


def read(base: Path) -> pa.Table | None:
    if not (base / ".hoodie").is_dir():
        return None
    batches = hudi.HudiTableBuilder.from_base_uri(str(base)).build().read()
    return pa.Table.from_batches(batches) if batches else None


def coords(tmp: Path) -> Counter[tuple[str, int, int]]:
    """(topic, partition, offset) of every row of the main and dead-letter tables."""
    out: Counter[tuple[str, int, int]] = Counter()
    for base in (tmp / "lake" / "events", tmp / "lake" / "events_dead_letter"):
        t = read(base)
        if t is not None:
            out.update(
                zip(
                    t["_kafka_topic"].to_pylist(),
                    t["_kafka_partition"].to_pylist(),
                    t["_kafka_offset"].to_pylist(),
                    strict=True,
                )
            )
    return out


def produced(*results: Any) -> Counter[tuple[str, int, int]]:
    return Counter(
        (t, p, o) for r in results for (t, p), (a, b) in r.offsets.items() for o in range(a, b + 1)
    )


def completed_commits(base: Path) -> list[str]:
    table = hudi.HudiTableBuilder.from_base_uri(str(base)).build()
    return [i.timestamp for i in table.get_timeline().get_completed_commits()]


def base_files(base: Path) -> set[str]:
    return {
        str(p.relative_to(base))
        for p in base.rglob("*.parquet")
        if not any(x.startswith(".") for x in p.relative_to(base).parts)
    }


def referenced(base: Path) -> set[str]:
    """Base files named by the write stats of the completed commits (hudi-rs's timeline)."""
    table = hudi.HudiTableBuilder.from_base_uri(str(base)).build()
    timeline = table.get_timeline()
    out = set()
    for instant in timeline.get_completed_commits():
        doc = json.loads(timeline.get_instant_metadata_in_json(instant))
        for stats in doc["partitionToWriteStats"].values():
            out |= {s["path"] for s in stats}
    return out


def test_exactly_once_with_dead_letters_replay_and_lost_checkpoint(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(
        logging.INFO, logger="pipeline.formats.hudi.table"
    )  # a drill may quiet parents
    topic = unique_topic("hudi")
    kafka_broker.create_topic(topic, 4)
    r1 = produce(
        kafka_broker.bootstrap_servers,
        topic,
        GeneratorSpec(count=4000, malformed_fraction=0.05, seed=61),
    )
    cfg = parse_config(
        hudi_config(tmp_path, kafka_broker.bootstrap_servers, topic, maxRecordsPerTrigger=1500)
    )
    p1 = Pipeline(cfg, spark)
    stats = p1.run()
    assert stats.batches == 3 and stats.dead_letters == r1.malformed
    assert coords(tmp_path) == produced(r1)
    main = tmp_path / "lake" / "events"
    # each table's commit line counts that table's records, not the batch's
    assert logged_records(caplog.messages) == {
        str(main): 4000 - r1.malformed,
        f"{main}_dead_letter": r1.malformed,
    }
    assert len(completed_commits(main)) == 3  # one Hudi commit per batch
    table = read(main)
    assert table is not None and table.num_rows == 4000 - r1.malformed
    assert set(table["_hoodie_partition_path"].to_pylist()) == {
        f"country={c}" for c in table["country"].to_pylist()
    }
    # the journal is inside .hoodie; the base path holds only .hoodie and partitions
    assert (main / ".hoodie" / ".ingest" / "journal" / cfg.id / "instants").is_dir()
    assert {p.name for p in main.iterdir() if p.name.startswith(".")} == {".hoodie"}

    # Crash after the table commit, before Spark's commit log: the replay is skipped.
    commits = tmp_path / "checkpoint" / "commits"
    last = max(int(f.name) for f in commits.iterdir() if f.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    r2 = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=1000, seed=62))
    stats2 = Pipeline(cfg, spark).run()
    assert stats2.skipped == 1
    assert coords(tmp_path) == produced(r1, r2)

    # Checkpoint deleted: startingOffsets=table resumes from the Hudi commit metadata.
    shutil.rmtree(tmp_path / "checkpoint")
    r3 = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=500, seed=63))
    p3 = Pipeline(cfg, spark)
    p3.run()
    assert coords(tmp_path) == produced(r1, r2, r3)
    latest = completed_commits(main)[-1]
    extra = json.loads((main / ".hoodie" / f"{latest}.commit").read_text())["extraMetadata"]
    assert extra["ingest.pipeline-id"] == cfg.id
    committed = json.loads(extra["ingest.committed-offsets"])[topic]
    assert {int(k): v for k, v in committed.items()} == {
        p: b + 1 for (_, p), (_, b) in r3.offsets.items()
    }
    assert base_files(main) == referenced(main)


# -- crash points (driver processes) -----------------------------------------------------------


def _config_file(tmp: Path, bootstrap: str, topic: str, master: str = "local[2]") -> Path:
    cfg = hudi_config(tmp, bootstrap, topic)
    cfg["spark"] = {"master": master}
    path = tmp / "pipeline.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _check_clean(tmp: Path, config: Path) -> None:
    """No pending instant in the journal nor in either Hudi timeline, and no base file
    on disk that no completed commit references."""
    sinks = HudiSinks.from_config(load_config(config))
    assert not sinks.timeline(load_config(config).id).pending()
    for base in (tmp / "lake" / "events", tmp / "lake" / "events_dead_letter"):
        if (base / ".hoodie").is_dir():
            assert base_files(base) == referenced(base)
    for committer in (sinks.main, sinks.dead_letter):
        assert committer is not None and not committer.hudi.pending_times()


@pytest.mark.slow  # the Iceberg twin runs by default; the Hudi drill recommits too
def test_killed_after_precommit_is_recommitted_without_recomputing(
    kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    topic = unique_topic("hudi-recommit")
    kafka_broker.create_topic(topic, 2)
    config = _config_file(tmp_path, kafka_broker.bootstrap_servers, topic)
    r1 = produce(
        kafka_broker.bootstrap_servers,
        topic,
        GeneratorSpec(count=800, malformed_fraction=0.05, seed=71),
    )
    r = _run(config, "after-precommit:kill")
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
    main = tmp_path / "lake" / "events"
    staged = base_files(main)
    assert staged and not (main / ".hoodie").exists()  # first commit never happened
    assert read(main) is None
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "300"}
    st = subprocess.run(
        [sys.executable, "-m", "pipeline", "status", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert st.returncode == 0, st.stderr
    assert "inflight" in st.stdout and "does not exist yet" in st.stdout, st.stdout
    r = _run(config, None)
    assert r.returncode == 0, r.stderr[-3000:]
    assert base_files(main) == staged  # the same files were committed, nothing recomputed
    assert coords(tmp_path) == produced(r1)
    _check_clean(tmp_path, config)


# (fault armed in a run, what the next run's recovery does with its instant)
CHAIN = [
    ("after-requested:kill", "rolled_back"),
    ("after-write:kill", "rolled_back"),
    ("during-rollback:kill", None),  # dies while rolling back the previous run's instant
    ("after-precommit:kill", "recommitted"),
    ("after-dead-letter-commit:kill", "recommitted"),
    ("after-commit:kill", "completed"),
    ("after-commit-before-checkpoint:kill", "replay_skipped"),
]


@pytest.mark.slow
def test_driver_killed_at_every_fault_point(kafka_broker: KafkaTestBroker, tmp_path: Path) -> None:
    topic = unique_topic("hudi-crash")
    kafka_broker.create_topic(topic, 3)
    config = _config_file(tmp_path, kafka_broker.bootstrap_servers, topic)
    results = []
    for i, (fault, _) in enumerate(CHAIN):
        results.append(
            produce(
                kafka_broker.bootstrap_servers,
                topic,
                GeneratorSpec(count=600, malformed_fraction=0.05, seed=200 + i),
            )
        )
        r = _run(config, fault)
        assert r.returncode == -signal.SIGKILL, (fault, r.returncode, r.stderr[-2000:])
    r = _run(config, None)  # recovers the last instant, then drains
    assert r.returncode == 0, r.stderr[-3000:]
    results.append(
        produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=300, seed=299))
    )
    r = _run(config, None)
    assert r.returncode == 0, r.stderr[-3000:]
    assert coords(tmp_path) == produced(*results)  # every record exactly once, 9 runs
    _check_clean(tmp_path, config)
    sinks = HudiSinks.from_config(load_config(config))
    states = Counter(i.state.value for i in sinks.timeline(load_config(config).id).instants())
    assert states["rolled_back"] >= 2


def test_worker_killed_mid_write_leaves_no_duplicate(
    kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    """A task attempt dies after staging its files; Spark retries it (local[2,3]). The
    dead attempt's files carry the committed instant time, so the commit must remove
    them: hudi-rs lists files and would read them."""
    topic = unique_topic("hudi-midwrite")
    kafka_broker.create_topic(topic, 2)
    config = _config_file(tmp_path, kafka_broker.bootstrap_servers, topic, master="local[2,3]")
    r1 = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=1000, seed=81))
    r = _run(config, "mid-write:kill")
    assert r.returncode == 0, r.stderr[-3000:]
    assert coords(tmp_path) == produced(r1)
    _check_clean(tmp_path, config)
    assert "stray file(s) of failed task attempts deleted" in r.stdout  # the log stream


# -- Spark's own Hudi reader (optional) --------------------------------------------------------

_JVM_READ = """
import json, sys
from pyspark.sql import SparkSession
jar, base = sys.argv[1], sys.argv[2]
spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.jars", jar)
    .config("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
    .config("spark.sql.extensions", "org.apache.spark.sql.hudi.HoodieSparkSessionExtension")
    .getOrCreate()
)
df = spark.read.format("hudi").load(base)
rows = df.select("_kafka_topic", "_kafka_partition", "_kafka_offset").collect()
print(json.dumps([[r[0], r[1], r[2]] for r in rows]))
"""


def _hudi_bundle(spark: Any) -> str | None:
    """A Hudi Spark bundle jar: on the shared session's classpath, or HUDI_SPARK_BUNDLE."""
    try:
        spark._jvm.java.lang.Class.forName("org.apache.hudi.DefaultSource")
        return "classpath"
    except Exception:
        pass
    jar = os.environ.get("HUDI_SPARK_BUNDLE", "")
    return jar if jar and Path(jar).is_file() else None


def test_spark_hudi_reader_reads_the_native_table(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    bundle = _hudi_bundle(spark)
    if bundle is None:
        pytest.skip("Hudi Spark bundle not on the classpath")
    topic = unique_topic("hudi-jvm")
    kafka_broker.create_topic(topic, 2)
    r1 = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=600, seed=91))
    cfg = parse_config(hudi_config(tmp_path, kafka_broker.bootstrap_servers, topic))
    Pipeline(cfg, spark).run()
    main = tmp_path / "lake" / "events"
    if bundle == "classpath":
        df = spark.read.format("hudi").load(str(main))
        got = [
            (r[0], r[1], r[2])
            for r in df.select("_kafka_topic", "_kafka_partition", "_kafka_offset").collect()
        ]
    else:
        out = subprocess.run(
            [sys.executable, "-c", _JVM_READ, bundle, str(main)],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=ROOT,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        got = [tuple(x) for x in json.loads(out.stdout.strip().splitlines()[-1])]
    dead = _dead_coords(tmp_path)
    assert Counter(got) + dead == produced(r1)  # Spark's Hudi reader: exactly once too
    assert Counter(got) == coords(tmp_path) - dead  # the same rows hudi-rs reads


def _dead_coords(tmp: Path) -> Counter[tuple[str, int, int]]:
    t = read(tmp / "lake" / "events_dead_letter")
    if t is None:
        return Counter()
    return Counter(
        zip(
            t["_kafka_topic"].to_pylist(),
            t["_kafka_partition"].to_pylist(),
            t["_kafka_offset"].to_pylist(),
            strict=True,
        )
    )
