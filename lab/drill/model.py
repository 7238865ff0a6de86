"""Named types of a drill: what was asked (``DrillSpec``), what happened (``FaultEvent``,
``Sample``, ``Recovery``), the verdict (``DrillResult``), and the two ways a drill ends
early (``DrillTimeout``: a bounded wait ran out; ``SkipDrill``: it cannot run here).

Invariant: a result is *ok* only when nothing produced is missing or duplicated in the
tables (records lost to retention with ``failOnDataLoss=false`` are counted as ``lost``,
not missing) and every assertion of the scenario held (``problems`` is empty).
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pipeline.errors import PipelineError

TableFormat = Literal["iceberg", "hudi", "both"]  # both: the both table format (dual tables)
Storage = Literal["local", "s3"]
Catalog = Literal["sql", "rest"]  # an Iceberg drill's catalog: SQLite / PostgreSQL, or REST


class DrillTimeout(PipelineError):
    code = "drill-timeout"


class SkipDrill(Exception):
    """The drill cannot run here (reason in the message): reported as skipped."""


@dataclass(frozen=True)
class DrillSpec:
    """One drill to run: a scenario on one table format."""

    scenario: str
    table_format: TableFormat = "iceberg"
    kills: int = 20  # SIGKILLs of the driver (kill), active (standby), a worker (executor-loss)
    # records/second, round-robin over the partitions. The drill's Kafka cluster keeps
    # every record (its topics have Kafka's default retention, 7 days): only the retention
    # drill deletes records, on purpose.
    rate: float = 100.0
    partitions: int = 8
    # the pipeline's Spark on a standalone cluster (lab/cluster.py: a master and
    # two 1-core workers, executors in their own JVMs) instead of local[2,4]
    cluster: bool = False
    # where the tables (and the journal) live: local files, or a SeaweedFS S3 server
    # started for the drill (lab/objectstore.py); the checkpoint stays local
    storage: Storage = "local"
    # the pipeline's source.reader (auto: $INGEST_SOURCE_READER, else the Spark's default)
    reader: str = "auto"
    # sink.hudi.writer of a Hudi drill: native, or spark (Hudi's own writer, PySpark 3.5)
    hudi_writer: str = "native"
    # cores of the local master (local[N,4]) when not on a cluster
    local_cores: int = 2
    # the Iceberg tables' catalog: sql (SQLite, or PostgreSQL for catalog-outage) or rest
    # (lab/rest_catalog: Iceberg's REST server over PostgreSQL, the warehouse on S3)
    catalog: Catalog = "sql"

    @property
    def routed(self) -> RoutedSet | None:
        """The routed set of the drill's topics (None: one topic, one main table)."""
        return ROUTED_SCENARIOS.get(self.scenario)

    @property
    def on_rest(self) -> bool:
        """Iceberg tables through a REST catalog (the drill starts one, and S3 for it)."""
        return self.catalog == "rest" and self.table_format != "hudi"

    @property
    def own_maintenance(self) -> bool:
        """The pipeline's own compaction and orphan cleanup run (the native writers'; Hudi's
        own writer runs Hudi's services instead)."""
        return self.table_format != "hudi" or self.hudi_writer == "native"

    @property
    def label(self) -> str:
        """The scenario's name in reports (``kill@cluster``: the kill drill on a cluster;
        ``zombie@s3``: with the tables on S3; ``kill@spark-reader``: read through Spark's
        Kafka source, ``kill@python-reader`` through ours, when chosen explicitly;
        ``kill@spark-writer``: Hudi's table written by Hudi's own Spark writer;
        ``standby@local1``: Spark's local master with one core; ``kill@rest``: the Iceberg
        tables through a REST catalog, on S3)."""
        name = self.scenario
        if self.cluster and self.scenario not in CLUSTER_ONLY:
            name += "@cluster"
        if self.storage == "s3" and not self.on_rest:
            name += "@s3"
        if self.on_rest:
            name += "@rest"
        if self.hudi_writer != "native" and self.table_format == "hudi":
            name += f"@{self.hudi_writer}-writer"
        if self.local_cores != 2 and not self.cluster:
            name += f"@local{self.local_cores}"
        return name if self.reader == "auto" else f"{name}@{self.reader}-reader"


