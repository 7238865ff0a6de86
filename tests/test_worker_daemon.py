"""Python workers of a local session fork from the pipeline's daemon
(pipeline/spark/worker_daemon.py), which imported the task path once; cluster masters keep
PySpark's own daemon."""

from __future__ import annotations

import os
from typing import Any

from pipeline.spark.worker_daemon import TASK_MODULES, daemon_conf


def test_only_local_masters_get_the_preloading_daemon() -> None:
    assert daemon_conf("local[2]") == {"spark.python.daemon.module": "pipeline.spark.worker_daemon"}
    assert daemon_conf("local") == daemon_conf("local[*]") == daemon_conf("local[2]")
    for master in ("spark://h:7077", "k8s://https://h:6443", "yarn", ""):
        assert daemon_conf(master) == {}


def test_local_workers_fork_from_the_daemon_with_the_task_path_imported(spark: Any) -> None:
    assert spark.conf.get("spark.python.daemon.module") == "pipeline.spark.worker_daemon"

    def parent(_: Any) -> list[tuple[str, list[str]]]:
        import sys

        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode()
        return [(cmdline, [m for m in TASK_MODULES if m in sys.modules])]

    for cmdline, modules in (
        spark.sparkContext.parallelize(range(2), 2).mapPartitions(parent).collect()
    ):
        assert "-m pipeline.spark.worker_daemon" in cmdline, cmdline
        assert modules == list(TASK_MODULES)
