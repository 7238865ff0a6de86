"""End to end on a real Iceberg REST catalog (lab/rest_catalog: Iceberg's REST servlet over
PostgreSQL, the warehouse on SeaweedFS, OAuth2 client credentials): the pipeline configured
with ``sink.catalog.type: rest`` commits exactly once, dead letters included, skips a
replayed batch, and resumes from the table's offsets when its checkpoint is gone.

Counted over the main and dead-letter tables together, as a fresh client (a new token, a
fresh load through the server) reads them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from support.drivers import arrow_coords, iceberg_config, produced
from support.kafka_fixtures import KafkaTestBroker
from support.rest_fixtures import ensure_running

from lab.generator import GeneratorSpec, produce
from lab.rest_catalog import RestCatalogServer
from pipeline.app import Pipeline


def _fresh_coords(server: RestCatalogServer, *tables: str) -> Any:
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("fresh", **server.pyiceberg_properties())
    total = arrow_coords(None)
    for name in tables:
        total += arrow_coords(catalog.load_table(name).scan().to_arrow())
    return total


def test_exactly_once_on_the_rest_catalog(
    spark: Any, kafka_broker: KafkaTestBroker, rest_catalog: RestCatalogServer, tmp_path: Path
) -> None:
    ensure_running(rest_catalog)
    topic = kafka_broker.new_topic("rest", 2)
    r1 = produce(
        kafka_broker.bootstrap_servers,
        topic,
        GeneratorSpec(count=1000, malformed_fraction=0.05, seed=31),
    )
    cfg = iceberg_config(
        tmp_path,
        kafka_broker.bootstrap_servers,
        topic,
        catalog=rest_catalog.sink_catalog(),
        table=f"db_{topic.replace('-', '_')}.events",
        maxRecordsPerTrigger=400,
    )
    tables = (cfg.sink.table, cfg.sink.dead_letter_identifier)
    stats = Pipeline(cfg, spark).run()
    assert stats.batches == 3 and stats.dead_letters == r1.malformed
    assert _fresh_coords(rest_catalog, *tables) == produced(r1)

    # Spark's commit log loses the last batch: it is replayed and skipped as committed
    commits = tmp_path / "checkpoint" / "commits"
    last = max(int(f.name) for f in commits.iterdir() if f.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    r2 = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=300, seed=32))
    assert Pipeline(cfg, spark).run().skipped == 1
    assert _fresh_coords(rest_catalog, *tables) == produced(r1, r2)

    # the checkpoint gone: startingOffsets table resumes from the table's offsets
    shutil.rmtree(tmp_path / "checkpoint")
    r3 = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=200, seed=33))
    Pipeline(cfg, spark).run()
    assert _fresh_coords(rest_catalog, *tables) == produced(r1, r2, r3)
