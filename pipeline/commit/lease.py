"""The standby lease: which of several replicas of one pipeline *tries* to write.

Correctness never rests on the lease: the writer epoch (``journal.acquire_epoch``) and the
table's fence checks stop a writer that lost. The lease only lets a warm standby take
over within ``lease_s`` of the active replica dying, instead of a cold start.

Layout in the journal store (create-if-absent, read, list, delete; local or S3):

    ha/<generation>.claim            the one replica that owns generation g (and the
                                     address of its liveness port, if it has one)
    ha/<generation>.<seq>.beat       its renewals, seq 0, 1, 2, ... (older entries are
                                     trimmed, the owner's own claim is kept)
    ha/<generation>.released         it stopped cleanly: the next one need not wait

Invariants
  * Generations are claimed with create-if-absent, so of any number of replicas racing
    for generation g + 1 exactly one wins; the others see the new generation and wait.
  * Expiry is judged on the observer's own monotonic clock: a lease is expired when the
    newest entry has not changed for ``lease_s`` since this observer first saw it. No
    timestamps written by another host are compared, so clock skew cannot make a live
    owner look dead; only an owner that stopped renewing (dead, paused, partitioned) can.
  * A released lease, or none at all, is free at once. So is a generation whose owner
    is known to be gone (``holder_gone``: its liveness connection closed and its port
    refuses connections -- the kernel closes a killed process's sockets at once -- or, on
    its own host, its process no longer exists); a wrong "gone" costs a needless
    take-over, never correctness.
  * The owner of generation g steps down (``LeaseLostError``) when it sees any entry of
    a higher generation, or when it has not renewed successfully for ``lease_s`` (a
    standby may be taking over; it cannot prove otherwise).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.commit.journal import AlreadyExists, JournalStore, decode_entry, encode_entry
from pipeline.errors import LeaseLostError

log = logging.getLogger(__name__)

PREFIX = "ha"
_WIDTH = 12
_NAME = re.compile(r"^(\d{12})\.(?:(claim)|(\d{12})\.beat|(released))$")


class MarkKind(enum.IntEnum):
    """Ordered: within one generation a claim precedes its beats, a release ends it."""

    CLAIM = 0
    BEAT = 1
    RELEASED = 2


@dataclass(frozen=True, order=True)
class LeaseMark:
    """One lease entry; the newest (greatest) one is the lease's state."""

    generation: int
    kind: MarkKind
    seq: int = 0

    @property
    def name(self) -> str:
        g = f"{self.generation:0{_WIDTH}d}"
        if self.kind is MarkKind.CLAIM:
            return f"{PREFIX}/{g}.claim"
        if self.kind is MarkKind.RELEASED:
            return f"{PREFIX}/{g}.released"
        return f"{PREFIX}/{g}.{self.seq:0{_WIDTH}d}.beat"

    @classmethod
    def parse(cls, name: str) -> LeaseMark | None:
        """The inverse of ``name`` (a listed path); None for anything else."""
        m = _NAME.match(name.rsplit("/", 1)[-1])
        if m is None:
            return None
        g = int(m.group(1))
        if m.group(2):
            return cls(g, MarkKind.CLAIM)
        if m.group(4):
            return cls(g, MarkKind.RELEASED)
        return cls(g, MarkKind.BEAT, int(m.group(3)))


@dataclass(frozen=True)
class Claim:
    """What a replica publishes in its entries: its name and, in its claim, the address of
    its liveness port and its process identity (``pipeline.standby.process``), by which
    others can tell that it is gone. Anything malformed in a read entry reads as absent
    (it proves nothing; the lease's expiry still decides)."""

    owner: str | None = None
    endpoint: str | None = None  # ``host:port``
    process: Mapping[str, Any] | None = None

    def entry(self, *, facts: bool = True) -> dict[str, Any]:
        """The entry's payload: the owner, and with ``facts`` what else is known."""
        fields: dict[str, Any] = {"owner": self.owner}
        if facts:
            fields |= {"endpoint": self.endpoint, "process": self.process}
        return {k: v for k, v in fields.items() if v is not None}

    @classmethod
    def read(cls, payload: Mapping[str, Any]) -> Claim:
        def typed(key: str, kind: type) -> Any:
            value = payload.get(key)
            return value if isinstance(value, kind) else None

        return cls(typed("owner", str), typed("endpoint", str), typed("process", Mapping))


