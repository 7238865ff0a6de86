"""Iceberg's Kafka Connect sink as a peer: what users run instead of this pipeline.

One JVM is the whole system: Apache Kafka's Connect worker (``connect-runtime`` at the
broker's version) in standalone mode, started with the sink's properties file, so it starts
the connector by itself (no REST call). Standalone suffices for Iceberg's design: the sink
elects its commit coordinator among its own tasks (the one holding the first partition in
the consumer group ``connect-<name>``, which a standalone worker's sink tasks join like a
distributed worker's), and the coordinator, the per-task workers and the exactly-once
offsets go through the sink's own control topic and transactional producers on the broker,
not through the worker's config/status/offset topics. SIGKILL of the JVM leaves nothing.

Set-up (:meth:`IcebergKafkaConnectPeer.prepare`, outside the meter): the manifest's sets
``peer-iceberg-connect`` (the worker's class path) and ``peer-iceberg-connect-plugin`` (the
sink, its transforms, iceberg-parquet/-orc, hadoop-common, sqlite-jdbc), the plugin directory
under ``job.work`` (links to the set's jars: Iceberg's runtime zip is not on Maven
Central), the control topic, and the table (one per topic for a job of many topics),
pre-created with pyiceberg so every column has the events' own type (the sink's auto-create
infers types from the first schemaless record: ``ts`` would be a string and a null
``amount`` untyped). Files: :mod:`.kafka_connect_config`.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from lab.peers import iceberg_read
from lab.peers import kafka_connect_config as conf
from lab.peers.coords import Columns
from lab.peers.model import Launch, PeerJob, Progress
from pipeline import jvm
from pipeline.errors import PipelineError

WORKER_SET = "peer-iceberg-connect"
PLUGIN_SET = "peer-iceberg-connect-plugin"
PLUGIN_DIR = "iceberg-kafka-connect"
_COLUMNS: Columns = (
    f"{conf.META}_topic",
    f"{conf.META}_partition",
    f"{conf.META}_offset",
    f"{conf.META}_timestamp",
)
_HEAP = ["-Xms256m", "-Xmx2g"]  # Connect's own scripts' default heap (KAFKA_HEAP_OPTS)


class IcebergKafkaConnectPeer:
    """Iceberg 1.11's Kafka Connect sink on a standalone Connect worker."""

    name = "iceberg-kafka-connect"

    def describe(self) -> dict[str, str]:
        sets = jvm.manifest_sets()  # group:artifact:version, as pinned in the manifest
        return {
            "what": "Apache Kafka Connect (standalone worker, one JVM) running Apache "
            "Iceberg's Kafka Connect sink, exactly-once (control topic + transactions)",
            "worker": ", ".join(sets.get(WORKER_SET, [])),
            "plugin": ", ".join(sets.get(PLUGIN_SET, [])) + " (with their runtime deps)",
            "catalog": "Iceberg JdbcCatalog on the job's SQLite file (pyiceberg SqlCatalog "
            "reads it); table pre-created with the events' types",
            "coordinates": f"KafkaMetadataTransform: {', '.join(_COLUMNS)}",
            "tables": "one; many topics: one table each, iceberg.tables.route-field = "
            f"{conf.ROUTE_FIELD} and an exact route-regex per table",
            "commit interval": "iceberg.control.commit.interval-ms = the trigger's interval, "
            f"at least {conf.MIN_COMMIT_INTERVAL_MS} ms (the coordinator's poll)",
            "tasks.max": "1 (two tasks in one standalone worker both elected themselves "
            "commit leader here; every commit then waited out its 30 s timeout)",
        }

    # ------------------------------------------------------------------ set-up

    def prepare(self, job: PeerJob) -> None:
        p = conf.paths(job)
        p.root.mkdir(parents=True, exist_ok=True)
        jvm.fetch(WORKER_SET)
        self._assemble_plugin(job)
        p.worker.write_text(conf.properties_text(conf.worker_properties(job)))
        p.sink.write_text(conf.properties_text(conf.sink_properties(job)))
        p.log4j.write_text(conf.log4j2_properties())
        _create_control_topic(job)
        self._create_table(job)

    def _assemble_plugin(self, job: PeerJob) -> None:
        """``plugins/iceberg-kafka-connect/``: one link per jar of the plugin set."""
        source = jvm.fetch(PLUGIN_SET)
        target = conf.paths(job).plugins / PLUGIN_DIR
        target.mkdir(parents=True, exist_ok=True)
        for old in target.iterdir():  # a changed manifest fetched the set anew: relink
            old.unlink()
        for jar in sorted(source.glob("*.jar")):
            (target / jar.name).symlink_to(jar)

    def _create_table(self, job: PeerJob) -> None:
        from pyiceberg.exceptions import NamespaceAlreadyExistsError, TableAlreadyExistsError

        catalog = self._catalog(job)
        namespace = conf.TABLE.split(".")[0]
        with contextlib.suppress(NamespaceAlreadyExistsError):
            catalog.create_namespace(namespace)
        for table in conf.tables(job).values():
            with contextlib.suppress(TableAlreadyExistsError):  # a restart keeps its tables
                catalog.create_table(table, schema=table_schema(job.payload))

    def _catalog(self, job: PeerJob) -> Any:
        from pipeline.formats.iceberg.catalog import load_catalog

        conf.paths(job).warehouse.mkdir(parents=True, exist_ok=True)
        return load_catalog(conf.CATALOG, conf.catalog_properties(job))

    # ------------------------------------------------------------------ run

    def launch(self, job: PeerJob) -> Launch:
        from lab.broker.node import find_java

        p = conf.paths(job)
        classpath = jvm.classpath(WORKER_SET)
        argv = [
            find_java(),
            *_HEAP,
            "-XX:+UseG1GC",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={p.log4j}",
            "-cp",
            classpath,
            # the worker file must be the first argument: the sink reads its Kafka client
            # settings from it (through sun.java.command)
            "org.apache.kafka.connect.cli.ConnectStandalone",
            str(p.worker),
            str(p.sink),
        ]
        return Launch(argv=argv, cwd=p.root, log=job.work / "connect.log")

    # ------------------------------------------------------------------ table

    def _table(self, job: PeerJob, name: str = conf.TABLE) -> Any:
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self._catalog(job).load_table(name)
        except NoSuchTableError:
            return None

    def _tables(self, job: PeerJob) -> dict[str, Any]:
        """Table name -> the table (None: not created yet), one catalog for all."""
        from pyiceberg.exceptions import NoSuchTableError

        catalog = self._catalog(job)
        out: dict[str, Any] = {}
        for name in conf.tables(job).values():
            try:
                out[name] = catalog.load_table(name)
            except NoSuchTableError:
                out[name] = None
        return out

    def lose_checkpoint(self, job: PeerJob) -> str:
        """The sink's consumer group: the offsets its tasks commit in the same transaction
        as their control-topic events (what a restarted task resumes from). A killed
        worker's member stays in the group until its session times out: retried."""
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient

        group = f"connect-{conf.connector_name(job)}"
        admin = AdminClient({"bootstrap.servers": job.bootstrap})
        deadline = time.monotonic() + 120
        while True:
            try:
                for fut in admin.delete_consumer_groups([group], request_timeout=30).values():
                    fut.result(60)
                return f"deleted the consumer group {group}"
            except KafkaException as e:
                busy = e.args and e.args[0].code() == KafkaError.NON_EMPTY_GROUP
                if not busy or time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def data_dir(self, job: PeerJob) -> Path:
        return conf.paths(job).warehouse

    def progress(self, job: PeerJob) -> Progress:
        """Over every table of the job: records, commits, files and bytes added up."""
        return iceberg_read.combine(
            [iceberg_read.table_progress(t) for t in self._tables(job).values()]
        )

    def table_progress(self, job: PeerJob) -> dict[str, Progress]:
        """Topic -> the progress of its own table."""
        tables = self._tables(job)
        return {
            topic: iceberg_read.table_progress(tables[name])
            for topic, name in conf.tables(job).items()
        }

    def rows(self, job: PeerJob) -> pa.Table:
        """Every row's coordinates, with the commit time of the snapshot that added its
        data file (all tables of the job together)."""
        return pa.concat_tables(self.table_rows(job).values())

    def table_rows(self, job: PeerJob) -> dict[str, pa.Table]:
        """Topic -> the coordinates of every row of that topic's table (whichever topic
        each row came from: a misrouted record shows here)."""
        tables = self._tables(job)
        return {
            topic: iceberg_read.table_rows(tables[name], _COLUMNS)
            for topic, name in conf.tables(job).items()
        }


def table_schema(payload: bool) -> Any:
    """The events' columns with their own types, then the transform's four columns."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, LongType, NestedField, StringType

    from lab.events import event_schema_fields
    from pipeline.formats.iceberg.schema import parse_type

    fields = [
        NestedField(i, f["name"], parse_type(f["type"], f["name"]), required=f["required"])
        for i, f in enumerate(event_schema_fields(payload), 1)
    ]
    kafka_types = [StringType(), IntegerType(), LongType(), LongType()]
    for name, t in zip(_COLUMNS, kafka_types, strict=True):
        # the transform's timestamp is optional (a record may have none)
        fields.append(NestedField(len(fields) + 1, name, t, required=not name.endswith("stamp")))
    return Schema(*fields)


def _create_control_topic(job: PeerJob) -> None:
    """One partition, on the broker's replication default; kept when it exists (restart)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": job.bootstrap})
    topic = conf.control_topic(job)
    future = admin.create_topics([NewTopic(topic, 1, -1)], operation_timeout=30)[topic]
    try:
        future.result(timeout=60)
    except KafkaException as e:
        err = e.args[0] if e.args else None
        if not (isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS):
            raise PipelineError(f"cannot create the control topic {topic}: {err}") from None
