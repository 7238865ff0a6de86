"""Shared fixtures: real Apache Kafka (one node, and three for broker faults), one local
SparkSession, a SeaweedFS S3 server, a Schema Registry, an Iceberg REST catalog and the
independent JVM readers' environment.

Helpers the test modules import live in the ``support`` package (``tests/support/``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from support.jvm_readers import reader_paths
from support.kafka_fixtures import KafkaTestBroker, resolve_kafka_broker, start_cluster
from support.registry_fixtures import registry_server
from support.rest_fixtures import rest_catalog_server
from support.s3_fixtures import S3Server, S3Unavailable, start_seaweedfs

from lab.registry import SchemaRegistryServer
from lab.rest_catalog import RestCatalogServer


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaTestBroker]:
    yield from resolve_kafka_broker()


@pytest.fixture(scope="session")
def kafka_cluster3() -> Iterator[KafkaTestBroker]:
    """Three KRaft nodes, replication factor 3, min.insync.replicas 2: for tests that kill,
    pause and restart brokers (started only when such a test runs)."""
    yield from start_cluster(3)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pipeline.source.choice import PYTHON_READER_SINCE
    from pipeline.source.python_reader import PythonKafkaReader
    from pipeline.source.spark_kafka import SparkKafkaReader
    from pipeline.source.spark_line import spark_version
    from pipeline.spark.session import build_spark

    os.environ.setdefault("INGEST_SPARK_LOG_LEVEL", "ERROR")
    # Spark's Kafka source on the class path: the session serves either source.reader
    jars = SparkKafkaReader(spark_version()).jars()
    session = build_spark(
        "ingest-tests", "local[2]", {"spark.sql.shuffle.partitions": "2"}, jars=jars
    )
    if spark_version() >= PYTHON_READER_SINCE:  # ``ingest_kafka`` read directly by tests
        PythonKafkaReader().register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A real SeaweedFS S3 server for the session (skips, naming why, when it cannot run)."""
    gen = start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"))
    try:
        server = next(gen)
    except S3Unavailable as e:
        pytest.skip(f"no S3-compatible server: {e}")
    yield server
    gen.close()


@pytest.fixture(scope="session")
def jvm_reader() -> dict[str, str]:
    """Paths of the JVM readers' environment (``python``, ``iceberg_jar``, ``hudi_jar``,
    ``sqlite_jdbc_jar``), built on first use."""
    return reader_paths()


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchemaRegistryServer]:
    """A real Schema Registry (Apicurio, Confluent-compatible API) for the session."""
    yield from registry_server(tmp_path_factory.mktemp("registry"))


@pytest.fixture(scope="session")
def rest_catalog(
    tmp_path_factory: pytest.TempPathFactory, s3_server: S3Server
) -> Iterator[RestCatalogServer]:
    """A real Iceberg REST catalog (JDBC catalog on PostgreSQL, warehouse on SeaweedFS,
    OAuth2 client credentials) for the session; a test that takes it down restarts it."""
    yield from rest_catalog_server(tmp_path_factory.mktemp("rest-catalog"), s3_server)
