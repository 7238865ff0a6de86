"""Warm standby (``ha.mode``): the lease a replica must hold while it writes.

    off      no lease, nothing written (one replica)
    active   take the lease at once (a live holder stops at its next renewal)
    auto     take it when nobody holds it or its holder is gone or stopped renewing,
             else stand by
    standby  stand by until a lease has not changed for ``ha.leaseSeconds`` (or its
             holder is gone)

A replica that stands by is warm: Spark session, Python workers, a rehearsal of the
query and the table are up before it waits, so a take-over starts no process. It takes
over when the holder's liveness connection closes and its port refuses (a killed active,
``liveness.py``: milliseconds), when the holder ran on this host and its process is no
more (a restart after a crash, ``process.py``), or when the lease expires (a paused or
partitioned one).
The lease only decides which replica tries to write; the writer epoch the query takes on
start (``coordinator.acquire_epoch``) still fences the replica it replaces. The lease
logic is ``pipeline/commit/lease.py``.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable

from pipeline.commit.journal import JournalStore
from pipeline.commit.lease import HaStatus, Lease, MarkKind, Role
from pipeline.config import HaConfig
from pipeline.standby.liveness import HolderLink, LivenessBeacon
from pipeline.standby.process import ProcessIdentity

log = logging.getLogger(__name__)

POLL_S = 0.25  # a standby without a liveness link looks at the lease this often
# Spark stops a Python worker idle for a minute: a standby warms its workers again this
# often while it waits, so a take-over hours later finds them running
KEEP_WARM_S = 30.0


class Standby:
    """One replica's lease for the run: acquire before the query, keep, release."""

    def __init__(self, cfg: HaConfig, store: JournalStore, host: str) -> None:
        self.cfg = cfg
        self.beacon = LivenessBeacon(host, cfg.port)
        self.lease = Lease(
            store,
            f"{socket.gethostname()}:{os.getpid()}",
            lease_s=cfg.lease_seconds,
            renew_s=cfg.renew_seconds,
            clock=time.monotonic,
            patient=cfg.mode == "standby",
            endpoint=self.beacon.address,
            process=me.to_claim() if (me := ProcessIdentity.current()) else None,
        )
        self.link = HolderLink()
        self.holder_process: ProcessIdentity | None = None  # the followed claim's
        self.warm = False
        self.takeovers = 0
        self.keep_warm_s = KEEP_WARM_S

    def acquire(
        self,
        warm_up: Callable[[], None],
        stopping: Callable[[], bool],
        keep_warm: Callable[[], None] | None = None,
    ) -> bool:
        """Block until this replica holds the lease (True) or ``stopping()`` (False);
        ``keep_warm`` runs every ``keep_warm_s`` while standing by warm."""
        if self.cfg.mode == "active":
            self.lease.take()
            return True
        if self._attempt(0.0) or self._outwait_a_dead_holder(stopping):
            return True
        if stopping():
            return False
        log.info("standing by: another replica holds the lease; warming up")
        warm_up()
        if stopping():
            return False
        self.warm = True
        log.info(
            "standing by, warm: taking over when the active is gone or its lease is not "
            "renewed for %gs",
            self.cfg.lease_seconds,
        )
        warmed = time.monotonic()
        while not self._attempt(POLL_S):
            if stopping():
                self.link.close()
                return False
            if keep_warm is not None and time.monotonic() - warmed >= self.keep_warm_s:
                keep_warm()
                warmed = time.monotonic()
        self.takeovers += 1
        log.info("took over the lease (generation %d): starting", self.lease.generation)
        return True

    def _outwait_a_dead_holder(self, stopping: Callable[[], bool]) -> bool:
        """Watch the lease for one lease period before warming up. A restart after a crash
        finds its predecessor's lease unexpired, and a refused liveness port proves nothing
        to a newcomer (``liveness.py``; a predecessor on this host is seen gone at once,
        ``process.py``); warming up as a standby first cost the restart a
        query rehearsal (cold restarts 26-28 s median in the soak). A live holder costs a
        real standby only this wait before it warms up."""
        deadline = time.monotonic() + self.cfg.lease_seconds + self.cfg.renew_seconds
        while time.monotonic() < deadline and not stopping():
            if self._attempt(POLL_S):
                return True
        return False

    def _attempt(self, wait_s: float) -> bool:
        """One look at the lease: follow its holder, wait on it, take it if free.

        Linked to a live holder, the store is listed once per ``renew_s`` (a death shows
        on the link); unlinked, once per ``wait_s``."""
        latest = self.lease.peek()
        holder = latest.generation if latest and latest.kind is not MarkKind.RELEASED else None
        if holder is not None and holder != self.link.generation:
            claim = self.lease.store.claim(holder)
            self.link.follow(holder, claim.endpoint)
            self.holder_process = ProcessIdentity.from_claim(claim.process)
        elif holder is None:
            self.link.follow(None, None)
            self.holder_process = None
        if self.link.linked and wait_s > 0:
            wait_s = max(wait_s, self.cfg.renew_seconds)
        # a holder on this host whose process is no more is gone without waiting
        dead = holder is not None and self.holder_process is not None and self.holder_process.gone()
        gone = dead or self.link.gone(wait_s)
        if not self.lease.try_acquire(holder_gone=gone, latest=latest):
            return False
        self.link.close()
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
        self.beacon.close()