class LeaseStore:
    """Lease entries in a journal store."""

    def __init__(self, store: JournalStore) -> None:
        self.store = store

    def marks(self) -> list[LeaseMark]:
        return sorted(m for m in map(LeaseMark.parse, self.store.list(PREFIX)) if m is not None)

    def latest(self) -> LeaseMark | None:
        marks = self.marks()
        return marks[-1] if marks else None

    def put(self, mark: LeaseMark, payload: Mapping[str, Any]) -> bool:
        """Create ``mark`` with ``payload`` (``Claim.entry``); False when it exists already
        (another replica's)."""
        try:
            self.store.create(mark.name, encode_entry(dict(payload)))
        except AlreadyExists:
            return False
        return True

    def claim(self, generation: int) -> Claim:
        """What the owner of ``generation`` published in its claim; empty when the claim
        is gone or unreadable (the lease's expiry still decides)."""
        name = LeaseMark(generation, MarkKind.CLAIM).name
        try:
            data = self.store.read(name)
            payload = decode_entry(name, data) if data else {}
        except Exception:
            return Claim()
        return Claim.read(payload) if isinstance(payload, Mapping) else Claim()

    def trim(self, older: list[LeaseMark], generation: int) -> None:
        """Delete all but the newest of ``older`` (sorted entries listed before the one
        just written; best effort), keeping ``generation``'s claim (its endpoint)."""
        keep = LeaseMark(generation, MarkKind.CLAIM)
        for m in older[:-1]:
            if m != keep:
                with contextlib.suppress(Exception):
                    self.store.delete(m.name)


_NOTHING = LeaseMark(-1, MarkKind.CLAIM)  # what a patient watch sees before any lease


class LeaseWatch:
    """Expiry of the lease as one observer sees it (its own monotonic clock). A patient
    watch (``ha.mode: standby``) also waits ``lease_s`` before taking a lease nobody
    holds yet, so a standby started beside its active does not race it."""

    def __init__(self, lease_s: float, clock: Callable[[], float], patient: bool = False) -> None:
        self.lease_s = lease_s
        self.clock = clock
        self.patient = patient
        self._seen: LeaseMark | None = None
        self._since = 0.0

    def expired(self, mark: LeaseMark | None) -> bool:
        if mark is None and not self.patient:
            return True
        if mark is not None and mark.kind is MarkKind.RELEASED:
            return True
        mark = mark or _NOTHING
        now = self.clock()
        if mark != self._seen:
            self._seen, self._since = mark, now
            return False
        return now - self._since >= self.lease_s

    def age(self) -> float:
        """Seconds since the lease last changed, as observed (0 before any observation)."""
        return 0.0 if self._seen is None else self.clock() - self._since


class Role(enum.Enum):
    STANDBY = "standby"
    ACTIVE = "active"
    STOPPED = "stopped"  # lost or released the lease; never active again in this process


@dataclass(frozen=True)
class HaStatus:
    """What the metrics show of a replica's lease (``ha.mode`` off: role ``off``)."""

    role: str  # off | standby | active | stopped
    warm: bool = False  # a standby that finished warming up
    lease_age_s: float = 0.0  # standby: since the lease last changed; active: since renewed
    takeovers: int = 0  # times this replica took over after standing by