@dataclass(frozen=True)
class RoutedSet:
    """A routed drill's topics: ``topics`` topics of ``partitions`` partitions each, routed
    by topic (``sink.routes``) to a table each, the first one to ``sink.table``."""

    topics: int
    partitions: int
    late: int = 0  # the last topics: created, then produced to and read only mid-drill


# scenarios on a routed set -> its topics (Iceberg only: the routed Hudi set is not in yet)
ROUTED_SCENARIOS: dict[str, RoutedSet] = {
    "routed-kill": RoutedSet(3, 2),
    "routed-route-change": RoutedSet(3, 2),
    "routed-new-topic": RoutedSet(3, 2, late=1),
    "routed-checkpoint-deleted": RoutedSet(20, 1),
    "routed-zombie": RoutedSet(3, 2),
}
CLUSTER_ONLY = frozenset({"executor-loss"})  # scenarios that need the standalone cluster
# scenarios whose topic carries Avro through a Schema Registry the rig starts
REGISTRY_SCENARIOS = frozenset({"avro-schema-change"})


@dataclass(frozen=True)
class FaultEvent:
    """A fault injected (``kind`` = kill/fault-point/broker-down/…) or a recovery marker."""

    t: float  # seconds since the drill started
    kind: str
    detail: str = ""


@dataclass(frozen=True)
class Sample:
    t: float
    produced: int  # acknowledged by the broker
    committed: int  # sum of the table's committed end offsets (records + dead letters)


@dataclass
class Recovery:
    """A driver (re)start and the first new table commit observed after it."""

    started: float
    first_commit: float | None = None

    @property
    def seconds(self) -> float | None:
        return None if self.first_commit is None else self.first_commit - self.started


@dataclass
class DrillResult:
    scenario: str
    table_format: str
    faults: int = 0
    restarts: int = 0
    produced: int = 0
    committed: int = 0
    missing: int = 0
    duplicated: int = 0
    lost: int = 0  # skipped on purpose (retention, failOnDataLoss=false) and recorded
    recommits: int = 0
    rollbacks: int = 0
    compactions: int | None = None  # compaction commits seen (None: compaction was off)
    recover_s: list[float] = field(default_factory=list)
    duration_s: float = 0.0
    verifier: str = ""  # which check produced missing/duplicated
    skipped: str | None = None  # reason the scenario could not run here
    problems: list[str] = field(default_factory=list)  # failed scenario assertions
    notes: list[str] = field(default_factory=list)
    events: list[FaultEvent] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    # the wall clock (Unix seconds) of the events' t = 0: the drivers' own log lines map
    # onto the drill's clock with it (scripts/restart-phases.py)
    started_at: float = 0.0

    @property
    def ok(self) -> bool:
        return self.skipped is not None or (
            self.missing == 0 and self.duplicated == 0 and not self.problems
        )

    @property
    def verdict(self) -> str:
        if self.skipped is not None:
            return "skipped"
        return "ok" if self.ok else "FAILED"

    @property
    def recover_median(self) -> float | None:
        return statistics.median(self.recover_s) if self.recover_s else None

    @property
    def recover_max(self) -> float | None:
        return max(self.recover_s) if self.recover_s else None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DrillResult:
        """Inverse of :meth:`to_dict` (derived keys are ignored)."""
        known = {f for f in cls.__dataclass_fields__}
        r = cls(**{k: v for k, v in d.items() if k in known})
        r.events = [FaultEvent(**e) for e in d.get("events", [])]
        r.samples = [Sample(**s) for s in d.get("samples", [])]
        return r

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["verdict"] = self.verdict
        d["recover_median_s"] = self.recover_median
        d["recover_max_s"] = self.recover_max
        return d
