"""The instant journal: durable, atomic state files, and the timeline built on them.

Storage contract (``JournalStore``)
  * ``create(name, data)`` makes the file appear complete or not at all, and fails with
    ``AlreadyExists`` when the name is taken (create-if-absent). Local/HDFS-style stores do
    it with write-temp-then-link/rename; S3-compatible stores with a conditional PUT
    (``If-None-Match: *``). Every state file is written once and never modified.
  * Every file carries a SHA-256 of its payload: a torn or foreign file is reported as
    corrupt and treated as *not written* (a corrupt INFLIGHT is not a precommit).

Layout under ``<table location>/_ingest/<pipeline id>/``:
    instants/<time>.requested | .inflight | .completed | .rolled_back
    epochs/<n>           one file per writer epoch ever acquired (create-if-absent = unique)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Iterable
from typing import Any, Protocol

from pipeline.commit.instant import (
    Inflight,
    Instant,
    InstantState,
    Requested,
    next_instant_time,
)
from pipeline.errors import CommitError, FencedError

log = logging.getLogger(__name__)

_SUFFIX = {
    InstantState.REQUESTED: "requested",
    InstantState.INFLIGHT: "inflight",
    InstantState.COMPLETED: "completed",
    InstantState.ROLLED_BACK: "rolled_back",
}
_BY_SUFFIX = {v: k for k, v in _SUFFIX.items()}


class AlreadyExists(CommitError):
    code = "journal-exists"


class CorruptEntry(CommitError):
    code = "journal-corrupt"


class JournalStore(Protocol):
    def create(self, name: str, data: bytes) -> None: ...

    def read(self, name: str) -> bytes | None: ...

    def list(self, prefix: str) -> list[str]: ...

    def delete(self, name: str) -> None: ...


def encode_entry(payload: dict[str, Any]) -> bytes:
    body = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(body.encode()).hexdigest()
    return json.dumps({"sha256": digest, "payload": payload}, sort_keys=True).encode() + b"\n"


def decode_entry(name: str, data: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(data)
        payload = doc["payload"]
        body = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        if hashlib.sha256(body.encode()).hexdigest() != doc["sha256"]:
            raise ValueError("checksum mismatch")
        if not isinstance(payload, dict):
            raise ValueError("payload is not an object")
        return payload
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptEntry(f"journal entry {name} is corrupt ({e})") from None


class InstantTimeline:
    """The instants of one pipeline on one table, read from and written to the journal."""

    def __init__(self, store: JournalStore) -> None:
        self.store = store

    # -- reading ----------------------------------------------------------------------
    @staticmethod
    def _parse_name(name: str) -> tuple[str, InstantState] | None:
        """``instants/<17-digit time>.<state suffix>`` -> (time, state); None: not an entry."""
        time, _, suffix = name.rsplit("/", 1)[-1].partition(".")
        state = _BY_SUFFIX.get(suffix)
        if state is None or len(time) != 17 or not time.isdigit():
            return None
        return time, state

    def _entries(self) -> dict[str, set[InstantState]]:
        out: dict[str, set[InstantState]] = {}
        for name in self.store.list("instants"):
            parsed = self._parse_name(name)
            if parsed is not None:
                out.setdefault(parsed[0], set()).add(parsed[1])
        return out

    def _payload(self, time: str, state: InstantState) -> dict[str, Any] | None:
        name = f"instants/{time}.{_SUFFIX[state]}"
        data = self.store.read(name)
        if data is None:
            return None
        try:
            return decode_entry(name, data)
        except CorruptEntry as e:
            log.warning("%s: treated as not written", e.message)
            return None

    def instant(self, time: str, states: Iterable[InstantState] | None = None) -> Instant:
        present = set(states) if states is not None else self._entries().get(time, set())
        req_d = (
            self._payload(time, InstantState.REQUESTED)
            if InstantState.REQUESTED in present
            else None
        )
        inf_d = (
            self._payload(time, InstantState.INFLIGHT) if InstantState.INFLIGHT in present else None
        )
        requested = Requested.from_json(req_d) if req_d else None
        inflight = Inflight.from_json(inf_d) if inf_d else None
        if InstantState.ROLLED_BACK in present:
            state = InstantState.ROLLED_BACK
        elif InstantState.COMPLETED in present:
            state = InstantState.COMPLETED
        elif inflight is not None:
            state = InstantState.INFLIGHT
        else:
            state = InstantState.REQUESTED
        return Instant(time, state, requested, inflight)

    def instants(self) -> list[Instant]:
        return [self.instant(t, s) for t, s in sorted(self._entries().items())]

    def pending(self) -> list[Instant]:
        """Instants neither completed nor rolled back, oldest first."""
        out = []
        for t, states in sorted(self._entries().items()):
            if states & {InstantState.COMPLETED, InstantState.ROLLED_BACK}:
                continue
            out.append(self.instant(t, states))
        return out

    def latest_time(self) -> str | None:
        # listed names sort by instant time (fixed 17-digit prefix): the newest valid one
        for name in reversed(self.store.list("instants")):
            parsed = self._parse_name(name)
            if parsed is not None:
                return parsed[0]
        return None

    # -- writing ----------------------------------------------------------------------
    def mint(self) -> str:
        return next_instant_time(self.latest_time())

    def _write(self, time: str, state: InstantState, payload: dict[str, Any]) -> None:
        self.store.create(f"instants/{time}.{_SUFFIX[state]}", encode_entry(payload))

    def request(self, requested: Requested) -> None:
        self._write(requested.time, InstantState.REQUESTED, requested.to_json())

    def precommit(self, inflight: Inflight) -> None:
        if self.store.read(f"instants/{inflight.time}.{_SUFFIX[InstantState.ROLLED_BACK]}"):
            # a newer writer's recovery already rolled this instant back: we are a zombie
            raise FencedError(
                f"instant {inflight.time} was rolled back by another writer; stopping"
            )
        self._write(inflight.time, InstantState.INFLIGHT, inflight.to_json())

    def complete(self, time: str, snapshot: str | None = None) -> None:
        # recovery and the original run may both mark it: same meaning
        with contextlib.suppress(AlreadyExists):
            self._write(time, InstantState.COMPLETED, {"time": time, "snapshot": snapshot})

    def roll_back(self, time: str, deleted: list[str]) -> None:
        with contextlib.suppress(AlreadyExists):
            self._write(time, InstantState.ROLLED_BACK, {"time": time, "deleted": deleted})

    def purge_finished(self, keep: int = 100) -> int:
        """Delete journal files of finished instants beyond the newest ``keep``."""
        entries = self._entries()
        finished = sorted(
            t for t, s in entries.items() if s & {InstantState.COMPLETED, InstantState.ROLLED_BACK}
        )
        doomed = finished[:-keep] if keep else finished
        for t in doomed:
            # the marker last: a crash mid-purge leaves a finished (not pending) instant
            for state in (
                InstantState.REQUESTED,
                InstantState.INFLIGHT,
                InstantState.ROLLED_BACK,
                InstantState.COMPLETED,
            ):
                if state in entries[t]:
                    self.store.delete(f"instants/{t}.{_SUFFIX[state]}")
        return len(doomed)

    # -- writer epochs ----------------------------------------------------------------
    def epochs(self) -> list[int]:
        out = []
        for name in self.store.list("epochs"):
            base = name.rsplit("/", 1)[-1]
            if base.isdigit():
                out.append(int(base))
        return sorted(out)

    def acquire_epoch(self, at_least: int = 1, owner: str = "") -> int:
        """A writer epoch greater than any acquired before (unique across racing starters)."""
        n = max([at_least - 1, *self.epochs()]) + 1
        while True:
            try:
                self.store.create(f"epochs/{n}", encode_entry({"epoch": n, "owner": owner}))
                return n
            except AlreadyExists:
                n += 1
