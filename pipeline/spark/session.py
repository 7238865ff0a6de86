"""SparkSession construction and runtime checks (Java present, Python data source support)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pipeline.errors import EnvironmentProblem

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JAVA_FIX = (
    "install Java 17 (Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless) "
    "or set JAVA_HOME to a Java 17+ installation"
)


def check_java() -> str:
    """Return the Java version; raise EnvironmentProblem naming the fix when absent/too old."""
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise EnvironmentProblem(f"Java was not found (JAVA_HOME / PATH); {JAVA_FIX}")
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EnvironmentProblem(f"`{java} -version` failed ({e}); {JAVA_FIX}") from None
    text = out.stderr + out.stdout
    m = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if not m:
        raise EnvironmentProblem(f"cannot tell the Java version from `java -version`; {JAVA_FIX}")
    major = int(m.group(1))
    if major == 1 and m.group(2):
        major = int(m.group(2))
    if major < 17:
        raise EnvironmentProblem(f"Java {major} found, Spark 4 needs Java 17+; {JAVA_FIX}")
    return text.splitlines()[0] if text else str(major)


def build_spark(
    app_name: str, master: str | None, conf: Mapping[str, str] | None = None
) -> SparkSession:
    """pyspark is imported here, not at module level, so `ingest --help` stays fast."""
    check_java()
    # Executors' Python must be the driver's (same venv, same packages).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if (master or "local").startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no interface guessing
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif not os.environ.get("SPARK_MASTER") and "spark.master" not in (conf or {}):
        # Under spark-submit the master is already in the JVM's conf; getOrCreate keeps it.
        builder = builder.config(
            "spark.master", os.environ.get("INGEST_DEFAULT_MASTER", "local[*]")
        )
    log4j = os.path.join(
        os.path.dirname(os.path.dirname(__file__)), "resources", "log4j2.properties"
    )
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j}"
    defaults = {
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        "spark.python.worker.reuse": "true",
        "spark.sql.streaming.stopActiveRunOnRestart": "true",
    }
    for k, v in {**defaults, **dict(conf or {})}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("INGEST_SPARK_LOG_LEVEL", "WARN"))
    register_source(spark)
    return spark


_registered: set[int] = set()


def register_source(spark: SparkSession) -> None:
    """Register the ``ingest_kafka`` source once per session."""
    key = id(spark)
    if key in _registered:
        return
    from pipeline.source.datasource import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)
    _registered.add(key)
