"""PySpark's worker daemon with the task path imported once, before it forks workers.

Spark starts one daemon per executor (``python -m <spark.python.daemon.module>``) and forks
each Python worker from it. PySpark's own daemon imports nothing of ours, so every new
worker imports pyarrow, pyiceberg, confluent-kafka and the pipeline's task modules itself
(docs/bench.md, "Figures behind the code's choices") -- part of why a run's first batch
costs many times a steady one. Imported here, the forked workers inherit them, and share their
pages with the daemon.

Spark puts ``pyspark.zip``, py4j's zip and the spark-core jar at the head of a worker's
path, and a worker's first task calls ``importlib.invalidate_caches()``, which makes every
zip importer read its archive's directory again in Python (a noticeable cost per worker,
for nothing: the jar holds no Python). Where those archives belong to the
PySpark installed as a package (a pip-installed PySpark ships them inside it), the daemon
drops them from the path first, so it and its workers import that package instead: the
same files, byte code cached, no archive to re-read.

Nothing here starts a thread or opens a connection: the imports are the modules' own
top-level code, as PySpark's daemon requires of anything loaded before it forks.
``spark.python.daemon.module`` names this module: ``pipeline.spark.session`` sets it by
default on local masters (:func:`daemon_conf`); given settings win.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from importlib.machinery import PathFinder

#: what a task imports (the decode, the Kafka reader and the staged-file writer) and what
#: its plan unpickles: the formats' file writers (Iceberg's imports pyiceberg's pyarrow I/O,
#: the dearest import of all; a worker forked without it paid that in its first task, a
#: take-over's too)
COMMON_TASK_MODULES = ("pipeline.decode.arrow", "pipeline.source.reader", "pipeline.spark.writer")
FORMAT_WRITERS = {
    "iceberg": ("pipeline.formats.iceberg.writer",),
    "hudi": ("pipeline.formats.hudi.writer",),
}
TASK_MODULES = (*COMMON_TASK_MODULES, *(m for ms in FORMAT_WRITERS.values() for m in ms))

#: the table format of the run whose driver started the JVM (set before it starts, so a
#: local daemon inherits it): only that format's writer is imported. The daemon's start
#: holds Spark's lock on starting Python processes (``SparkEnv.createPythonWorker`` is
#: synchronized), so the query's own Python processes wait for every import made here.
FORMAT_ENV = "INGEST_TABLE_FORMAT"


def task_modules(environ: Mapping[str, str]) -> tuple[str, ...]:
    """What :func:`preload` imports under ``environ``: all writers unless it names one
    format (``both``, none or another: all)."""
    writers = FORMAT_WRITERS.get(environ.get(FORMAT_ENV, ""))
    return TASK_MODULES if writers is None else (*COMMON_TASK_MODULES, *writers)


DAEMON_KEY = "spark.python.daemon.module"


def daemon_conf(settings: Mapping[str, str], submitted: Mapping[str, str]) -> dict[str, str]:
    """This daemon, to add to a session's ``settings`` (the pipeline's and ours) when it
    runs on a ``local`` master -- ``settings``' own, else the one spark-submit gave
    (``submitted``) -- whose workers run the driver's Python, which imports the package. A
    cluster's executors may lack it: they keep PySpark's daemon. A daemon set in either
    wins."""
    if DAEMON_KEY in settings or DAEMON_KEY in submitted:
        return {}
    master = settings.get("spark.master") or submitted.get("spark.master", "")
    return {DAEMON_KEY: __name__} if master.startswith("local") else {}


def use_installed_pyspark() -> list[str]:
    """Drop from ``sys.path`` the archives Spark put there that lie inside the PySpark
    package the rest of the path finds (its zips, its jars); py4j's zip only where py4j is
    installed too. The dropped entries, none where PySpark is only in the archives or is
    another installation (a Spark distribution's ``python/lib``)."""
    archives = [e for e in sys.path if e.endswith((".zip", ".jar"))]
    rest = [e for e in sys.path if e not in archives]
    spec = PathFinder.find_spec("pyspark", rest)
    if spec is None or spec.origin is None:
        return []
    home = os.path.realpath(os.path.dirname(spec.origin)) + os.sep
    drop = [e for e in archives if os.path.realpath(e).startswith(home)]
    if PathFinder.find_spec("py4j", rest) is None:
        drop = [e for e in drop if not os.path.basename(e).startswith("py4j")]
    sys.path[:] = [e for e in sys.path if e not in drop]
    for entry in drop:
        sys.path_importer_cache.pop(entry, None)
    return drop


def preload() -> None:
    import importlib

    for name in task_modules(os.environ):
        importlib.import_module(name)


def main() -> None:
    use_installed_pyspark()
    preload()
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
