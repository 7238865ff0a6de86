"""Hudi's own table services, run by hand on a table the pipeline writes, break nothing.

A Hudi user runs Hudi's clustering and cleaner (Spark SQL's ``run_clustering`` and
``run_clean`` of Hudi's Spark bundle, in the JVM readers' environment:
``tests/jvm_reader/hudi_services.py``) with the settings docs/hudi.md gives (metadata table
off, no upgrade). Between pipeline runs -- with the table quiet, with a batch committed to
the table but not to Spark's checkpoint, and with a batch of ours pre-committed and pending
after a SIGKILL -- and the pipeline then goes on: the committed batch's replay is skipped
(dedupe), the pending batch is recommitted without recomputing, every (topic, partition,
offset) is in the tables exactly once (hudi-rs and Hudi's Spark datasource agree with
Kafka), ``ingest verify`` passes, and the writer's timeline trim goes on past Hudi's
``clean`` and clustering ``replacecommit`` instants (they would otherwise hold the active
timeline forever).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.drivers import (
    hudi_coords,
    pipeline_config,
    produced,
    run_cli,
    run_driver_killed,
    run_driver_ok,
    write_config,
)
from support.jvm_readers import coord_counts, hudi_spark_read, hudi_spark_services
from support.kafka_fixtures import KafkaTestBroker

from lab.generator import GeneratorSpec, produce


def _instants(base: Path, action: str) -> list[str]:
    """Times of the completed ``action`` instants in ``base``'s ``.hoodie``."""
    return sorted(p.name.split(".")[0] for p in (base / ".hoodie").glob(f"*.{action}"))


@pytest.mark.slow
@pytest.mark.extended  # CI's budget (111 s): in the rotation
@pytest.mark.timeout(900)
def test_hudi_clustering_and_cleaner_run_by_hand_break_nothing(
    jvm_reader: dict[str, str], kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = kafka_broker.new_topic("hudi-services", 3)
    main, dead = tmp_path / "lake" / "events", tmp_path / "lake" / "events_dead_letter"
    sink = {
        "format": "hudi",
        "table": "db.events",
        "maxSnapshots": 10,
        "hudi": {"basePath": str(main), "partitionFields": ["country"]},
    }
    cfg = pipeline_config(tmp_path, bootstrap, topic, sink, source={"maxRecordsPerTrigger": 100})
    config = write_config(tmp_path, cfg)
    bad = 0.03
    results = [
        produce(bootstrap, topic, GeneratorSpec(count=600, malformed_fraction=bad, seed=191))
    ]
    run_driver_ok(config)  # 6 batches

    # the table quiet: Hudi clusters the small files
    ran = hudi_spark_services(jvm_reader, main, "--clustering")
    assert ran["clustering"], ran
    (clustering,) = _instants(main, "replacecommit")
    assert hudi_coords(main, dead) == produced(*results)

    # batch 6 in the table but not in Spark's commit log (SIGKILL after the table commit)
    # while Hudi clusters again and cleans the file groups the first clustering replaced
    results.append(
        produce(bootstrap, topic, GeneratorSpec(count=1900, malformed_fraction=bad, seed=192))
    )
    run_driver_killed(config, "after-commit:kill@6")
    ran = hudi_spark_services(jvm_reader, main, "--clustering", "--clean", "1")
    assert ran["clean"] and len(_instants(main, "replacecommit")) == 2, ran
    (clean,) = _instants(main, "clean")
    # the replayed batch 6 is recognised as committed; batch 8 is left pending
    replayed = run_driver_killed(config, "after-precommit:kill@8")
    assert "batch 6 of" in replayed.stdout and "replay skipped" in replayed.stdout, replayed.stdout

    # Hudi clusters while batch 8 of ours is pending
    assert hudi_spark_services(jvm_reader, main, "--clustering")["clustering"]
    recovered = run_driver_ok(config)  # 18 more batches: the writer trims its timeline
    assert "batch 8 recommitted" in recovered.stdout, recovered.stdout[-3000:]

    kafka = produced(*results)
    assert hudi_coords(main, dead) == kafka  # exactly once (hudi-rs)
    docs = hudi_spark_read(jvm_reader, main, dead)  # Hudi's Spark datasource
    assert (
        coord_counts(docs[str(main)]["coords"]) + coord_counts(docs[str(dead)]["coords"]) == kafka
    )
    verified = run_cli("verify", "--config", str(config), timeout=300)
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr[-3000:]
    # the trim went past Hudi's own instants
    assert clean not in _instants(main, "clean") and clustering not in _instants(
        main, "replacecommit"
    )
