"""The Spark Structured Streaming glue users run instead of this pipeline, as bench peers:
Spark's Kafka source, ``from_json`` with the events' schema, into

* :class:`SparkIcebergSink` (``spark-iceberg-sink``): Iceberg's streaming sink on PySpark
  4.1 (``iceberg-spark-runtime-4.1_2.13``, manifest set ``peer-spark-iceberg``) with
  Spark's Kafka source (``spark-kafka-4.1``), a Hadoop catalog whose warehouse is
  ``<work>/warehouse``; the table ``db.events`` (unpartitioned, Iceberg's default
  properties) is created by the job before its stream starts;
* :class:`SparkHudiSink` (``spark-hudi-sink``): Hudi's streaming sink on PySpark 3.5
  (``hudi-spark3.5-bundle_2.12``, set ``hudi-spark``; ``spark-kafka-3.5``), a
  copy-on-write table at ``<work>/hudi/events``, operation ``insert``, record key the Kafka
  coordinates ``topic,partition,offset`` (unique per record by construction; with
  ``insert`` Hudi does not deduplicate on it, so a replayed record stays visible to the
  checker), Hudi's defaults otherwise (metadata table on, small-file packing, cleaning).

Each runs as one process: :file:`jobs/spark_sink_job.py` under that Spark line's own
virtual environment (``scripts/spark-line-env.sh VERSION``), which imports only pyspark.
Its checkpoint is ``<work>/checkpoint``, its logs ``<work>/logs``. Progress and rows are
read through the formats' own metadata and readers (:mod:`.iceberg_read`, :mod:`.hudi_read`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa

from lab.events import event_schema_fields
from lab.peers import hudi_read, iceberg_read
from lab.peers.model import Launch, PeerJob, Progress, delete_tree
from pipeline import jvm
from pipeline.errors import EnvironmentProblem
from pipeline.source.spark_kafka import own_jars

JOB = Path(__file__).resolve().parent / "jobs" / "spark_sink_job.py"
#: where scripts/spark-line-env.sh builds each line's environment
SPARK_LINES = Path(__file__).resolve().parents[2] / ".spark-lines"
_DDL_TYPES = {
    "string": "STRING",
    "double": "DOUBLE",
    "long": "BIGINT",
    "int": "INT",
    "boolean": "BOOLEAN",
    "timestamptz": "TIMESTAMP",
    "timestamp": "TIMESTAMP_NTZ",
}


def events_ddl(payload: bool) -> str:
    """The generated events' columns as Spark DDL (all nullable: ``from_json``'s output)."""
    return ", ".join(f"`{f['name']}` {_DDL_TYPES[f['type']]}" for f in event_schema_fields(payload))


def _artifact(set_name: str, artifact_prefix: str) -> str:
    """``artifact version`` of a manifest set's dependency, for the report."""
    for coords in jvm.manifest_sets().get(set_name, []):
        group, artifact, version = coords.split(":")[:3]
        if artifact.startswith(artifact_prefix):
            return f"{group}:{artifact}:{version}"
    return "?"


def spark_line_python(version: str, who: str = "peers") -> str:
    """The python of PySpark ``version``'s environment, built once by
    scripts/spark-line-env.sh (as CI's Spark-line stages build it)."""
    script = SPARK_LINES.parent / "scripts" / "spark-line-env.sh"
    done = subprocess.run(["bash", str(script), version], capture_output=True, text=True)
    python = SPARK_LINES / version / "venv" / "bin" / "python"
    if done.returncode != 0 or not python.is_file():
        why = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise EnvironmentProblem(f"{who}: PySpark {version}: {why[0]}")
    return str(python)


def _java_home() -> str | None:
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    java = shutil.which("java")
    return str(Path(java).resolve().parents[1]) if java else None


