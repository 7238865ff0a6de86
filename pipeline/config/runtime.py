"""``trigger``, ``spark``, ``commit``, ``metrics``, ``run``, ``ha`` and ``maintenance``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from pipeline.commit.continuity import OnGap, OnOverlap
from pipeline.config.base import Seconds, _Model
from pipeline.durations import normalize_duration


class TriggerConfig(_Model):
    mode: Literal["processing-time", "available-now", "once"] = "processing-time"
    interval: str = "10 seconds"

    @field_validator("interval")
    @classmethod
    def _interval(cls, v: str) -> str:
        return normalize_duration("trigger.interval", v)


class SparkConfig(_Model):
    master: str | None = None  # None: whatever spark-submit set, else local[*]
    app_name: str = "kafka-lakehouse-ingest"
    conf: dict[str, str] = Field(default_factory=dict)
    # the driver JVM maps its classes from a class-data-sharing archive made by an earlier
    # start (pipeline/spark/class_archive.py): a start spends less time and CPU loading them
    class_archive: bool = True
    # the driver JVM's JIT where the pipeline starts it: c1 (-XX:TieredStopAtLevel=1, less
    # CPU over a run's first minutes: docs/bench.md, "The driver JVM's JIT") or tiered (the
    # JVM's default, C1 then C2)
    driver_jit: Literal["c1", "tiered"] = "c1"


class CommitConfig(_Model):
    """The commit protocol (docs/design.md invariants 3-7)."""

    mode: Literal["exactly-once", "at-least-once"] = "exactly-once"
    # records at offsets the table already holds (checkpoint behind the table)
    on_overlap: OnOverlap = "drop"
    # a batch starting above the table's committed offsets (table rolled back, checkpoint
    # from elsewhere): refuse, or re-read from the table's offsets (docs/design.md inv. 8)
    on_gap: OnGap = "fail"
    # fault injection for tests and drills: "<point>:<kill|raise>[@batch],…"
    faults: str | None = None
    # finished journal entries kept for inspection
    journal_retention: int = Field(default=100, ge=1)  # >= 1: instant times never reused
    # how long a commit or table load waits for an unreachable catalog before failing
    catalog_retry_seconds: float = Field(default=120.0, ge=0)
    # several main tables (sink.routes): how many of their commits run at once
    table_commit_threads: int = Field(default=8, ge=1, le=64)


class MetricsConfig(_Model):
    """Prometheus exporter and health endpoints on the driver."""

    enabled: bool = True
    host: str = "0.0.0.0"
    port: int = Field(default=9108, ge=0, le=65535)  # 0: pick a free port (tests)
    lag_refresh_seconds: float = Field(default=15.0, gt=0)


class RunConfig(_Model):
    """How ``ingest run`` stops (docs/deploy.md, "Stopping")."""

    # On SIGTERM/SIGINT the batch in progress may finish its commit for this long before
    # the query stops anyway (the next run recovers it). Keep it below the pod's
    # terminationGracePeriodSeconds (Kubernetes' default: 30 s).
    stop_timeout_seconds: float = Field(default=25.0, ge=0)


class HaConfig(_Model):
    """Warm standby (``pipeline/commit/lease.py``): which replica writes."""

    # off: one replica, no lease written (each renewal is a journal write: on S3 three
    # requests a second nobody needs without a standby); active: take the lease at once
    # (fences a live writer, as any restart does); standby: wait until a lease has not
    # been renewed for lease_seconds; auto: active when no live lease exists, else standby
    # (two identical replicas just work)
    mode: Literal["off", "active", "standby", "auto"] = "off"
    renew_seconds: float = Field(default=1.0, gt=0)
    lease_seconds: float = Field(default=3.0, gt=0)
    # The active's liveness port: standbys hold a connection to it and take over the
    # moment it closes (a killed process's sockets close at once), not after
    # lease_seconds. 0: any free port (its address is published in the lease's claim);
    # set one when a network policy must allow it. Advertised host: INGEST_ADVERTISE_HOST,
    # else spark.driver.host, else this host's address.
    port: int = Field(default=0, ge=0, le=65535)

    @model_validator(mode="after")
    def _lease_outlives_renewals(self) -> HaConfig:
        if self.lease_seconds < 2 * self.renew_seconds:
            raise ValueError(
                f"leaseSeconds ({self.lease_seconds:g}) must be at least twice "
                f"renewSeconds ({self.renew_seconds:g}): one late renewal must not "
                "hand the lease to a standby"
            )
        return self


class CompactionConfig(_Model):
    """Background compaction of small data files (docs/maintenance.md)."""

    enabled: bool = False
    # files below 75 % of this are rewritten into files of about this size;
    # default: sink.targetFileSizeBytes
    target_file_size_bytes: int | None = Field(default=None, ge=1024)
    min_input_files: int = Field(default=5, ge=2)  # per table partition
    interval: Seconds = 300.0


class OrphanCleanupConfig(_Model):
    """Background removal of data files no commit references (docs/maintenance.md)."""

    enabled: bool = False
    # only files unreferenced AND older than this go: never below commit.catalogRetrySeconds
    older_than: Seconds = 3600.0
    interval: Seconds = 3600.0


class MaintenanceConfig(_Model):
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)
    orphans: OrphanCleanupConfig = Field(default_factory=OrphanCleanupConfig)
    # live data files and their average size, for the metrics (0: not measured)
    file_stats_interval: Seconds = 60.0
