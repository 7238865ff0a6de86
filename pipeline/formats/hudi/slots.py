"""Commit slots: the order of one pipeline's fences and commits on a Hudi table whose files
are on an object store, where no lock spans processes.

Layout (create-if-absent objects, checksummed JSON, ``encode_entry``)::

    .hoodie/.ingest/slots/<pipeline id>/<n:012d>
        {"kind": "fence",  "epoch": e}
        {"kind": "commit", "epoch": e, "instant": ts, "metadata": "<T.commit JSON>"}

Operators
  ``fence(e)``         take the next slot with a fence at epoch ``e``
  ``commit(e, ts, m)`` take the next slot with the commit of instant ``ts`` (metadata ``m``)
  ``materialize``      write the head slot's ``<ts>.commit`` if it is a commit (callback)

Invariants
  * A writer reads the head (the highest slot), materializes it, decides, and creates
    slot head + 1. Of a fence and a commit racing for one slot exactly one lands; the
    loser reads again and decides again, so a commit below a newer epoch's fence is
    refused (``FencedError``) and a fence never passes a commit it did not see.
  * A commit slot is the commit point. Its ``<ts>.commit`` is written by its writer right
    after, and by everyone before they take the next slot: a writer killed or paused
    between the two cannot hide a decided commit from the next owner, whose fence
    materializes it before its recovery reads the timeline.
  * Slots below ``head - KEEP`` are deleted. A writer paused between reading the head and
    creating its slot may therefore land in a deleted number below the head: after
    creating, it checks that no higher slot exists, and otherwise gives up (its stale slot
    is never the head, so nobody materializes it).
  * The epoch of the pipeline is the head's (epochs in slots never decrease).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipeline.commit.fence import check_fence
from pipeline.commit.journal import CorruptEntry, decode_entry, encode_entry
from pipeline.errors import CommitError, FencedError
from pipeline.formats.hudi.layout import TablePaths
from pipeline.formats.hudi.storage import TableFiles

log = logging.getLogger(__name__)

__all__ = ["CommitSlots", "Slot"]

KEEP = 8
_WIDTH = 12
_ATTEMPTS = 50


@dataclass(frozen=True)
class Slot:
    number: int
    kind: str  # "fence" | "commit"
    epoch: int
    instant: str | None = None
    metadata: bytes | None = None

    def encode(self) -> bytes:
        doc: dict[str, Any] = {"kind": self.kind, "epoch": self.epoch}
        if self.kind == "commit":
            doc["instant"] = self.instant
            doc["metadata"] = base64.b64encode(self.metadata or b"").decode()
        return encode_entry(doc)

    @classmethod
    def decode(cls, number: int, where: str, data: bytes) -> Slot:
        try:
            doc = decode_entry(where, data)
            kind = str(doc["kind"])
            if kind not in ("fence", "commit"):
                raise ValueError(f"unknown kind {kind!r}")
            meta = base64.b64decode(doc["metadata"]) if kind == "commit" else None
            return cls(number, kind, int(doc["epoch"]), doc.get("instant"), meta)
        except (CorruptEntry, KeyError, TypeError, ValueError) as e:
            raise CommitError(f"commit slot {where} is unreadable: {e}") from None


class CommitSlots:
    """The slots of ``pipeline_id`` in the table whose files are ``files``."""

    def __init__(
        self,
        files: TableFiles,
        pipeline_id: str,
        materialize: Callable[[Slot], None],
        what: str,
    ) -> None:
        self.files = files
        self.pipeline_id = pipeline_id
        self.root = TablePaths.own(".hoodie", "slots", pipeline_id)
        self._write_commit = materialize
        self._materialized: set[int] = set()  # commit slots known to have their .commit
        self.what = what  # for messages: "Hudi table s3://..."

    def _materialize(self, slot: Slot) -> None:
        """Have the ``.commit`` of commit slot ``slot`` written (once per process)."""
        if slot.kind != "commit" or slot.number in self._materialized:
            return
        self._write_commit(slot)
        self._materialized.add(slot.number)

    def _numbers(self) -> list[int]:
        return sorted(int(n) for n in self.files.listdir(self.root) or [] if n.isdigit())

    def head(self) -> Slot | None:
        """The highest slot (None: this pipeline has none here)."""
        for _ in range(_ATTEMPTS):
            numbers = self._numbers()
            if not numbers:
                return None
            rel = f"{self.root}/{numbers[-1]:0{_WIDTH}d}"
            data = self.files.read(rel)
            if data is not None:
                return Slot.decode(numbers[-1], self.files.uri(rel), data)
            # trimmed between the listing and the read: a newer head exists
        raise CommitError(f"{self.what}: commit slots of {self.pipeline_id!r} keep moving")

    def epoch(self) -> int:
        head = self.head()
        return head.epoch if head is not None else 0

    def fence(self, epoch: int, at_least: int = 0) -> Slot | None:
        """Record ``epoch`` as the lowest allowed to commit (``FencedError`` when the
        pipeline is already above it; ``at_least``: an epoch known from elsewhere).
        Returns the fence slot taken, None when the head was already at ``epoch``."""
        return self._append(epoch, lambda head: Slot(head + 1, "fence", epoch), at_least)

    def commit(self, epoch: int, instant: str, metadata: bytes, at_least: int = 0) -> Slot:
        """Take the next slot for the commit of ``instant`` and materialize it."""
        slot = self._append(
            epoch, lambda head: Slot(head + 1, "commit", epoch, instant, metadata), at_least
        )
        assert slot is not None
        self._materialize(slot)
        return slot

    def _append(self, epoch: int, make: Callable[[int], Slot], at_least: int) -> Slot | None:
        for _ in range(_ATTEMPTS):
            head = self.head()
            if head is not None:
                self._materialize(head)
            owner = max(at_least, head.epoch if head is not None else 0)
            check_fence(self.pipeline_id, epoch, owner, self.what)
            slot = make(head.number if head is not None else 0)
            if slot.kind == "fence" and owner == epoch:
                return None  # fenced at this epoch already
            if not self.files.create(f"{self.root}/{slot.number:0{_WIDTH}d}", slot.encode()):
                continue  # another writer took this slot: read and decide again
            newer = [n for n in self._numbers() if n > slot.number]
            if newer:
                # a number trimmed under a writer paused since it read the head
                raise FencedError(
                    f"{self.what}: commit slot {slot.number} of {self.pipeline_id!r} was "
                    f"taken after slot {newer[-1]}: this writer was paused and must stop"
                )
            self._trim(slot.number)
            return slot
        raise CommitError(f"{self.what}: no commit slot after {_ATTEMPTS} attempts")

    def _trim(self, head: int) -> None:
        for n in self._numbers():
            if n <= head - KEEP:
                self.files.delete(f"{self.root}/{n:0{_WIDTH}d}")