class Lease:
    """One replica's side of the lease: stand by, take over, renew, release."""

    def __init__(
        self,
        store: JournalStore,
        owner: str,
        *,
        lease_s: float = 3.0,
        renew_s: float = 1.0,
        clock: Callable[[], float],
        patient: bool = False,
        endpoint: str | None = None,
        process: Mapping[str, Any] | None = None,
    ) -> None:
        self.store = LeaseStore(store)
        self.published = Claim(owner, endpoint, process)
        self.lease_s = lease_s
        self.renew_s = renew_s
        self.clock = clock
        self.watch = LeaseWatch(lease_s, clock, patient)
        self.role = Role.STANDBY
        self.generation = 0
        self._seq = 0
        self._renewed_at = 0.0

    def peek(self) -> LeaseMark | None:
        """The lease's newest entry (one listing)."""
        return self.store.latest()

    def try_acquire(self, *, holder_gone: bool = False, latest: LeaseMark | None = None) -> bool:
        """Standby: take the lease if it is free or expired, or ``holder_gone`` (the owner
        of ``latest``'s generation, as peeked, is known to be gone); True once this
        replica owns it. Without ``latest`` the store is listed now."""
        if self.role is not Role.STANDBY:
            return self.role is Role.ACTIVE
        if latest is None:
            latest = self.store.latest()
        expired = self.watch.expired(latest)
        return (expired or (holder_gone and latest is not None)) and self._claim_after(latest)

    def take(self) -> None:
        """``ha.mode: active``: own the next generation now, live owner or not (it stops
        at its next renewal; the writer epoch fences it before that)."""
        while not self._claim_after(self.store.latest()):
            pass

    def _claim_after(self, latest: LeaseMark | None) -> bool:
        """Claim the generation after ``latest``'s; True when this replica got it."""
        generation = (latest.generation if latest else 0) + 1
        if not self.store.put(LeaseMark(generation, MarkKind.CLAIM), self.published.entry()):
            log.info("lease generation %d was claimed by another replica", generation)
            return False
        self.role, self.generation, self._seq = Role.ACTIVE, generation, 0
        self._renewed_at = self.clock()
        log.info("took the lease (generation %d)", generation)
        return True

    def renew(self) -> None:
        """Active: prove liveness once more, or raise ``LeaseLostError`` and stop."""
        if self.role is not Role.ACTIVE:
            raise LeaseLostError(f"lease renewal while {self.role.value}")
        try:
            marks = self.store.marks()  # one listing per renewal: the check and the trim
            if marks and marks[-1].generation > self.generation:
                self._lose(f"replica generation {marks[-1].generation} took over")
            beat = LeaseMark(self.generation, MarkKind.BEAT, self._seq)
            if not self.store.put(beat, self.published.entry(facts=False)):
                self._lose(f"lease entry {beat.name} exists already")
            self._seq += 1
            self._renewed_at = self.clock()
            self.store.trim(marks, self.generation)
        except LeaseLostError:
            raise
        except Exception as e:
            silent = self.clock() - self._renewed_at
            if silent >= self.lease_s:
                self._lose(f"could not renew for {silent:.1f}s ({e})")
            log.warning("lease renewal failed (%s); retrying", e)

    def renewed_age(self) -> float:
        """Active: seconds since the last successful renewal (or the claim)."""
        return self.clock() - self._renewed_at

    def tick(self) -> None:
        """Active: renew when ``renew_s`` has passed since the last successful renewal
        (call it more often than that; a failed renewal is retried at the next tick)."""
        if self.role is not Role.ACTIVE or self.clock() - self._renewed_at >= self.renew_s:
            self.renew()

    def release(self) -> None:
        """Clean stop: hand over at once instead of after ``lease_s``."""
        if self.role is Role.ACTIVE:
            with contextlib.suppress(Exception):
                self.store.put(
                    LeaseMark(self.generation, MarkKind.RELEASED), self.published.entry(facts=False)
                )
        self.role = Role.STOPPED

    def _lose(self, why: str) -> None:
        self.role = Role.STOPPED
        raise LeaseLostError(f"lost the lease of generation {self.generation}: {why}; stopping")
