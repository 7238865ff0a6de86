"""The Spark Structured Streaming glue a user writes to land a Kafka topic in a lakehouse
table: Spark's own Kafka source, ``from_json``, then Iceberg's or Hudi's streaming sink.

Run with a Spark line's own virtual environment (``python spark_sink_job.py --sink …``); it
imports only pyspark and the standard library, so it runs where our package is not
installed. :mod:`lab.peers.spark_sinks` builds its command line.

Invariants:
* the source reads every partition of the topic (``assign``) from ``earliest`` with
  ``read_committed``; the table carries each record's ``topic``, ``partition``, ``offset``
  and ``timestamp`` as Spark's source gives them;
* everything it writes is under the paths it is given (checkpoint, warehouse / base path,
  log directory); Spark's log goes to ``<log dir>/spark.log``, not to stdout;
* SIGTERM stops the query between calls and the session, then the process exits 0; the
  JVM starts with SIGTERM ignored, so a signal to the whole process group stops only this
  driver, which then stops Spark itself. ``available-now`` exits when the topic is drained;
* exit 1 with one line on stderr when the query fails.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

ICEBERG_CATALOG = "peer"  # the Spark catalog name of the Hadoop catalog under --warehouse
KAFKA_COLUMNS = "`topic` STRING, `partition` INT, `offset` BIGINT, `timestamp` TIMESTAMP"
#: Spark settings Hudi's Spark bundle asks of the session (its quick-start's)
HUDI_SESSION = {
    "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
    "spark.kryo.registrator": "org.apache.spark.HoodieSparkKryoRegistrar",
    "spark.sql.extensions": "org.apache.spark.sql.hudi.HoodieSparkSessionExtension",
}
_LOG4J = """\
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss.SSS}} %p %c{{1}}: %m%n%ex
# one line per micro-batch: what the query did, when
logger.progress.name = org.apache.spark.sql.execution.streaming
logger.progress.level = info
logger.progress_runtime.name = org.apache.spark.sql.execution.streaming.runtime
logger.progress_runtime.level = info
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sink", choices=("iceberg", "hudi"), required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partitions", type=int, required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--warehouse", required=True, help="Iceberg: the Hadoop catalog's "
                   "warehouse; Hudi: the table's base path")  # fmt: skip
    p.add_argument("--table", default="events", help="Iceberg: db.table; Hudi: hoodie.table.name")
    p.add_argument("--schema", required=True, help="the events' Spark DDL (from_json)")
    p.add_argument("--trigger", default="available-now", help="available-now or an interval")
    p.add_argument("--max-offsets", type=int, default=0, help="maxOffsetsPerTrigger; 0: all")
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--jars", default="", help="comma-separated jars for spark.jars")
    p.add_argument("--log-dir", required=True)
    return p.parse_args(argv)


def session_conf(args: argparse.Namespace, log4j: Path) -> dict[str, str]:
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j}"
    conf = {
        "spark.app.name": f"peer-spark-{args.sink}-sink",
        "spark.master": f"local[{args.cores}]",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(args.cores),  # no shuffle here; keep it small
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.jars": args.jars,
    }
    if args.sink == "iceberg":
        cat = f"spark.sql.catalog.{ICEBERG_CATALOG}"
        conf.update({
            "spark.sql.extensions":
                "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
            cat: "org.apache.iceberg.spark.SparkCatalog",
            f"{cat}.type": "hadoop",
            f"{cat}.warehouse": Path(args.warehouse).resolve().as_uri(),
        })  # fmt: skip
    else:
        conf.update(HUDI_SESSION)
    return conf


def start_session(conf: dict[str, str]) -> Any:
    """The session, its JVM started with SIGTERM ignored (an ignored signal survives exec)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark_conf = SparkConf(loadDefaults=False).setAll(list(conf.items()))
    ours = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        gateway = launch_gateway(spark_conf)
    finally:
        signal.signal(signal.SIGTERM, ours)
    SparkContext(conf=spark_conf, gateway=gateway)
    return SparkSession.builder.getOrCreate()


def source(spark: Any, args: argparse.Namespace) -> Any:
    from pyspark.sql.functions import col, from_json

    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("assign", json.dumps({args.topic: list(range(args.partitions))}))
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
    )
    if args.max_offsets > 0:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets))
    return reader.load().select(
        from_json(col("value").cast("string"), args.schema).alias("e"),
        "topic", "partition", "offset", "timestamp",
    ).select("e.*", "topic", "partition", "offset", "timestamp")  # fmt: skip


def start_query(spark: Any, args: argparse.Namespace) -> Any:
    writer = source(spark, args).writeStream.outputMode("append")
    writer = writer.option("checkpointLocation", args.checkpoint)
    if args.trigger == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=args.trigger)
    if args.sink == "iceberg":
        table = f"{ICEBERG_CATALOG}.{args.table}"
        namespace = table.rsplit(".", 1)[0]
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
        # unpartitioned, Iceberg's default table properties
        columns = f"{args.schema}, {KAFKA_COLUMNS}"
        spark.sql(f"CREATE TABLE IF NOT EXISTS {table} ({columns}) USING iceberg")
        return writer.format("iceberg").toTable(table)
    options = {
        "hoodie.table.name": args.table,
        "hoodie.datasource.write.table.type": "COPY_ON_WRITE",
        "hoodie.datasource.write.operation": "insert",
        # the Kafka coordinates: unique per record by construction, whatever the payload
        "hoodie.datasource.write.recordkey.field": "topic,partition,offset",
    }
    return writer.format("hudi").options(**options).start(args.warehouse)


def run(args: argparse.Namespace) -> int:
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    log4j = log_dir / "log4j2.properties"
    log4j.write_text(_LOG4J.format(path=log_dir / "spark.log"))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    spark = start_session(session_conf(args, log4j))
    spark.sparkContext.setLogLevel("WARN")
    try:
        if stop.is_set():  # SIGTERM while the session started: nothing begun, nothing to stop
            return 0
        query = start_query(spark, args)
        # short waits: the SIGTERM handler runs between them, in this (the main) thread
        while not stop.is_set() and query.isActive:
            query.awaitTermination(1)
        if stop.is_set():
            query.stop()
        failure = query.exception()
        if failure is not None:
            print(f"spark-{args.sink}-sink: the query failed: {_first_line(failure)}",
                  file=sys.stderr)  # fmt: skip
            return 1
        return 0
    except Exception as e:  # a failed start or batch: one line, the log has the rest
        print(f"spark-{args.sink}-sink: {_first_line(e)}", file=sys.stderr)
        return 1
    finally:
        spark.stop()


def _first_line(error: object) -> str:
    text = str(getattr(error, "desc", None) or error).strip()
    return text.splitlines()[0] if text else type(error).__name__


if __name__ == "__main__":
    sys.exit(run(parse_args()))