class _SparkSink:
    """What both peers share: a Spark line's venv, jar sets, the job's command line."""

    name = ""
    sink = ""  # the job's --sink
    spark_version = ""
    sink_set = ""  # the manifest set of the format's Spark package
    sink_prefix = ""  # that package's jar (the set's other jars are not needed)
    kafka_set = ""

    def python(self) -> Path:
        return SPARK_LINES / self.spark_version / "venv" / "bin" / "python"

    def describe(self) -> dict[str, str]:
        return {
            "what": f"Spark Structured Streaming: Kafka source, from_json, {self.sink} "
            "streaming sink (checkpointed, append)",
            "spark": f"PySpark {self.spark_version}, local[cores], UI off",
            "kafka source": _artifact(self.kafka_set, "spark-sql-kafka")
            + " (assign, startingOffsets earliest, kafka.isolation.level read_committed, "
            "maxOffsetsPerTrigger = max records per trigger)",
            "sink package": _artifact(self.sink_set, self.sink_prefix),
            "trigger": "availableNow, or processingTime(the run's trigger)",
        }

    def prepare(self, job: PeerJob) -> None:
        """The Spark line's environment, Java and the jars: all before the meter starts."""
        spark_line_python(self.spark_version, self.name)
        if _java_home() is None:
            raise EnvironmentProblem(f"{self.name}: Java was not found (JAVA_HOME / PATH)")
        self.jars()  # fetched here, outside the meter
        (job.work / "logs").mkdir(parents=True, exist_ok=True)

    def jars(self) -> list[str]:
        sink = [str(p) for p in sorted(jvm.fetch(self.sink_set).glob(f"{self.sink_prefix}*.jar"))]
        if not sink:
            raise EnvironmentProblem(f"{self.name}: no {self.sink_prefix}*.jar in {self.sink_set}")
        return [*sink, *own_jars(jvm.fetch(self.kafka_set))]

    def table_args(self, job: PeerJob) -> list[str]:
        raise NotImplementedError

    def lose_checkpoint(self, job: PeerJob) -> str:
        return delete_tree(job.work / "checkpoint")

    def launch(self, job: PeerJob) -> Launch:
        (job.work / "logs").mkdir(parents=True, exist_ok=True)
        python = str(self.python())
        argv = [
            python, str(JOB), "--sink", self.sink,
            "--bootstrap", job.bootstrap, "--topic", job.topic,
            "--partitions", str(job.partitions),
            "--checkpoint", str(job.work / "checkpoint"),
            *self.table_args(job),
            "--schema", events_ddl(job.payload),
            "--trigger", job.trigger,
            "--max-offsets", str(job.max_records_per_trigger or 0),
            "--cores", str(job.cores),
            "--jars", ",".join(self.jars()),
            "--log-dir", str(job.work / "logs"),
        ]  # fmt: skip
        env = {"PYSPARK_PYTHON": python, "SPARK_LOCAL_IP": "127.0.0.1"}
        java_home = _java_home()
        if java_home:
            env["JAVA_HOME"] = java_home
        return Launch(argv=argv, env=env, cwd=job.work, log=job.work / "logs" / "job.out")


class SparkIcebergSink(_SparkSink):
    name = "spark-iceberg-sink"
    sink = "iceberg"
    spark_version = "4.1.1"
    sink_set = "peer-spark-iceberg"
    sink_prefix = "iceberg-spark-runtime-"
    kafka_set = "spark-kafka-4.1"

    def describe(self) -> dict[str, str]:
        return {
            **super().describe(),
            "table": "Hadoop catalog (warehouse under the run's directory), db.events "
            "created before the stream: unpartitioned, Iceberg's default properties "
            "(format v2, Parquet zstd); the events' columns + topic, partition, offset, "
            "timestamp",
        }

    @staticmethod
    def table_dir(job: PeerJob) -> Path:
        return job.work / "warehouse" / "db" / "events"

    def table_args(self, job: PeerJob) -> list[str]:
        return ["--warehouse", str(job.work / "warehouse"), "--table", "db.events"]

    def data_dir(self, job: PeerJob) -> Path:
        return self.table_dir(job) / "data"

    def progress(self, job: PeerJob) -> Progress:
        return iceberg_read.progress(self.table_dir(job))

    def rows(self, job: PeerJob) -> pa.Table:
        return iceberg_read.rows(self.table_dir(job))


class SparkHudiSink(_SparkSink):
    name = "spark-hudi-sink"
    sink = "hudi"
    spark_version = "3.5.7"
    sink_set = "hudi-spark"
    sink_prefix = "hudi-spark3.5-bundle_"
    kafka_set = "spark-kafka-3.5"

    def describe(self) -> dict[str, str]:
        return {
            **super().describe(),
            "table": "COPY_ON_WRITE, operation insert, record key topic,partition,offset, "
            "non-partitioned, Hudi's defaults otherwise (table version 9, metadata table "
            "on); Kryo serializer and Hudi's session extension as Hudi asks",
        }

    @staticmethod
    def base(job: PeerJob) -> Path:
        return job.work / "hudi" / "events"

    def table_args(self, job: PeerJob) -> list[str]:
        return ["--warehouse", str(self.base(job)), "--table", "events"]

    def data_dir(self, job: PeerJob) -> Path:
        return self.base(job)

    def progress(self, job: PeerJob) -> Progress:
        return hudi_read.progress(self.base(job))

    def rows(self, job: PeerJob) -> pa.Table:
        return hudi_read.rows(self.base(job))
