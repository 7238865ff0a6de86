"""PySpark's worker daemon with the task path imported once, before it forks workers.

Spark starts one daemon per executor (``python -m <spark.python.daemon.module>``) and forks
each Python worker from it. PySpark's own daemon imports nothing of ours, so every new
worker imports pyarrow, pyiceberg, confluent-kafka and the pipeline's task modules itself
(~0.5 CPU-s each, measured on the 2-core host) -- part of why a run's first batch costs
many times a steady one. Imported here, the forked workers inherit them, and share their
pages with the daemon.

Nothing here starts a thread or opens a connection: the imports are the modules' own
top-level code, as PySpark's daemon requires of anything loaded before it forks.
``spark.python.daemon.module`` names this module: ``pipeline.spark.session`` sets it by
default on local masters (:func:`daemon_conf`); given settings win.
"""

from __future__ import annotations

#: what a task imports (the decode, the Kafka reader and the staged-file writer)
TASK_MODULES = ("pipeline.decode.arrow", "pipeline.source.reader", "pipeline.spark.writer")


def daemon_conf(master: str) -> dict[str, str]:
    """This daemon for a session on ``master`` when its workers run the driver's own
    Python (``local``), which imports the package; a cluster's executors may lack it, so
    they keep PySpark's daemon unless their own configuration names this one."""
    return {"spark.python.daemon.module": __name__} if master.startswith("local") else {}


def preload() -> None:
    import importlib

    for name in TASK_MODULES:
        importlib.import_module(name)


def main() -> None:
    preload()
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
