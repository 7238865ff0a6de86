"""The files of the ``iceberg-kafka-connect`` peer's Connect worker, written under its job.

One standalone worker (``ConnectStandalone worker.properties sink.properties``) runs
Iceberg's sink connector; every name that lives on the shared broker (connector, hence its
consumer groups ``connect-<name>`` and ``connect-<name>-coord``, the control topic, the
control groups' prefix) is derived from the job's directory and topic, so two runs never
share state and a restart of the same job (a fault drill) resumes its own.

Invariants:
* the connector's values are schemaless JSON (``JsonConverter``, ``schemas.enable=false``),
  read ``read_committed`` from the earliest offset; ``KafkaMetadataTransform`` adds the
  record's coordinates as flat columns ``_kafka_metadata_{topic,partition,offset,timestamp}``;
* the table is pre-created (auto-create and schema evolution off): the sink only appends;
* the catalog is Iceberg's ``JdbcCatalog`` on the same SQLite file and under the same
  catalog name as pyiceberg's ``SqlCatalog`` (its V1 schema; JdbcCatalog keys rows by name);
* a job of many topics (``PeerJob.topics``) writes each topic into a table of its own the
  way Iceberg's docs route statically: ``iceberg.tables`` lists every table,
  ``iceberg.tables.route-field`` names the transform's topic column, and each table's
  ``iceberg.table.<table>.route-regex`` matches its topic's name alone (the sink tests
  the whole value, ``Matcher.matches``; a record no regex matches is dropped). A job of
  one topic sets no route field: the sink writes every record to its one table.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from lab.peers.model import PeerJob
from pipeline.durations import seconds_of

CATALOG = "connect"  # pyiceberg's SqlCatalog name = the sink's iceberg.catalog
TABLE = "bench.events"
META = "_kafka_metadata"  # KafkaMetadataTransform's default field_name (flat, not nested)
#: the column the transform writes each record's topic to: what a many-table job routes by
ROUTE_FIELD = f"{META}_topic"
#: The coordinator polls its control topic for 1 s per loop (Iceberg 1.11's
#: Coordinator.POLL_DURATION) and checks the interval between polls: a shorter interval
#: than this commits no sooner. The config itself has no minimum (default 300,000 ms).
MIN_COMMIT_INTERVAL_MS = 1_000
#: The worker calls a sink task's put() at least once per offset flush interval even when
#: idle; Iceberg's per-task workers answer the coordinator's commit request only there, so
#: the default 60 s would hold the last commit back by up to a minute.
FLUSH_INTERVAL_MS = 500


@dataclass(frozen=True)
class ConnectPaths:
    root: Path  # job.work / "connect"

    @property
    def worker(self) -> Path:
        return self.root / "worker.properties"

    @property
    def sink(self) -> Path:
        return self.root / "sink.properties"

    @property
    def log4j(self) -> Path:
        return self.root / "log4j2.properties"

    @property
    def plugins(self) -> Path:
        return self.root / "plugins"

    @property
    def catalog_db(self) -> Path:
        return self.root.parent / "catalog.db"

    @property
    def warehouse(self) -> Path:
        return self.root.parent / "warehouse"


def paths(job: PeerJob) -> ConnectPaths:
    return ConnectPaths(job.work.resolve() / "connect")


def job_id(job: PeerJob) -> str:
    """Stable for one job (restarts resume), distinct between jobs."""
    key = "\0".join((str(job.work.resolve()), *job.all_topics)).encode()
    return hashlib.sha256(key).hexdigest()[:12]


def tables(job: PeerJob) -> dict[str, str]:
    """Topic -> the table it is written to: :data:`TABLE` for a one-topic job, else one
    table per topic, named by the topic's place in ``job.topics`` (topic names may hold
    dots, which would read as namespaces)."""
    if not job.topics:
        return {job.topic: TABLE}
    namespace = TABLE.split(".")[0]
    return {t: f"{namespace}.events_{i:02d}" for i, t in enumerate(job.topics)}


def route_regex(topic: str) -> str:
    """A Java regex matching exactly ``topic`` (``\\Q…\\E`` quotes every character, and
    the sink matches the whole value; the anchors say so to a reader)."""
    return f"^\\Q{topic}\\E$"


def connector_name(job: PeerJob) -> str:
    return f"iceberg-sink-{job_id(job)}"


def control_topic(job: PeerJob) -> str:
    return f"iceberg-control-{job_id(job)}"


def commit_interval_ms(job: PeerJob) -> int:
    """The job's processing-time interval, else (``available-now``) the shortest useful."""
    if job.trigger in ("available-now", "once"):
        return MIN_COMMIT_INTERVAL_MS
    return max(MIN_COMMIT_INTERVAL_MS, round(seconds_of(job.trigger) * 1000))


