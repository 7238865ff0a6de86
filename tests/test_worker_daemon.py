"""Python workers of a local session fork from the pipeline's daemon
(pipeline/spark/worker_daemon.py), which imported the task path once; cluster masters keep
PySpark's own daemon."""

from __future__ import annotations

import os
from typing import Any

from pipeline.spark.worker_daemon import DAEMON_KEY, TASK_MODULES, daemon_conf


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
