"""What every system of ``ingest bench --peers`` is given and must answer.

A *peer* is one way to move the same Kafka topic into a lakehouse table: this pipeline, the
Spark Structured Streaming glue users write (Spark's Kafka source into Iceberg's or Hudi's
streaming sink), Iceberg's Kafka Connect sink, the raw consumer. The harness
(:mod:`lab.peers.runner`) treats them alike: it calls :meth:`PeerSystem.prepare`
outside the meter (fetch jars, assemble a plugin directory), launches
:meth:`PeerSystem.launch`'s command in a cgroup of its own (:mod:`lab.peers.meter`),
watches :meth:`PeerSystem.progress` until the table holds what was produced, stops it, and
counts the table's (topic, partition, offset) triples with one checker for all systems.

Invariants a system must keep so the comparison is fair:
* it reads ``job.topic`` from the earliest offset, every partition, with ``read_committed``;
* its table carries the Kafka coordinates of every row (``COORDS`` below), taken from the
  record itself, so missing and duplicated records can be counted;
* everything it writes lives under ``job.work`` (checkpoints, warehouse, catalog, logs), so a
  run never sees another's state, and a fault drill can delete exactly its checkpoint;
* its process tree is what ``launch`` starts: nothing it needs keeps running elsewhere (the
  broker is the one shared part, measured apart).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pyarrow as pa

#: The coordinate columns every peer's rows are read back as (names as here, whatever the
#: system calls them in its table): topic string, partition int32, offset int64,
#: the record's Kafka timestamp (ms) and the commit time of the snapshot / instant that
#: made the row visible (ms, for freshness; null where the format cannot tell).
COORDS = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("kafka_ts_ms", pa.int64()),
        pa.field("commit_ts_ms", pa.int64()),
    ]
)


@dataclass(frozen=True)
class PeerJob:
    """One run of one system: the same for every system of a bench run."""

    bootstrap: str
    topic: str
    partitions: int
    payload: bool  # the ~1.2 KB events (generator's ``payload`` field) or the ~270 B ones
    work: Path  # this run's own directory; the system writes nothing outside it
    #: records per micro-batch (Spark: ``maxOffsetsPerTrigger``; Connect: its poll size),
    #: None: all available
    max_records_per_trigger: int | None = 200_000
    #: ``available-now`` (read what is there, then stop or idle) or a processing-time
    #: interval such as ``1 second`` (freshness runs; Connect: its commit interval)
    trigger: str = "available-now"
    cores: int = 2  # executor cores (Spark ``local[N]``; Connect: ``tasks.max``)
    #: many tables from one job: every one of these topics (``partitions`` each) into a
    #: table of its own, ``topic`` being the first; empty: ``topic`` into the one table.
    #: Only systems that route by topic take it (Iceberg's Kafka Connect sink).
    topics: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.topics and self.topic != self.topics[0]:
            raise ValueError(f"topic {self.topic!r} is not the first of topics {self.topics}")
        if len(set(self.topics)) != len(self.topics):
            raise ValueError(f"a topic appears twice in {self.topics}")

    @property
    def all_topics(self) -> tuple[str, ...]:
        """Every topic the job reads (one unless ``topics`` is given)."""
        return self.topics or (self.topic,)


@dataclass(frozen=True)
class Launch:
    """The process a system runs as: the harness starts it in its own cgroup."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to a clean base environment
    cwd: Path | None = None
    log: Path | None = None  # where its stdout and stderr go


@dataclass(frozen=True)
class Progress:
    """What the table shows now, read through the format's own metadata (cheap; no scan)."""

    records: int  # rows committed and visible
    commits: int  # snapshots / completed instants / Connect commits carrying data
    data_files: int
    data_bytes: int
    first_commit_ms: int | None = None  # wall clock of the first data commit


class PeerSystem(Protocol):
    """One system of the comparison (a thin adapter: the harness does the rest)."""

    #: short stable name used in the report: ``ingest-iceberg``, ``spark-iceberg-sink``,
    #: ``spark-hudi-sink``, ``iceberg-kafka-connect``, ``raw-consumer`` …
    name: str

    def describe(self) -> dict[str, str]:
        """How it is configured (versions, jars, trigger / commit interval): for the report."""
        ...

    def prepare(self, job: PeerJob) -> None:
        """One-time set-up outside the meter: jars, plugin directories, the empty table.
        Raises :class:`~pipeline.errors.PipelineError` with a one-line reason."""
        ...

    def launch(self, job: PeerJob) -> Launch:
        """The command that ingests ``job.topic`` into the table under ``job.work``.
        Called again for every restart of a fault drill (same job, same state)."""
        ...

    def progress(self, job: PeerJob) -> Progress:
        """A fresh read of the table's metadata (never cached)."""
        ...

    def rows(self, job: PeerJob) -> pa.Table:
        """Every row's coordinates as :data:`COORDS`, read with the format's own reader."""
        ...

    def lose_checkpoint(self, job: PeerJob) -> str:
        """Delete what the system resumes from besides its table (a streaming checkpoint
        directory; a Connect sink's consumer group offsets), never the table; say what."""
        ...

    def data_dir(self, job: PeerJob) -> Path:
        """Where its data files land (searched for ``*.parquet``, written or committed)."""
        ...


def delete_tree(path: Path) -> str:
    """:meth:`PeerSystem.lose_checkpoint` of a system whose checkpoint is a directory."""
    shutil.rmtree(path, ignore_errors=True)
    return f"deleted {path}"


def parquet_files(root: Path) -> int:
    """Data files under ``root``, committed or not (metadata directories hold none)."""
    return sum(1 for _ in root.rglob("*.parquet")) if root.exists() else 0
