"""``sink.hudi.writer: spark``: the pipeline writing Hudi tables through Hudi's own Spark
writer (``hudi-spark3.5-bundle_2.12``), on PySpark 3.5.7 in its own environment
(``scripts/spark-line-env.sh 3.5.7``), reading real Apache Kafka with Spark's Kafka source.

Driver processes are started and SIGKILLed at the protocol's fault points; the tables
(main, partitioned by country, and dead letters) are then read by hudi-rs, a reader
independent of the writer, and every (topic, partition, offset) produced is in exactly
one of them, once. The tables are Hudi's own: table version 9, with a metadata table.

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
from support.drivers import hudi_coords, pipeline_config, produced, write_config
from support.kafka_fixtures import KafkaTestBroker

from pipeline.config import parse_config
from pipeline.errors import ConfigError
from pipeline.formats.registry import open_tables
from pipeline.source.spark_line import spark_version
from pipeline.tools.generator import GeneratorSpec, produce

ROOT = Path(__file__).resolve().parent.parent


def _config(tmp: Path, bootstrap: str, topic: str) -> dict[str, Any]:
    sink = {
        "format": "hudi",
        "table": "db.events",
        "hudi": {
            "basePath": str(tmp / "hudi" / "events"),
            "partitionFields": ["country"],
            "writer": "spark",
        },
    }
    return pipeline_config(tmp, bootstrap, topic, sink, source={"reader": "spark"})


def _python35() -> str:
    r = subprocess.run(
        ["bash", str(ROOT / "scripts" / "spark-line-env.sh"), "3.5.7"],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or ["spark-line-env.sh failed"])[-1]
        pytest.fail(f"PySpark 3.5.7 environment: {why}")
    return r.stdout.strip().splitlines()[-1]


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
def test_pipeline_through_hudis_spark_writer_is_exactly_once_across_kills(
    kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    python = _python35()
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

    main, dead = hudi_coords(base), hudi_coords(Path(f"{base}_dead_letter"))
    assert sum(dead.values()) == 3 * 20  # the malformed records, in the dead-letter table
    assert main + dead == produced(*results)  # every offset once, nothing else
    assert not (set(main) & set(dead))
    properties = (base / ".hoodie" / "hoodie.properties").read_text()
    assert "hoodie.table.version=9" in properties  # Hudi's own writer made it
    assert (base / ".hoodie" / "metadata" / ".hoodie").is_dir()  # with its metadata table
    assert {p.name.split("=")[0] for p in base.iterdir() if not p.name.startswith(".")} == {
        "country"
    }


def test_writer_spark_is_refused_on_other_spark_lines(tmp_path: Path) -> None:
    if spark_version() == (3, 5):
        pytest.skip("this is PySpark 3.5, where writer: spark runs (the test above)")
    cfg = parse_config(_config(tmp_path, "127.0.0.1:9", "t"))
    with pytest.raises(ConfigError) as info:
        open_tables(cfg)
    line = str(info.value)
    assert "\n" not in line and "Spark 3.5" in line and "writer: native" in line, line
    assert Counter(line.split()).get("[ingest:config]", 0) == 1, line
