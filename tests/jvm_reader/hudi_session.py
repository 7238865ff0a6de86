"""The local Spark session the Hudi scripts of this directory share (Hudi's Spark bundle,
Spark 3.5, in the JVM readers' environment; imports nothing from ``pipeline``)."""

from __future__ import annotations

from typing import Any


def hudi_session(
    app: str, jars: list[str], hadoop: dict[str, str] | None = None, *, catalog: bool = False
) -> Any:
    """A one-core session with Hudi's SQL extension (``catalog``: and its session catalog,
    for the ``CALL`` procedures); ``hadoop`` settings go in as ``spark.hadoop.*``."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in (hadoop or {}).items():
        builder = builder.config(f"spark.hadoop.{key}", value)
    if catalog:
        builder = builder.config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.hudi.catalog.HoodieCatalog"
        )
    spark = (
        builder.master("local[1]")
        .appName(app)
        .config("spark.jars", ",".join(j for j in jars if j))
        .config("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
        .config("spark.sql.extensions", "org.apache.spark.sql.hudi.HoodieSparkSessionExtension")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # a short-lived JVM: the quick JIT tier only, serial GC
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.memory", "768m")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
