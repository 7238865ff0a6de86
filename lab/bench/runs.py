"""Pipeline configurations the benchmark runs, and the measurements taken from a run.

Every run gets its own work directory (warehouse / Hudi base path, checkpoint, logs) so
runs never share a table, a journal or a catalog file. Tables are unpartitioned, like the
raw ceiling's single Parquet stream. Metrics stay enabled (the production default; the
batch log needs them) on an ephemeral port.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.events import event_schema_fields
from pipeline.formats.registry import format_named

FORMATS = ("iceberg", "hudi")
MODES = ("exactly-once", "at-least-once")


@dataclass(frozen=True)
class RunSpec:
    """One pipeline process: format, commit mode, executor cores, batch size, trigger."""

    format: str = "iceberg"
    mode: str = "exactly-once"
    cores: int = 2
    max_records_per_trigger: int | None = None
    trigger: str = "available-now"  # or a processing-time interval, e.g. "1 second"
    starting_offsets: str | dict[str, dict[str, int]] = "earliest"
    hudi_writer: str = "native"  # sink.hudi.writer of a Hudi run
    hudi_operation: str = "insert"  # sink.hudi.operation of Hudi's own writer

    @property
    def _spark_writer(self) -> bool:
        return self.format == "hudi" and self.hudi_writer != "native"

    @property
    def system(self) -> str:
        """What a report groups runs by: the format, and for Hudi which writer."""
        if self._spark_writer:
            operation = "" if self.hudi_operation == "insert" else f", {self.hudi_operation}"
            return f"hudi ({self.hudi_writer} writer{operation})"
        return self.format

    @property
    def label(self) -> str:
        mode = "eo" if self.mode == "exactly-once" else "alo"
        writer = ""
        if self._spark_writer:
            bulk = (
                ""
                if self.hudi_operation == "insert"
                else f"-{self.hudi_operation.replace('_', '-')}"
            )
            writer = f"-spark-writer{bulk}"
        return f"{self.format}{writer}-{mode}-{self.cores}c"


def pipeline_config(
    spec: RunSpec, name: str, workdir: Path, bootstrap: str, topic: str, payload: bool = False
) -> dict[str, Any]:
    """The YAML mapping for one run (camelCase keys as ``ingest run`` reads them);
    ``payload``: the events carry the generator's ``payload`` field (in the schema)."""
    sink: dict[str, Any] = {
        "format": spec.format,
        "catalog": {"warehouse": str(workdir / "warehouse")},
        "table": f"bench.run_{name.replace('-', '_')}",
    }
    sink.update(format_named(spec.format).local_sink(workdir))
    if spec.format == "hudi" and spec.hudi_writer != "native":
        sink["hudi"].update(writer=spec.hudi_writer, operation=spec.hudi_operation)
    source: dict[str, Any] = {
        "bootstrapServers": bootstrap,
        "topics": [topic],
        "startingOffsets": spec.starting_offsets,
    }
    if spec.max_records_per_trigger:
        source["maxRecordsPerTrigger"] = spec.max_records_per_trigger
    trigger: dict[str, Any] = (
        {"mode": "available-now"}
        if spec.trigger == "available-now"
        else {"mode": "processing-time", "interval": spec.trigger}
    )
    return {
        "id": f"bench-{name}",
        "source": source,
        "decode": {"schema": event_schema_fields(payload=payload)},
        "sink": sink,
        "checkpointLocation": str(workdir / "checkpoint"),
        "trigger": trigger,
        "spark": {
            "master": f"local[{spec.cores}]",
            "conf": {"spark.sql.shuffle.partitions": str(spec.cores)},
        },
        "metrics": {"enabled": True, "host": "127.0.0.1", "port": 0},
        "commit": {"mode": spec.mode},
    }
