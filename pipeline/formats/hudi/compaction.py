"""Hudi table maintenance: small-file compaction as a ``replacecommit``, file statistics and
orphan cleanup (:mod:`~pipeline.formats.hudi.orphans`), as one
:class:`~pipeline.commit.maintenance.TableMaintenance` (the invariants are stated there).

Commit shape: what Hudi's clustering writes, checked with hudi-rs 0.5 (the snapshot drops
the replaced file groups, time travel before the replace still sees them, a replace older
than later commits reads right; tests/integration/formats/hudi/test_hudi_maintenance.py):
``C.replacecommit.requested`` (empty: Java reads that as "not a clustering plan"),
``C.replacecommit.inflight`` (empty), ``C.replacecommit`` (JSON: write stats of the new
file groups, ``partitionToReplaceFileIds``, ``operationType`` CLUSTER, ``extraMetadata``
with the table schema and ``ingest.compaction=true`` and no ``ingest.*`` pipeline keys).
Nothing that reads checkpoints (dedupe, fencing, committed offsets, last commit time,
``ingest status``, the verifier through hudi-rs's ``get_completed_commits``) looks at
replacecommits, so they all see what they saw before.

One run (``compact``):

1. **claim** -- take the next fence slot of the compaction slots
   (``.hoodie/.ingest/slots/_compaction``, :mod:`~pipeline.formats.hudi.slots`): a
   compaction decided but never written (killed after its commit point) is written first,
   and any older compaction can no longer commit (its commit slot would be refused).
2. **recover** -- so every pending replacecommit now is a dead or superseded compaction's:
   rolled back like a failed Hudi instant (its files, then ``.inflight``, then
   ``.requested``, then its markers). Ingest recovery never touches replacecommits (as
   Hudi's EAGER rollback skips clustering); they only hold back timeline trimming.
3. **plan** -- from one listing and the timeline (:class:`~pipeline.formats.hudi.view.TableView`):
   the latest committed file slice of every file group not replaced and not touched by a
   pending instant, listed by its commit (or from before the timeline start); per
   partition, small ones bin-packed (:func:`~pipeline.commit.maintenance.bin_pack`).
4. **reserve** -- under the table lock, ``C`` above every instant on the timeline (as
   ingest instants are allocated) and ``C.replacecommit.requested``: ingest mints above
   it, and readers skip files of a pending instant.
5. **write** -- outside any lock: per group, a marker then one new base file with the
   rows of its inputs, meta columns kept (:mod:`~pipeline.formats.hudi.rewrite`).
6. **commit** -- under the table lock: the writer's fence (``WriterFence``), then the
   plan (``C`` still reserved, outputs present, every input still there, no commit since
   the plan wrote a newer slice of an input's group or replaced it), then the commit slot
   (the commit point) and ``C.replacecommit``. A plan that no longer holds is rolled back
   and planned again (``max_attempts``); a newer compaction's claim ends this one.

Killed anywhere, readers see the table as before: the files of ``C`` belong to a pending
instant until the next compaction -- or orphan cleanup, once ``C`` is older than its
safety interval -- rolls it back (a claim, then step 2). The replaced
files stay until the replacecommit leaves the timeline (``HudiTable.trim`` deletes them
first). On an object store the table lock is per process: the writer's fence is checked
before, not atomically with, the commit slot (a zombie's compaction adds no records), and
the reservation is a create-if-absent next to ingest's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from pipeline.commit.instant import next_instant_time, parse_instant_time
from pipeline.commit.maintenance import (
    CompactionPolicy,
    CompactionResult,
    FileStats,
    OrphanResult,
    WriterFence,
    bin_pack,
)
from pipeline.errors import CommitError, FencedError
from pipeline.formats.hudi.committer import HudiCommitter
from pipeline.formats.hudi.instant import Action, Instant, State, instant_files
from pipeline.formats.hudi.layout import MARKERS_DIR
from pipeline.formats.hudi.orphans import remove_orphans
from pipeline.formats.hudi.rewrite import Written, replace_metadata, rewrite_group
from pipeline.formats.hudi.slots import CommitSlots, Slot
from pipeline.formats.hudi.view import BaseFile, TableView

log = logging.getLogger(__name__)

__all__ = ["COMPACTION_SLOTS", "HudiMaintenance", "plan_compaction"]


def _plan_name(ts: str) -> str:
    """``<ts>.replacecommit.requested``: the plan of compaction ``ts``."""
    return Instant(ts, Action.REPLACE_COMMIT, State.REQUESTED).file_name


#: the slot chain compactions of a table are ordered by (no pipeline id starts with "_")
COMPACTION_SLOTS = "_compaction"


def plan_compaction(view: TableView, policy: CompactionPolicy) -> list[list[BaseFile]]:
    """Groups of small live file slices to rewrite, each into one file."""
    by_partition: dict[str, list[BaseFile]] = {}
    for f in view.live(listed_only=True):
        if f.size < policy.small_below:
            by_partition.setdefault(f.partition, []).append(f)
    groups: list[list[BaseFile]] = []
    for _, small in sorted(by_partition.items()):
        if len(small) < max(2, policy.min_input_files):
            continue
        by_rel = {f.rel: f for f in small}
        for names in bin_pack([(f.rel, f.size) for f in small], policy.target_file_size_bytes):
            groups.append(sorted((by_rel[n] for n in names), key=lambda f: (f.instant, f.rel)))
    return groups


def _seconds(ts: str) -> float:
    """Unix time of instant ``ts`` (0: not a 17-digit instant time)."""
    try:
        return parse_instant_time(ts).timestamp()
    except ValueError:
        return 0.0


class _Superseded(Exception):
    """A newer compaction claimed the table: this one must not commit."""


class HudiMaintenance:
    """Compaction, file statistics and orphan cleanup of one Hudi table."""

    def __init__(
        self,
        committer: HudiCommitter,
        *,
        max_attempts: int = 4,
    ) -> None:
        self.committer = committer
        self.hudi = committer.hudi
        self.files = committer.files
        self.max_attempts = max(1, max_attempts)
        self.slots = CommitSlots(
            self.files, COMPACTION_SLOTS, self._materialize, f"Hudi table {self.hudi.base}"
        )

    @property
    def name(self) -> str:
        return f"Hudi table {self.hudi.spec.database}.{self.hudi.spec.name}"

    def compaction_commits(self) -> list[str]:
        return self.hudi.completed_replacecommits() if self.hudi.exists() else []

    def file_stats(self) -> FileStats:
        if not self.hudi.exists():
            return FileStats(self.name, 0, 0)
        live = TableView.load(self.hudi).live()
        return FileStats(self.name, len(live), sum(f.size for f in live))

    def remove_orphans(
        self, older_than_s: float, protected: Iterable[str] = (), *, dry_run: bool = False
    ) -> OrphanResult:
        """Orphan cleanup (:mod:`~pipeline.formats.hudi.orphans`); first, compactions
        pending for longer than the safety interval are rolled back as by the next
        compaction (a killed run's reservation must not hold back timeline trimming
        when no compaction runs again)."""
        if not dry_run and self.hudi.exists():
            cutoff = time.time() - older_than_s
            stale = [
                ts
                for ts in self.hudi.pending_replacecommits()
                if _seconds(ts) < cutoff
                and not self.files.read(f"{self.hudi.paths.meta}/{_plan_name(ts)}")
            ]
            if stale:
                self.claim()
                self.recover()
        return remove_orphans(self.hudi, self.name, older_than_s, protected, dry_run=dry_run)

    # -- compaction ----------------------------------------------------------------------

    def compact(
        self,
        policy: CompactionPolicy,
        fence: WriterFence | None = None,
        on_step: Callable[[str], None] | None = None,
    ) -> CompactionResult:
        """See the module docstring. ``on_step("written")`` after an attempt wrote its
        files, ``on_step("committed")`` after the commit landed (fault points)."""
        step = on_step or (lambda _: None)
        if not self.hudi.exists():
            return CompactionResult(self.name)
        self._check_fence(fence)
        groups = plan_compaction(TableView.load(self.hudi), policy)
        if not groups and not self.hudi.pending_replacecommits():
            return CompactionResult(self.name)  # nothing to do: no slot taken
        epoch = self.claim()
        self.recover()
        for attempt in range(1, self.max_attempts + 1):
            groups = plan_compaction(TableView.load(self.hudi), policy)
            if not groups:
                return CompactionResult(self.name, attempts=attempt - 1)
            ts = self.reserve()
            committed = False
            try:
                written = self.write(ts, groups)
                step("written")
                committed = self.commit(ts, epoch, groups, written, fence)
            except _Superseded:
                log.info("%s: a newer compaction took over; compaction %s dropped", self.name, ts)
                return CompactionResult(self.name, attempts=attempt)
            finally:
                if not committed:
                    self.roll_back(ts)
            if committed:
                step("committed")
                inputs = [f for g in groups for f in g]
                result = CompactionResult(
                    self.name,
                    rewritten_files=len(inputs),
                    written_files=len(written),
                    rewritten_bytes=sum(f.size for f in inputs),
                    written_bytes=sum(w.size for w in written),
                    commit=ts,
                    attempts=attempt,
                )
                log.info(
                    "%s: compacted %d files (%d bytes) into %d as replacecommit %s",
                    self.name,
                    result.rewritten_files,
                    result.rewritten_bytes,
                    result.written_files,
                    ts,
                )
                return result
            log.info("%s: compaction %s lost a race with a commit; re-planning", self.name, ts)
        log.warning("%s: compaction gave up after %d attempts", self.name, self.max_attempts)
        return CompactionResult(self.name, attempts=self.max_attempts)

    def _check_fence(self, fence: WriterFence | None) -> None:
        if fence is not None:
            latest = self.committer.latest_epoch(fence.pipeline_id)
            fence.check(latest, f"compaction of {self.name}")

    def claim(self) -> int:
        """This run's compaction epoch: a fence slot above every earlier compaction's."""
        for _ in range(20):
            epoch = self.slots.epoch() + 1
            try:
                if self.slots.fence(epoch) is not None:
                    return epoch
            except FencedError:
                pass  # another compaction claimed meanwhile: above it, then
        raise CommitError(f"{self.name}: no compaction slot after 20 attempts")

    def recover(self) -> None:
        """Roll back the pending replacecommits of dead or superseded compactions (call
        after :meth:`claim`), and drop markers left by completed ones."""
        meta = self.hudi.paths.meta
        for ts in self.hudi.pending_replacecommits():
            requested = self.files.read(f"{meta}/{_plan_name(ts)}")
            if requested:  # an Avro clustering plan: another writer's, not ours to end
                log.warning("%s: pending replacecommit %s is not ours: left alone", self.name, ts)
                continue
            log.warning("%s: rolling back compaction %s (its run stopped)", self.name, ts)
            self.roll_back(ts)
        done = set(self.hudi.completed_replacecommits())
        for ts in self.files.listdir(f"{meta}/{MARKERS_DIR}") or []:
            if ts in done:
                self.files.remove_tree(f"{meta}/{MARKERS_DIR}/{ts}")

    def reserve(self) -> str:
        """``C.replacecommit.requested`` with ``C`` above every instant (under the lock)."""
        for _ in range(10):
            with self.hudi.locked() as meta:
                self.hudi.check()
                ts = next_instant_time(self.hudi.latest_instant_time())
                rel = f"{meta}/{_plan_name(ts)}"
                if not self.files.create(rel, b""):
                    continue  # an object store without a lock: another compaction took ts
                if not self._shared(ts):
                    return ts
                self.files.delete(rel)  # ... or an ingest instant: not ours, try above it
        raise CommitError(f"{self.name}: no compaction instant after 10 attempts")

    def _shared(self, ts: str) -> bool:
        """An instant of another action has time ``ts`` (only without a cross-process
        lock: two writers minted in the same millisecond)."""
        return any(
            i.time == ts and i.action is not Action.REPLACE_COMMIT for i in self.hudi.instants()
        )

    def write(self, ts: str, groups: list[list[BaseFile]]) -> list[Written]:
        """One new base file of instant ``ts`` per group (outside any lock)."""
        meta, spec = self.hudi.paths.meta, self.hudi.spec
        return [rewrite_group(self.files, meta, spec, ts, i, g) for i, g in enumerate(groups)]

    def commit(
        self,
        ts: str,
        epoch: int,
        groups: list[list[BaseFile]],
        written: list[Written],
        fence: WriterFence | None,
    ) -> bool:
        """Check the plan and commit under the table lock; False: the plan no longer holds."""
        inputs = [f for g in groups for f in g]
        metadata = replace_metadata(self.hudi.spec, inputs, written)
        with self.hudi.locked():
            self._check_fence(fence)
            if not self._plan_holds(ts, inputs, written):
                return False
            try:
                self.slots.commit(epoch, ts, metadata)
            except FencedError as e:
                raise _Superseded(str(e)) from None
        return True

    def _plan_holds(self, ts: str, inputs: list[BaseFile], written: list[Written]) -> bool:
        meta = self.hudi.paths.meta
        if self.files.stat(f"{meta}/{_plan_name(ts)}") is None:
            return False  # rolled back by a newer compaction
        for w in written:
            st = self.files.stat(w.rel)
            if st is None or st.size != w.size:
                return False
        for f in inputs:
            if self.files.stat(f.rel) is None:
                return False
        slices = {f.group: f for f in inputs}
        for i in self.hudi.instants():
            if i.state is not State.COMPLETED or i.time == ts:
                continue
            try:
                if i.action is Action.COMMIT:
                    doc = self.hudi.commit_metadata(i.time)
                elif i.action is Action.REPLACE_COMMIT:
                    doc = self.hudi.replace_metadata(i.time)
                else:
                    continue
            except FileNotFoundError:
                continue
            for partition, stats in (doc.get("partitionToWriteStats") or {}).items():
                for s in stats or ():
                    old = slices.get((partition, s.get("fileId")))
                    if old is not None and i.time > old.instant and s.get("path") != old.rel:
                        return False  # a newer slice of an input's file group
            for partition, ids in (doc.get("partitionToReplaceFileIds") or {}).items():
                if any((partition, fid) in slices for fid in ids or ()):
                    return False  # replaced meanwhile
        return True

    def _materialize(self, slot: Slot) -> None:
        """Write ``C.replacecommit`` of a decided compaction (after its pending files)."""
        assert slot.instant is not None and slot.metadata is not None
        requested, inflight, completed = instant_files(slot.instant, Action.REPLACE_COMMIT)
        with self.hudi.locked() as meta:
            self.files.create(f"{meta}/{requested}", b"")
            self.files.create(f"{meta}/{inflight}", b"")
            rel = f"{meta}/{completed}"
            if not self.files.create(rel, slot.metadata) and self.files.read(rel) != slot.metadata:
                raise CommitError(f"{self.name}: {completed} exists with other content")
            self.files.sync_dir(meta)
            self.files.remove_tree(f"{meta}/{MARKERS_DIR}/{slot.instant}")

    def roll_back(self, ts: str) -> None:
        """Undo compaction ``ts`` that did not complete: its base files (named by markers
        and found by listing), then ``.inflight``, then ``.requested``, then markers."""
        meta = self.hudi.paths.meta
        requested, inflight, completed = instant_files(ts, Action.REPLACE_COMMIT)
        if self.files.stat(f"{meta}/{completed}") is not None:
            return
        head = self.slots.head()
        if head is not None and head.kind == "commit" and head.instant == ts:
            self._materialize(head)  # decided (its slot is the commit point): complete it
            return
        root = f"{meta}/{MARKERS_DIR}/{ts}"
        if self._shared(ts):
            log.error("%s: instant %s is also another writer's: its files are kept", self.name, ts)
        else:
            doomed = {
                m[len(root) + 1 :].removesuffix(".marker.CREATE")
                for m in self.files.files_under(root)
            }
            doomed.update(f.rel for f in TableView.load(self.hudi).files if f.instant == ts)
            for rel in sorted(doomed):
                self.files.delete(rel)
        with self.hudi.locked() as meta:
            if self.files.stat(f"{meta}/{completed}") is not None:
                raise CommitError(f"{self.name}: compaction {ts} completed during its rollback")
            self.hudi.discard_pending(meta, ts, (inflight, requested))
