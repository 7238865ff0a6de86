"""This pipeline and the raw consumer as peers of the comparison.

* :class:`IngestPeer` — ``ingest run`` (``python -m pipeline run``) into Iceberg or Hudi,
  exactly-once, with the bench's own run configuration (:func:`pipeline_config`: the same
  one ``ingest bench`` measures), ``source.reader`` as given.
* :class:`RawPeer` — the raw single-process consumer of ``ingest bench``
  (:mod:`lab.bench.raw`): the floor, not a lakehouse. It commits nothing, so its
  progress is zero until it exits; its rows are read from its one Parquet file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lab.bench.driver import write_config
from lab.bench.runs import RunSpec, pipeline_config
from lab.peers import hudi_read, iceberg_read
from lab.peers.coords import PIPELINE, to_coords
from lab.peers.model import Launch, PeerJob, Progress, delete_tree
from pipeline.config import PipelineConfig, load_config


class IngestPeer:
    """``ingest run`` into ``table_format`` with ``reader`` (``python`` / ``spark``); with
    ``hudi_writer="spark"`` Hudi's own Spark writer, on the PySpark line its bundle is
    served for (that line's environment, ``scripts/spark-line-env.sh``; Spark's Kafka
    source there)."""

    def __init__(
        self, table_format: str = "iceberg", reader: str = "python", hudi_writer: str = "native"
    ) -> None:
        self.format = table_format
        self.hudi_writer = hudi_writer
        self.reader = "spark" if hudi_writer == "spark" else reader
        self.name = f"ingest-{table_format}" + ("" if reader == "python" else f"-{reader}-reader")
        if hudi_writer == "spark":
            self.name = "ingest-hudi-spark-writer"

    def describe(self) -> dict[str, str]:
        return {
            "what": f"this pipeline (`ingest run`), {self.format}, exactly-once",
            "source.reader": self.reader,
            "sink.hudi.writer": self.hudi_writer if self.format == "hudi" else "—",
            "spark": f"PySpark {self._spark_line() or 'of the project environment'}",
            "config": "ingest bench's run configuration (lab/bench/runs.py)",
        }

    def _spark_line(self) -> str | None:
        """Hudi's Spark writer runs where Hudi's peer sink runs: PySpark 3.5."""
        from lab.peers.spark_sinks import SparkHudiSink

        return SparkHudiSink.spark_version if self.hudi_writer == "spark" else None

    def _python(self) -> str:
        line = self._spark_line()
        if line is None:
            return sys.executable
        from lab.peers.spark_sinks import spark_line_python

        return spark_line_python(line)

    def _config_path(self, job: PeerJob) -> Path:
        return job.work / "pipeline.yaml"

    def _config(self, job: PeerJob) -> dict[str, Any]:
        spec = RunSpec(
            format=self.format,
            cores=job.cores,
            max_records_per_trigger=job.max_records_per_trigger,
            trigger=job.trigger,
            hudi_writer=self.hudi_writer,
        )
        cfg = pipeline_config(spec, "peer", job.work, job.bootstrap, job.topic, job.payload)
        cfg["source"]["reader"] = self.reader
        return cfg

    def prepare(self, job: PeerJob) -> None:
        job.work.mkdir(parents=True, exist_ok=True)
        write_config(self._config_path(job), self._config(job))
        self._python()  # a Spark line's environment is built here, outside the meter

    def launch(self, job: PeerJob) -> Launch:
        return Launch(
            argv=[self._python(), "-m", "pipeline", "run", "--config", str(self._config_path(job))],
            cwd=job.work,
            log=job.work / "ingest.log",
        )

    def _cfg(self, job: PeerJob) -> PipelineConfig:
        return load_config(self._config_path(job))

    def _iceberg(self, job: PeerJob) -> Any:
        from pipeline.formats.iceberg.pipeline_tables import IcebergTables

        return IcebergTables.from_config(self._cfg(job)).main.table()

    def progress(self, job: PeerJob) -> Progress:
        if self.format == "iceberg":
            return iceberg_read.table_progress(self._iceberg(job))
        return hudi_read.progress(_hudi_base(self._cfg(job)))

    def lose_checkpoint(self, job: PeerJob) -> str:
        return delete_tree(job.work / "checkpoint")

    def data_dir(self, job: PeerJob) -> Path:
        return job.work / ("warehouse" if self.format == "iceberg" else "hudi")

    def rows(self, job: PeerJob) -> pa.Table:
        if self.format == "iceberg":
            return iceberg_read.table_rows(self._iceberg(job), PIPELINE)
        return hudi_read.rows(_hudi_base(self._cfg(job)), PIPELINE)


def _hudi_base(cfg: PipelineConfig) -> Path:
    assert cfg.sink.hudi is not None  # a Hudi run's config always has its base path
    return Path(str(cfg.sink.hudi.base_path))


class RawPeer:
    """The raw consumer: one confluent-kafka process into one zstd Parquet file."""

    name = "raw-consumer"

    def describe(self) -> dict[str, str]:
        return {
            "what": "one confluent-kafka consumer process, assign(), Arrow JSON decode, "
            "one zstd Parquet file (lab/bench/raw.py); no table, no commit"
        }

    def _out(self, job: PeerJob) -> Path:
        return job.work / "raw.parquet"

    def prepare(self, job: PeerJob) -> None:
        job.work.mkdir(parents=True, exist_ok=True)

    def launch(self, job: PeerJob) -> Launch:
        argv = [sys.executable, "-m", "lab.bench.raw", "--bootstrap", job.bootstrap]
        argv += ["--topic", job.topic, "--partitions", str(job.partitions)]
        argv += ["--out", str(self._out(job))] + (["--payload"] if job.payload else [])
        return Launch(argv=argv, cwd=job.work, log=job.work / "raw.log")

    def progress(self, job: PeerJob) -> Progress:
        result = self._result(job)
        if result is None:
            return Progress(records=0, commits=0, data_files=0, data_bytes=0)
        return Progress(result["records"], 1, 1, int(result["parquet_bytes"]))

    def _result(self, job: PeerJob) -> dict[str, Any] | None:
        log = job.work / "raw.log"
        if not log.exists():
            return None
        for line in log.read_text().splitlines():
            if line.startswith("{"):
                return dict(json.loads(line))
        return None

    def lose_checkpoint(self, job: PeerJob) -> str:
        return "nothing: it keeps no state between runs"

    def data_dir(self, job: PeerJob) -> Path:
        return job.work

    def rows(self, job: PeerJob) -> pa.Table:
        return to_coords(pq.read_table(self._out(job), columns=list(PIPELINE)), PIPELINE)
