"""Hudi's own Spark datasource (a JVM engine we never write with) reads our Hudi tables.

The native copy-on-write writer's tables must read in Hudi's engine as in hudi-rs. Hudi's
Spark bundle is built for Spark 3.5 only on Maven Central (none for the project's Spark), so
``tests/jvm_reader/read_hudi.py`` runs in the readers' own environment
(``scripts/jvm-reader-env.sh``: PySpark 3.5.7 + ``hudi-spark3.5-bundle_2.12`` 1.2.0).

1. A partitioned table with dead letters, a driver SIGKILLed after pre-committing a batch
   (the restart recommits it), and ``ingest compact`` beside the pending instant and again at
   the end (``replacecommit``s): a snapshot query returns the (topic, partition, offset) set
   hudi-rs and Kafka have; Hudi's timeline API lists every commit with our checkpoint in its
   extra metadata; an incremental query of each batch commit returns exactly the offset
   ranges that commit records, and of a compaction nothing; time travel as of each commit
   counts the rows committed up to it. Run on local files and on S3 (SeaweedFS; Hudi's reader
   through Hadoop's S3A).
2. An unpartitioned table written as the Hudi half of ``sink.format: both`` (dead letters in
   Iceberg), long enough that the writer trims its timeline twice -- the second time past a
   compaction's ``replacecommit`` -- with a driver SIGKILLed after pre-committing a batch
   once the timeline is trimmed: Hudi's snapshot query still returns every row (files of
   trimmed commits are older than the timeline's start), equal to hudi-rs's and, with the
   Iceberg dead letters, to Kafka's; incremental reads of the retained batch commits return
   exactly their ranges; time travel as of the oldest retained commit counts the rows its
   ``ingest.ranges-before`` covers.
3. A table evolved over three restarts (a struct field and a map added, int → long and float
   → double, a column made optional, a column added): every row reads as hudi-rs reads it,
   with nulls where a column did not exist yet.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.drivers import (
    arrow_coords,
    hudi_coords,
    hudi_read,
    iceberg_table_coords,
    pipeline_config,
    produced,
    run_cli,
    run_driver_killed,
    run_driver_ok,
    write_config,
)
from support.jvm_readers import (
    batch_ranges,
    check_commits,
    coord_counts,
    covered,
    hudi_spark_read,
)
from support.kafka_fixtures import KafkaTestBroker
from support.s3_fixtures import S3Server

from lab.generator import GeneratorSpec, produce
from pipeline.commit.checkpoint import (
    RANGES_BEFORE_KEY,
    RANGES_KEY,
)
from pipeline.commit.history import parse_intervals


@pytest.mark.slow
@pytest.mark.timeout(900)
# CI's budget: the S3 variant (56 s) in the rotation, the local one every run
@pytest.mark.parametrize("storage", ["local", pytest.param("s3", marks=pytest.mark.extended)])
def test_hudi_spark_reads_snapshots_commits_increments_and_time_travel(
    jvm_reader: dict[str, str],
    kafka_broker: KafkaTestBroker,
    tmp_path: Path,
    storage: str,
    request: pytest.FixtureRequest,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_broker.new_topic(f"jvm-hudi-{storage}", 3)
    hudi: dict[str, Any] = {"partitionFields": ["country"]}
    s3: S3Server | None = None
    if storage == "s3":  # SeaweedFS; Hudi's reader goes through Hadoop's S3A
        s3 = request.getfixturevalue("s3_server")
        main: Path | str = f"s3://{s3.new_bucket('jvm-hudi')}/lake/events"
        hudi["properties"] = s3.properties()
    else:
        main = tmp_path / "lake" / "events"
    hudi["basePath"] = str(main)
    dead = f"{main}_dead_letter"
    sink = {"format": "hudi", "table": "db.events", "hudi": hudi}
    cfg = pipeline_config(tmp_path, bootstrap, topic, sink, source={"maxRecordsPerTrigger": 400})
    config = write_config(tmp_path, cfg)
    bad = 0.05  # malformed: dead-letter rows
    results = [
        produce(bootstrap, topic, GeneratorSpec(count=900, malformed_fraction=bad, seed=171))
    ]
    run_driver_killed(config, "after-precommit:kill@1")  # batch 1 pending, files staged
    compacted = run_cli("compact", "--config", str(config), "--min-input-files", "2")
    assert compacted.returncode == 0 and "compacted" in compacted.stdout, compacted.stdout
    results.append(
        produce(bootstrap, topic, GeneratorSpec(count=500, malformed_fraction=bad, seed=172))
    )
    recovered = run_driver_ok(config)  # recommits batch 1 without recomputing it, drains
    assert "batch 1 recommitted" in recovered.stdout, recovered.stdout[-3000:]
    compacted = run_cli("compact", "--config", str(config), "--min-input-files", "2")
    assert compacted.returncode == 0 and "compacted" in compacted.stdout, compacted.stdout
    rs = {b: arrow_coords(hudi_read(b, s3)) for b in (str(main), dead)}  # hudi-rs
    assert rs[str(main)] + rs[dead] == produced(*results)  # exactly once

    docs = hudi_spark_read(jvm_reader, main, dead, s3=s3)
    ours, theirs = docs[str(main)], docs[dead]
    assert coord_counts(ours["coords"]) == rs[str(main)]
    assert coord_counts(theirs["coords"]) == rs[dead]
    assert coord_counts(ours["coords"]) + coord_counts(theirs["coords"]) == produced(*results)
    assert "replacecommit" in {c["action"] for c in ours["commits"]}
    assert check_commits(ours, theirs) >= 4


@pytest.mark.slow
@pytest.mark.extended  # CI's budget (66 s): in the rotation
@pytest.mark.timeout(900)
def test_hudi_spark_reads_a_trimmed_unpartitioned_table_written_beside_iceberg(
    jvm_reader: dict[str, str], kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    from pipeline.formats.hudi.cow_table import TRIMMED_RECORD

    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_broker.new_topic("jvm-hudi-trimmed", 2)
    base = tmp_path / "hudi" / "events"
    sink = {
        "format": "both",
        "table": "db.events",
        "catalog": {"warehouse": str(tmp_path / "warehouse")},
        "maxSnapshots": 10,  # trims every 10 commits beyond the newest 10
        "hudi": {"basePath": str(base)},
    }
    cfg = pipeline_config(tmp_path, bootstrap, topic, sink, source={"maxRecordsPerTrigger": 40})
    config = write_config(tmp_path, cfg)
    bad = 0.03
    results = [
        produce(bootstrap, topic, GeneratorSpec(count=880, malformed_fraction=bad, seed=181))
    ]
    run_driver_ok(config)  # 22 batches: the first trim
    compacted = run_cli("compact", "--config", str(config), "--min-input-files", "2")
    assert compacted.returncode == 0 and "compacted" in compacted.stdout, compacted.stdout
    results.append(
        produce(bootstrap, topic, GeneratorSpec(count=880, malformed_fraction=bad, seed=182))
    )
    run_driver_killed(config, "after-precommit:kill@34")  # trimmed past the compaction
    recovered = run_driver_ok(config)
    assert "batch 34 recommitted" in recovered.stdout, recovered.stdout[-3000:]

    kafka = produced(*results)
    dead = iceberg_table_coords(tmp_path / "warehouse", "db.events_dead_letter")
    ours = hudi_coords(base)
    assert ours + dead == kafka
    assert iceberg_table_coords(tmp_path / "warehouse", "db.events") == ours
    assert (base / ".hoodie" / ".ingest" / TRIMMED_RECORD).is_file()

    doc = hudi_spark_read(jvm_reader, base)[str(base)]
    assert coord_counts(doc["coords"]) == ours  # trimmed commits' files are read
    commits = doc["commits"]
    assert len(commits) < 20 and {c["action"] for c in commits} == {"commit"}  # replacecommit gone
    oldest, *retained = commits
    before = covered(parse_intervals(oldest["extra"][RANGES_BEFORE_KEY], RANGES_BEFORE_KEY))
    assert oldest["as_of_rows"] == sum(n for c, n in ours.items() if c in before) + len(
        oldest["incremental"]
    )
    total = oldest["as_of_rows"]
    for commit in retained:  # each read from the previous retained commit
        want = covered(batch_ranges(commit["extra"][RANGES_KEY])) - dead  # dead: Iceberg's
        assert coord_counts(commit["incremental"]) == want, commit["instant"]
        total += sum(want.values())
        assert commit["as_of_rows"] == total, commit["instant"]
    assert total == doc["rows"] == sum(ours.values())


@pytest.mark.slow
def test_hudi_spark_reads_an_evolved_nested_table_as_hudi_rs_does(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path, jvm_reader: dict[str, str]
) -> None:
    from integration.decode.test_schema_evolution import canonical_row, evolve_in_three_restarts

    topic = kafka_broker.new_topic("jvm-hudi-evolved", 2)
    evolve_in_three_restarts(spark, kafka_broker.bootstrap_servers, topic, tmp_path, "hudi")
    base = tmp_path / "h"
    ours = sorted(canonical_row(r, "name") for r in hudi_read(base).to_pylist())
    doc = hudi_spark_read(jvm_reader, base, rows=True)[str(base)]
    theirs = sorted(canonical_row(json.loads(r), "name") for r in doc["rows_json"])
    assert len(ours) == 180 and theirs == ours
    assert "id:bigint" in doc["schema"] and "price:double" in doc["schema"]
    assert sum(r[7] is None for r in ours) == 60  # device.model: null before phase 2
    assert sum(r[9] is None for r in ours) == 120  # note: null before phase 3
