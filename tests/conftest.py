"""Shared fixtures: a live Kafka broker (resolved per DESIGN.md) and one local SparkSession."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from kafka_fixtures import KafkaTestBroker, resolve_kafka_broker


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaTestBroker]:
    yield from resolve_kafka_broker()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pipeline.spark.session import build_spark

    os.environ.setdefault("INGEST_SPARK_LOG_LEVEL", "ERROR")
    session = build_spark("ingest-tests", "local[2]", {"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()


def postgres_uri() -> str | None:
    """A reachable PostgreSQL catalog URI (trust auth on 127.0.0.1:5432), else None."""
    from pipeline.tools.pgcluster import shared_server_uri

    return shared_server_uri()
