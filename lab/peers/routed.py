"""This pipeline reading many topics into a table each (``sink.routes`` by topic), as a
system the peers harness runs and measures: the ``tables`` bench section's subject.

:class:`RoutedIngestPeer` is ``ingest run`` with the bench's own run configuration
(:func:`~lab.bench.runs.pipeline_config`), reading ``topics`` and, when there are several,
routing each topic's records to ``bench.t_<topic>`` (``sink.routes.template``);
``sink.table`` is the first topic's table, so the set holds one table per topic and no
other. With one topic and ``routed=False`` it is the one-table baseline of the same
configuration.

Progress is read from the pipeline's own batch log while it runs, and from the tables
once the log says every record is in: the harness asks every 0.2 s, and loading twenty
tables through the catalog that often would take a share of the two cores the measured
process runs on. The count the report keeps is the tables' (:meth:`table_rows`), never
the log's.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from lab.bench.driver import BATCH_LOG_MARK, BatchLine, write_config
from lab.bench.runs import RunSpec, pipeline_config
from lab.peers import iceberg_read
from lab.peers.coords import PIPELINE
from lab.peers.model import Launch, PeerJob, Progress, delete_tree
from pipeline.config import PipelineConfig, load_config
from pipeline.config.routes import table_for_topic
from pipeline.errors import PipelineError

#: the routed table of every topic
TEMPLATE = "bench.t_{topic}"
#: the line an Iceberg table's commit logs (pipeline/formats/iceberg/catalog_table.py)
_TABLE_COMMIT = re.compile(
    r"commit of batch (?P<batch>\d+) \([^)]*\): (?P<files>\d+) files, \d+ records in "
    r"(?P<table>\S+) as snapshot \S+ \((?P<seconds>[\d.]+)s\)"
)


@dataclass(frozen=True)
class TableCommit:
    """One table's commit of one batch, as the pipeline logged it: wall seconds of the
    table's own commit (beside the set's other tables, on the commit threads)."""

    batch_id: int
    table: str
    files: int  # 0: an idle table's metadata-only commit
    seconds: float


class RoutedIngestPeer:
    """``ingest run`` over ``topics`` into a table per topic (``routed``), Iceberg,
    exactly-once, the default Arrow decode engine. ``expected`` is the records the topics
    hold (from their watermarks): the log is trusted for progress only below it."""

    def __init__(
        self,
        topics: Sequence[str],
        expected: int,
        table_format: str = "iceberg",
        routed: bool = True,
        name: str = "ingest-iceberg-tables",
    ) -> None:
        if not topics:
            raise ValueError("no topics to read")
        if not routed and len(topics) > 1:
            raise ValueError("several topics into one table: not what this peer measures")
        if table_format != "iceberg":
            raise PipelineError(f"routed {table_format} tables: not measured yet")
        self.topics = tuple(topics)
        self.expected = expected
        self.format = table_format
        self.routed = routed
        self.name = name
        self._log_pos: dict[Path, int] = {}
        self._lines: dict[Path, list[BatchLine]] = {}

    def describe(self) -> dict[str, str]:
        return {
            "what": f"this pipeline (`ingest run`), {self.format}, exactly-once, "
            f"{len(self.topics)} topic(s) into "
            + (
                f"a table each (sink.routes by topic, template {TEMPLATE})"
                if self.routed
                else "one table"
            ),
            "config": "ingest bench's run configuration (lab/bench/runs.py)",
        }

    # -- configuration ---------------------------------------------------------------------
    def table_of(self, topic: str) -> str:
        return table_for_topic(TEMPLATE, topic)

    def _config_path(self, job: PeerJob) -> Path:
        return job.work / "pipeline.yaml"

    def config(self, job: PeerJob) -> dict[str, Any]:
        spec = RunSpec(
            format=self.format,
            cores=job.cores,
            max_records_per_trigger=job.max_records_per_trigger,
            trigger=job.trigger,
        )
        cfg = pipeline_config(spec, "tables", job.work, job.bootstrap, self.topics[0], job.payload)
        cfg["source"]["topics"] = list(self.topics)
        cfg["sink"]["table"] = self.table_of(self.topics[0])
        if self.routed:
            cfg["sink"]["routes"] = {"by": "topic", "template": TEMPLATE}
        return cfg

    def _cfg(self, job: PeerJob) -> PipelineConfig:
        return load_config(self._config_path(job))

    def commit_threads(self, job: PeerJob) -> int:
        """``commit.tableCommitThreads`` of the run (left at its default)."""
        return self._cfg(job).commit.table_commit_threads

    # -- the harness's calls ---------------------------------------------------------------
    def prepare(self, job: PeerJob) -> None:
        job.work.mkdir(parents=True, exist_ok=True)
        write_config(self._config_path(job), self.config(job))

    def launch(self, job: PeerJob) -> Launch:
        import sys

        argv = [sys.executable, "-m", "pipeline", "run", "--config", str(self._config_path(job))]
        return Launch(argv=argv, cwd=job.work, log=self.log_path(job))

    def log_path(self, job: PeerJob) -> Path:
        return job.work / "ingest.log"

    def batches(self, job: PeerJob) -> list[BatchLine]:
        """The batch log lines written so far (read on from where the last call stopped)."""
        path = self.log_path(job)
        lines = self._lines.setdefault(path, [])
        try:
            with open(path, "rb") as f:
                f.seek(self._log_pos.get(path, 0))
                chunk = f.read()
        except FileNotFoundError:
            return lines
        end = chunk.rfind(b"\n") + 1  # a line still being written waits for the next call
        self._log_pos[path] = self._log_pos.get(path, 0) + end
        for raw in chunk[:end].split(b"\n"):
            text = raw.decode("utf-8", "replace")
            i = text.find(BATCH_LOG_MARK)
            if i >= 0:
                with contextlib.suppress(ValueError, KeyError):
                    lines.append(BatchLine.parse(text[i + len(BATCH_LOG_MARK) :]))
        return lines

    def table_commits(self, job: PeerJob) -> list[TableCommit]:
        """Every table commit the pipeline logged (one line per table per batch)."""
        try:
            text = self.log_path(job).read_text(errors="replace")
        except FileNotFoundError:
            return []
        return [
            TableCommit(int(m["batch"]), m["table"], int(m["files"]), float(m["seconds"]))
            for m in _TABLE_COMMIT.finditer(text)
        ]

    def progress(self, job: PeerJob) -> Progress:
        done = [b for b in self.batches(job) if b.outcome in ("committed", "recommitted")]
        logged = sum(b.records for b in done)
        if logged >= self.expected:
            return iceberg_read.combine(
                [iceberg_read.table_progress(t) for t in self.tables(job).values()]
            )
        return Progress(
            records=logged,
            commits=len(done),
            data_files=sum(b.files for b in done),
            data_bytes=sum(b.bytes for b in done),
            first_commit_ms=int(done[0].ts * 1000) if done else None,
        )

    def tables(self, job: PeerJob) -> dict[str, Any]:
        """Table identifier -> the pyiceberg table (None: not created), every main table
        of the set."""
        from pipeline.formats.iceberg.pipeline_tables import IcebergTables

        mains = IcebergTables.from_config(self._cfg(job)).mains()
        return {c.iceberg.name: c.table() for _, c in mains}

    def checkpoint_batches(self, job: PeerJob) -> dict[str, int | None]:
        """Table identifier -> the batch id of its newest checkpoint (every table of a
        routed set commits every batch, an idle one too)."""
        from pipeline.formats.iceberg.pipeline_tables import IcebergTables

        cfg = self._cfg(job)
        out: dict[str, int | None] = {}
        for _, c in IcebergTables.from_config(cfg).mains():
            cp = c.iceberg.latest_checkpoint(cfg.id)
            out[c.iceberg.name] = None if cp is None else cp.batch_id
        return out

    def table_rows(self, job: PeerJob) -> dict[str, pa.Table]:
        """Topic -> the coordinates of every row of that topic's table (a misrouted
        record shows as unexpected there and missing from its own)."""
        tables = self.tables(job)
        return {t: iceberg_read.table_rows(tables[self.table_of(t)], PIPELINE) for t in self.topics}

    def rows(self, job: PeerJob) -> pa.Table:
        return pa.concat_tables(self.table_rows(job).values())

    def lose_checkpoint(self, job: PeerJob) -> str:
        return delete_tree(job.work / "checkpoint")

    def data_dir(self, job: PeerJob) -> Path:
        return job.work / "warehouse"
