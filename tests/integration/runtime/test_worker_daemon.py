"""Python workers of a local session fork from the pipeline's daemon
(pipeline/spark/worker_daemon.py), which imported the task path once; cluster masters keep
PySpark's own daemon."""

from __future__ import annotations

import os
from typing import Any

from pipeline.spark.worker_daemon import (
    DAEMON_KEY,
    FORMAT_ENV,
    TASK_MODULES,
    daemon_conf,
    task_modules,
)


def test_the_daemon_follows_the_master_the_session_runs_on() -> None:
    ours = {DAEMON_KEY: "pipeline.spark.worker_daemon"}
    for master in ("local", "local[2]", "local[*]"):
        assert daemon_conf({"spark.master": master}, {}) == ours
    for master in ("spark://h:7077", "k8s://https://h:6443", "yarn", ""):
        assert daemon_conf({"spark.master": master}, {}) == {}
    # under spark-submit the submitted master counts (a cluster's executors may lack the
    # package), unless the pipeline's config names its own
    assert daemon_conf({}, {"spark.master": "spark://h:7077"}) == {}
    assert daemon_conf({}, {"spark.master": "local[2]"}) == ours
    assert daemon_conf({"spark.master": "spark://h:7077"}, {"spark.master": "local[1]"}) == {}
    # a daemon named by the config or by spark-submit wins
    assert daemon_conf({"spark.master": "local", DAEMON_KEY: "pyspark.daemon"}, {}) == {}
    assert daemon_conf({"spark.master": "local"}, {DAEMON_KEY: "pyspark.daemon"}) == {}


def test_the_daemon_imports_only_the_writer_of_the_runs_table_format() -> None:
    """Its imports delay every Python process of a query's start (Spark starts them one
    at a time): a run of one format does not import the other's writer."""
    iceberg = task_modules({FORMAT_ENV: "iceberg"})
    hudi = task_modules({FORMAT_ENV: "hudi"})
    assert "pipeline.formats.iceberg.writer" in iceberg
    assert "pipeline.formats.hudi.writer" not in iceberg
    assert "pipeline.formats.hudi.writer" in hudi
    assert "pipeline.formats.iceberg.writer" not in hudi
    assert "pipeline.source.reader" in iceberg and "pipeline.source.reader" in hudi
    for unsure in ({}, {FORMAT_ENV: "both"}, {FORMAT_ENV: "parquet"}):
        assert task_modules(unsure) == TASK_MODULES


# what a task's plan unpickles besides the task path: the formats' file writers (the
# Iceberg one imports pyiceberg's pyarrow I/O, ~0.4 s a worker)
PLAN_MODULES = ("pipeline.formats.iceberg.writer", "pipeline.formats.hudi.writer")


def test_local_workers_fork_from_the_daemon_with_the_task_path_imported(spark: Any) -> None:
    assert spark.conf.get(DAEMON_KEY) == "pipeline.spark.worker_daemon"
    wanted = (*TASK_MODULES, *PLAN_MODULES)

    def parent(_: Any) -> list[tuple[str, list[str]]]:
        import sys

        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode()
        return [(cmdline, [m for m in wanted if m in sys.modules])]

    for cmdline, modules in (
        spark.sparkContext.parallelize(range(2), 2).mapPartitions(parent).collect()
    ):
        assert "-m pipeline.spark.worker_daemon" in cmdline, cmdline
        assert modules == list(wanted)


def test_warm_up_starts_the_workers_of_both_kinds_of_batch_job(spark: Any) -> None:
    """A warm standby's take-over starts no Python worker: the RDD job of the arrow engine
    and the SQL ``mapInArrow`` of Spark's Kafka source find theirs already running."""
    import time

    from pipeline.spark.session import warm_up

    def worker_ages(batches: Any) -> Any:  # each worker's age: /proc start against uptime
        import pyarrow as pa

        with open("/proc/self/stat") as f:
            started = int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"age": [uptime - started]})

    warm_up(spark)
    time.sleep(2.0)
    n = int(spark.sparkContext.defaultParallelism)
    ages = spark.range(n, numPartitions=n).mapInArrow(worker_ages, "age DOUBLE").collect()
    assert len(ages) == n
    assert all(row.age >= 1.5 for row in ages), ages  # started before this job


def test_the_driver_jvm_compiles_with_its_quick_compiler_only(spark: Any) -> None:
    """``spark.driverJit: c1`` (the default): -XX:TieredStopAtLevel=1 on the JVM the
    pipeline starts; ``tiered`` and a level the user gave leave the JVM's choice alone."""
    from pipeline.spark.session import jit_option

    args = list(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                .getInputArguments())  # fmt: skip
    assert "-XX:TieredStopAtLevel=1" in args, args
    assert jit_option("c1", "") == "-XX:TieredStopAtLevel=1"
    assert jit_option("tiered", "") == ""
    assert jit_option("c1", "-Dx=1 -XX:TieredStopAtLevel=4") == ""  # the user's wins


def test_workers_import_pyspark_from_the_package_not_from_sparks_zips(spark: Any) -> None:
    """Spark puts pyspark.zip, py4j's zip and the spark-core jar at the head of a worker's
    path; each first task's ``importlib.invalidate_caches()`` re-read every zip importer's
    directory (~0.4-0.8 CPU-s a worker on the 2-core host). The daemon imports PySpark
    from the installed package instead, where it is the same version."""

    def where(_: Any) -> list[tuple[str, list[str]]]:
        import sys
        import zipimport

        import pyspark

        zips = [k for k, v in sys.path_importer_cache.items()
                if isinstance(v, zipimport.zipimporter) and "pyspark" in k]  # fmt: skip
        return [(pyspark.__file__ or "", zips)]

    for file, zips in spark.sparkContext.parallelize(range(2), 2).mapPartitions(where).collect():
        assert ".zip" not in file, file
        assert zips == []


def test_archives_of_another_spark_stay_on_the_path(tmp_path: Any, monkeypatch: Any) -> None:
    """A Spark distribution's own ``python/lib`` zips (not inside the installed PySpark
    package) stay: they may be another version than the package."""
    import sys
    import zipfile

    from pipeline.spark.worker_daemon import use_installed_pyspark

    dist = tmp_path / "spark-dist" / "python" / "lib"
    dist.mkdir(parents=True)
    with zipfile.ZipFile(dist / "pyspark.zip", "w") as z:
        z.writestr("pyspark/__init__.py", "")
    ours = [str(dist / "pyspark.zip"), *sys.path]
    monkeypatch.setattr(sys, "path", ours)
    assert use_installed_pyspark() == []
    assert sys.path == ours
