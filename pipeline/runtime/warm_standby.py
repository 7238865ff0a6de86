"""The standby lease of a replica (``ha.mode`` not off; :mod:`pipeline.standby`).

Before the query starts the replica owns the lease (``active``), or warms up -- the Spark
session, Python workers, a rehearsal of the query on a private checkpoint, the table --
and waits until the lease is free, expired or its holder gone (``standby``, ``auto``).
The run loop renews it; the run releases it on the way out.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING

from pipeline.commit.journal import InstantTimeline
from pipeline.config import PipelineConfig
from pipeline.runtime.fencing import FenceGuard
from pipeline.runtime.source_settings import SourceSettings
from pipeline.runtime.stopping import StopControl
from pipeline.runtime.streams import start_stream

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipeline.observe.metrics import PipelineMetrics
    from pipeline.standby import Standby

log = logging.getLogger(__name__)


def _read_all(df: DataFrame, _batch_id: int) -> None:
    df.count()


class LeaseHolder:
    def __init__(
        self,
        cfg: PipelineConfig,
        *,
        timeline: InstantTimeline | None,
        spark: Callable[[], SparkSession],
        source: SourceSettings,
        open_table: Callable[[], object],
        stop: StopControl,
        fence: FenceGuard,
    ) -> None:
        self.cfg = cfg
        self.timeline = timeline
        self._spark = spark
        self.source = source
        self._open_table = open_table
        self.stop = stop
        self.fence = fence
        self.lease: Standby | None = None

    def acquire(self, metrics: PipelineMetrics | None = None) -> bool:
        """Own the lease before the query starts (at once with ``ha.mode`` off). False: a
        stop was requested while standing by."""
        if self.cfg.ha.mode == "off" or self.timeline is None:
            return True
        from pipeline.standby import Standby
        from pipeline.standby.liveness import advertised_host

        host = advertised_host(dict(self.cfg.spark.conf))
        self.lease = Standby(self.cfg.ha, self.timeline.store, host)
        if metrics is not None:
            metrics.watch_standby(self.lease.status)  # a warm standby is ready
        return self.lease.acquire(
            self._warm_up, lambda: self.stop.requested, keep_warm=self._keep_warm
        )

    @property
    def warm(self) -> bool:
        """This replica warmed up (its Python workers too) as a standby before it took the
        lease; one that took it at once, or outwaited a dead holder, did not."""
        return self.lease is not None and self.lease.warm

    def keep(self) -> None:
        """Renew the lease; ``LeaseLostError`` (a fence) when another replica took over."""
        if self.lease is not None:
            with self.fence.watch():
                self.lease.keep()

    def release(self) -> None:
        """A standby need not wait for the lease to expire."""
        if self.lease is not None:
            self.lease.release()

    def _warm_up(self) -> None:
        from pipeline.spark.session import warm_up

        warm_up(self._spark())
        try:
            for step in (self._rehearse, self._open_table):  # the catalog and table
                if self.stop.requested:  # SIGTERM while warming up
                    return
                step()
        except Exception as e:  # the take-over reports it if it persists
            log.warning("standby: warming up failed (%s); still standing by", e)

    def _keep_warm(self) -> None:
        """The Python workers again (Spark stops idle ones after a minute)."""
        from pipeline.spark.session import warm_up

        try:
            warm_up(self._spark())
        except Exception as e:  # the take-over reports it if it persists
            log.warning("standby: keeping warm failed (%s); still standing by", e)

    def _rehearse(self) -> None:
        """Run the query's path once on a private checkpoint, reading nothing: a JVM's
        first streaming query starts slower than its next (classes, the source's planner
        worker, the foreachBatch callback server; docs/bench.md has the figure); a take-over
        should not pay it."""
        checkpoint = tempfile.mkdtemp(prefix="ingest-rehearsal-")
        try:
            query = start_stream(
                self._spark(),
                self.source.reader.format,
                self.source.rehearsal_options(),
                _read_all,
                checkpoint=f"file://{checkpoint}",  # never fs.defaultFS
                name=f"ingest-{self.cfg.id}-rehearsal",
                trigger={"availableNow": True},
            )
            query.awaitTermination()
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)
