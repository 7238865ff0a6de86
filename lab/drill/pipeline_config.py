"""The pipeline config a drill runs (``drill_config``): a 1 s processing-time trigger,
metrics on a free port, Spark ``local[N,4]`` (``DrillSpec.local_cores``) or a standalone
cluster's master (``cluster_spark``), tables on local files or an S3 server, and
background compaction (``compactions.DRILL_COMPACTION``) and orphan cleanup with a short
safety interval (``compactions.DRILL_ORPHANS``) for the kill, zombie and standby drills."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lab.drill import compactions
from lab.drill.model import DrillSpec
from lab.objectstore import S3Server

TRIGGER = "1 second"


def routes_by_topic(topics: Sequence[str], own: Sequence[str] | None = None) -> dict[str, Any]:
    """``sink.routes`` of a routed drill: each topic of ``own`` (default: all but the
    first) to a table of its own, ``drill.tNN`` by its place in ``topics``; the others to
    ``sink.table``."""
    chosen = topics[1:] if own is None else own
    return {
        "by": "topic",
        "tables": {t: f"drill.t{i:02d}" for i, t in enumerate(topics) if t in chosen},
    }


def drill_config(
    spec: DrillSpec,
    workdir: Path,
    bootstrap: str,
    topic: str | Sequence[str],
    catalog: dict[str, Any] | None,
    master: str | None = None,
    s3: S3Server | None = None,
    registry_url: str | None = None,
) -> dict[str, Any]:
    """Pipeline config of a drill: 1 s processing-time trigger, metrics on a free port;
    ``master``: a standalone cluster's URL (else local[N,4]); ``s3``: tables in a new
    bucket of that server; ``registry_url``: the topic carries Avro through that Schema
    Registry (``decode.format: avro``, the subject's latest version); several topics: a
    routed set (:func:`routes_by_topic`). The kill, zombie and
    standby drills run with background compaction (:data:`compactions.DRILL_COMPACTION`)
    and background orphan cleanup (:data:`compactions.DRILL_ORPHANS`)."""
    from lab.events import event_schema_fields

    sink: dict[str, Any] = {"table": "drill.events", "format": spec.table_format}
    lake = f"s3://{s3.new_bucket('drill')}" if s3 is not None else str(workdir)
    if spec.table_format in ("hudi", "both"):
        sink["hudi"] = {"basePath": f"{lake}/hudi/events"}
        if spec.table_format == "hudi" and spec.hudi_writer != "native":
            sink["hudi"]["writer"] = spec.hudi_writer
        if s3 is not None:
            sink["hudi"]["properties"] = s3.properties()
    if spec.table_format in ("iceberg", "both"):
        sink["catalog"] = catalog or {"warehouse": f"{lake}/warehouse"}
        if s3 is not None:  # the SQLite catalog file stays local, the warehouse on S3
            sink["catalog"] = {
                **sink["catalog"],
                "uri": sink["catalog"].get("uri", f"sqlite:///{workdir}/catalog.db"),
                "properties": {**sink["catalog"].get("properties", {}), **s3.properties()},
            }
        sink["partitionBy"] = ["day(ts)"]
    topics = [topic] if isinstance(topic, str) else list(topic)
    if len(topics) > 1:
        sink["routes"] = routes_by_topic(topics)
    config: dict[str, Any] = {
        "id": f"drill-{spec.scenario}",
        "source": {"bootstrapServers": bootstrap, "topics": topics, "reader": spec.reader},
        "decode": (
            {"format": "json", "schema": event_schema_fields()}
            if registry_url is None
            else {"format": "avro", "registry": {"url": registry_url}}
        ),
        "sink": sink,
        "checkpointLocation": str(workdir / "checkpoint"),
        "trigger": {"mode": "processing-time", "interval": TRIGGER},
        # local[N,4]: task failures are retried (4 attempts), as on a cluster
        "spark": (
            {"master": f"local[{spec.local_cores},4]"}
            if master is None
            else cluster_spark(master, workdir)
        ),
        "metrics": {"enabled": True, "port": 0},
    }
    maintenance: dict[str, Any] = {}
    if spec.scenario in compactions.COMPACTION_SCENARIOS and spec.own_maintenance:
        maintenance["compaction"] = dict(compactions.DRILL_COMPACTION)
    if spec.scenario in compactions.ORPHAN_SCENARIOS and spec.own_maintenance:
        maintenance["orphans"] = dict(compactions.DRILL_ORPHANS)
        config["commit"] = {"catalogRetrySeconds": compactions.DRILL_CATALOG_RETRY_S}
    if maintenance:
        config["maintenance"] = maintenance
    return config


def cluster_spark(master: str, workdir: Path) -> dict[str, Any]:
    """The ``spark`` section for a drill on the standalone cluster."""
    events = workdir / "spark-events"  # the driver's event log: task attempts lost, retried
    events.mkdir(parents=True, exist_ok=True)
    return {
        "master": master,
        "conf": {
            "spark.driver.host": "127.0.0.1",
            "spark.executor.memory": "512m",
            # a batch waits (≤ 30 s) for both executors: one task on each
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            # Spark's default (INFO) executor log: "Running task …" / "Finished task …"
            # tell the executor-loss drill which executor runs a task right now
            "spark.executor.extraJavaOptions": "-Dingest.drill=1",
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": events.as_uri(),
            "spark.eventLog.compress": "false",
        },
    }
