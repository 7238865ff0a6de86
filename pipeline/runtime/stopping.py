"""Graceful stop (``request_stop``: SIGTERM/SIGINT through the CLI).

The batch in progress finishes its commit (for at most ``run.stopTimeoutSeconds``), then
the query stops between batches. A gate decides, under one lock, whether a batch may
start (``enter_batch``) and whether the query may be stopped now (no batch inside):
a batch Spark plans in the moment the query is being stopped writes nothing and fails
from ``foreachBatch`` (:class:`HaltedBatch`), so Spark never logs it as committed; the run
loop takes that failure for the stop it is.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pipeline.errors import PipelineError
from pipeline.runtime.stats import RunStats

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

STOP_POLL_S = 0.1  # how often a stopping driver looks whether the batch has finished
HALTED_MARK = "[ingest:halted]"  # in the error a halted batch raises from foreachBatch


class HaltedBatch(PipelineError):
    """Raised from ``foreachBatch`` for a batch planned while the query is being stopped:
    Spark then cannot log it as committed (docs/design.md, facts: the commit log)."""

    code = "halted"


class StopControl:
    def __init__(self, stats: RunStats, timeout_s: float) -> None:
        self.stats = stats
        self.timeout_s = timeout_s
        self.requested_at: float | None = None  # set by a signal handler: a flag only
        self.query: StreamingQuery | None = None  # the running streaming query
        self._gate = threading.Lock()  # guards _in_batch and _halting
        self._in_batch = False  # a batch is inside process_batch
        self._halting = False  # query.stop() is being issued: no batch may start now
        self._halted_batch: int | None = None  # a batch refused while halting

    def request(self) -> None:
        """Only sets a flag: safe in a signal handler and from any thread; idempotent."""
        if self.requested_at is None:
            self.requested_at = time.monotonic()

    @property
    def requested(self) -> bool:
        return self.requested_at is not None

    def enter_batch(self) -> bool:
        """A batch starts; False: the query is being stopped, the batch must not run."""
        with self._gate:
            if self._halting:
                return False
            self._in_batch = True
            return True

    def leave_batch(self) -> None:
        with self._gate:
            self._in_batch = False

    def halted(self, batch_id: int) -> HaltedBatch:
        """Spark planned this batch in the moment a graceful stop decided to stop the
        query (no batch was running). Nothing of it is written (no journal entry); the
        caller raises the returned error from ``foreachBatch``. Spark writes a batch to its
        commit log only after ``foreachBatch`` returned, so a raised batch is never logged
        as done -- whatever ``query.stop()`` does meanwhile, with no wait or sleep -- and the
        next run replays it from the offset log. The run loop recognises the error
        (:meth:`is_halt`) and ends cleanly."""
        self._halted_batch = batch_id
        log.info("batch %d was planned as the query stopped: the next run processes it", batch_id)
        return HaltedBatch(f"batch {batch_id} planned while stopping: not run")

    def is_halt(self, exc: BaseException) -> bool:
        """Whether the query ended with :meth:`halted`'s error (seen through Py4J: the
        text survives, the type does not)."""
        return self._halted_batch is not None and HALTED_MARK in str(exc)

    def stop_between_batches(self, query: StreamingQuery, keep_lease: Callable[[], None]) -> None:
        """Wait (bounded) until no batch is in ``process_batch``, then stop the query while
        none can start. Past the timeout the batch is left running and ``stop_cut_short``
        is set: the caller ends the process; the next run recovers the batch's instant."""
        assert self.requested_at is not None
        deadline = self.requested_at + self.timeout_s
        with self.stats.lock:
            self.stats.stop_requested = True
        announced = False
        while True:
            with self._gate:
                if not self._in_batch:
                    self._halting = True
                    break
            if not query.isActive:
                return  # the batch failed (or the query ended): run() reports it
            if time.monotonic() >= deadline:
                with self.stats.lock:
                    self.stats.stop_cut_short = True
                log.warning(
                    "stop: the batch in progress did not commit within run.stopTimeoutSeconds"
                    " (%g s); stopping without it (the next run recovers it)",
                    self.timeout_s,
                )
                return
            keep_lease()  # the batch may commit: this replica still writes
            if not announced:
                announced = True
                log.info(
                    "stop requested: letting the batch in progress commit (at most %g s)",
                    self.timeout_s,
                )
            time.sleep(STOP_POLL_S)
        log.info("stop requested: stopping the query between batches")
        query.stop()
