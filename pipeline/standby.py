"""Warm standby (``ha.mode``): the lease a replica must hold while it writes.

    off      no lease, nothing written (one replica)
    active   take the lease at once (a live holder stops at its next renewal)
    auto     take it when nobody holds it or its holder stopped renewing, else stand by
    standby  stand by until a lease has not changed for ``ha.leaseSeconds``

A replica that stands by is warm: Spark session, Python workers and the table are up
before it waits, so a take-over starts no process. The lease only decides which replica
tries to write; the writer epoch the query takes on start (``coordinator.acquire_epoch``)
still fences the replica it replaces. The lease logic is ``pipeline/commit/lease.py``.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable

from pipeline.commit.journal import JournalStore
from pipeline.commit.lease import HaStatus, Lease, Role
from pipeline.config import HaConfig

log = logging.getLogger(__name__)

POLL_S = 0.25  # a standby looks at the lease this often (one listing each)


class Standby:
    """One replica's lease for the run: acquire before the query, keep, release."""

    def __init__(self, cfg: HaConfig, store: JournalStore) -> None:
        self.cfg = cfg
        self.lease = Lease(
            store,
            f"{socket.gethostname()}:{os.getpid()}",
            lease_s=cfg.lease_seconds,
            renew_s=cfg.renew_seconds,
            clock=time.monotonic,
            patient=cfg.mode == "standby",
        )
        self.warm = False
        self.takeovers = 0

    def acquire(self, warm_up: Callable[[], None], stopping: Callable[[], bool]) -> bool:
        """Block until this replica holds the lease (True) or ``stopping()`` (False)."""
        if self.cfg.mode == "active":
            self.lease.take()
            return True
        if self.lease.try_acquire():
            return True
        log.info("standing by: another replica holds the lease; warming up")
        warm_up()
        self.warm = True
        log.info(
            "standing by, warm: taking over when the lease is not renewed for %gs",
            self.cfg.lease_seconds,
        )
        while not self.lease.try_acquire():
            if stopping():
                return False
            time.sleep(POLL_S)
        self.takeovers += 1
        log.info("took over the lease (generation %d): starting", self.lease.generation)
        return True

    def status(self) -> HaStatus:
        """For the metrics (any thread)."""
        lease = self.lease
        age = lease.renewed_age() if lease.role is Role.ACTIVE else lease.watch.age()
        return HaStatus(lease.role.value, self.warm, max(0.0, age), self.takeovers)

    def keep(self) -> None:
        """Renew when due; raises ``LeaseLostError`` once another replica took over."""
        self.lease.tick()

    def release(self) -> None:
        self.lease.release()