def catalog_properties(job: PeerJob) -> dict[str, str]:
    """pyiceberg's SqlCatalog on the job's SQLite file."""
    p = paths(job)
    return {"type": "sql", "uri": f"sqlite:///{p.catalog_db}", "warehouse": p.warehouse.as_uri()}


def worker_properties(job: PeerJob) -> dict[str, str]:
    p = paths(job)
    props = {
        "bootstrap.servers": job.bootstrap,
        # keys (user ids) are not stored: passed through as bytes, never parsed
        "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        # standalone keeps source offsets in a file (a sink's offsets are its groups')
        "offset.storage.file.filename": str(p.root / "standalone.offsets"),
        "offset.flush.interval.ms": str(FLUSH_INTERVAL_MS),
        "plugin.path": str(p.plugins),
        # both Iceberg jars declare their plugins as services: no reflective class scan
        "plugin.discovery": "service_load",
        "listeners": "http://127.0.0.1:0",  # its REST port: any free one, never 8083 shared
        "consumer.isolation.level": "read_committed",
        "consumer.auto.offset.reset": "earliest",
    }
    if job.max_records_per_trigger is not None:
        props["consumer.max.poll.records"] = str(job.max_records_per_trigger)
    return props


def sink_properties(job: PeerJob) -> dict[str, str]:
    p = paths(job)
    name = connector_name(job)
    return {
        "name": name,
        "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
        # one task: with two in one standalone worker, each task's committer found "the
        # first partition" among its own and both led; every commit then waited the 30 s
        # timeout for the other half of the partitions (seen on 4 partitions, 2 tasks)
        "tasks.max": "1",
        "topics": ",".join(job.all_topics),
        "transforms": "kafka",
        "transforms.kafka.type": "org.apache.iceberg.connect.transforms.KafkaMetadataTransform",
        **table_properties(job),
        "iceberg.tables.auto-create-enabled": "false",
        "iceberg.tables.evolve-schema-enabled": "false",
        "iceberg.catalog": CATALOG,
        "iceberg.catalog.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
        "iceberg.catalog.uri": f"jdbc:sqlite:{p.catalog_db}",
        "iceberg.catalog.warehouse": p.warehouse.as_uri(),
        # pyiceberg created the catalog's tables (V1 schema): never create nor migrate them
        "iceberg.catalog.jdbc.schema-version": "V1",
        "iceberg.catalog.jdbc.init-catalog-tables": "false",
        "iceberg.control.topic": control_topic(job),
        "iceberg.control.group-id-prefix": f"cg-control-{name}-",
        "iceberg.control.commit.interval-ms": str(commit_interval_ms(job)),
        # the control topic's clients; the worker file is read too (sun.java.command)
        "iceberg.kafka.bootstrap.servers": job.bootstrap,
    }


def table_properties(job: PeerJob) -> dict[str, str]:
    """``iceberg.tables`` and, for many topics, the static route of each to its table."""
    by_topic = tables(job)
    props = {"iceberg.tables": ",".join(by_topic.values())}
    if job.topics:
        props["iceberg.tables.route-field"] = ROUTE_FIELD
        for topic, table in by_topic.items():
            props[f"iceberg.table.{table}.route-regex"] = route_regex(topic)
    return props


def log4j2_properties() -> str:
    """INFO to stdout (the harness's log), Kafka clients' and Hadoop's chatter at WARN."""
    lines = [
        "status = warn",
        "appender.out.type = Console",
        "appender.out.name = OUT",
        "appender.out.layout.type = PatternLayout",
        "appender.out.layout.pattern = [%d] %p %m (%c{1})%n",
        "rootLogger.level = INFO",
        "rootLogger.appenderRef.out.ref = OUT",
    ]
    quiet = ("org.apache.kafka.clients", "org.apache.kafka.common", "org.apache.hadoop")
    for i, name in enumerate((*quiet, "org.apache.parquet")):
        lines += [f"logger.q{i}.name = {name}", f"logger.q{i}.level = WARN"]
    return "\n".join(lines) + "\n"


def properties_text(props: dict[str, str]) -> str:
    # values here are paths, URIs and names: no character needs .properties escaping
    # except backslashes (none on POSIX paths) -- escape them anyway
    return "".join(f"{k}={v.replace(chr(92), chr(92) * 2)}\n" for k, v in props.items())
