"""Driver side: :class:`HudiCommitter`, the coordinator's ``TableCommitter`` for a Hudi
copy-on-write table (:class:`~pipeline.formats.hudi.cow_table.HudiTable`).

Commit of instant ``T`` (under the table lock; see :mod:`pipeline.formats.hudi.layout`):

1. the table is loaded and checked (version 6, layout 1, COW, no metadata table, the
   configured key and partition fields);
2. the writer epoch is checked: a fence record or a commit of this pipeline at a higher
   epoch -> ``FencedError`` (first: a superseded writer stops even when the newer one
   committed its batch for it, as recovery does for a paused writer's instant);
3. the batch is looked up in the completed commits, newest first: already there -> done
   (idempotent per (pipeline, incarnation, batch id, planned end offsets));
4. every listed file must exist with its staged size;
5. stray files of ``T`` (task-retry debris: same instant, same pipeline tag, not listed)
   are deleted -- Hudi readers list files and WOULD read them;
6. ``T.commit.requested`` and ``T.inflight`` are written if missing, then ``T.commit``
   (JSON metadata: write stats per file, ``extraMetadata.schema`` and the consumption
   checkpoint) appears atomically: the commit point. A missing table is created by the
   same step: its ``.hoodie`` is renamed into place together with this first commit.

Rollback (coordinator ``_roll_back``): the coordinator deletes the instant's files first
(listed and ``orphan_files``), then :meth:`HudiCommitter.abort` deletes ``T.inflight``,
then ``T.commit.requested``, then the markers -- in that order, because a data file whose
instant files are gone is visible again when it is older than the first commit. No
``.rollback`` instant is written (Avro-only in Hudi; readers never consult it); the
journal's ROLLED_BACK entry lists the deleted files.

Fencing: :meth:`HudiCommitter.fence` writes ``.ingest/fence/<pipeline>`` (the epoch) under
the lock; commits read it under the same lock, so a zombie's commit either completed
before the fence (and the new owner's recovery sees it) or is refused after it. The fence
record lives in the staging directory while the table does not exist, so fencing never
creates an empty table (``create=True`` is not needed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Iterator, Mapping

from pipeline.commit.checkpoint import (
    PIPELINE_ID_KEY,
    CheckpointReads,
    CommitCheckpoint,
    find_batch,
)
from pipeline.commit.fence import check_fence
from pipeline.commit.history import carry_forward
from pipeline.commit.instant import next_instant_time
from pipeline.commit.journal import CorruptEntry, decode_entry, encode_entry
from pipeline.commit.offsets import TopicPartition
from pipeline.errors import CommitError
from pipeline.formats.hudi.commit_metadata import commit_metadata_json
from pipeline.formats.hudi.cow_table import HudiTable
from pipeline.formats.hudi.instant import commit_name, requested_name
from pipeline.formats.hudi.layout import BASE_FILE, TablePaths, file_tag, parse_write_id
from pipeline.formats.hudi.schema import HudiTableSpec
from pipeline.formats.hudi.slots import CommitSlots, Slot
from pipeline.formats.hudi.staged_files import StagedFiles
from pipeline.formats.hudi.trim import maybe_trim
from pipeline.formats.hudi.writer import HudiWriteContext, describe

log = logging.getLogger(__name__)

__all__ = ["HudiCommitter"]


class HudiCommitter(CheckpointReads, StagedFiles):
    """A Hudi table as the coordinator's commit target (``TableCommitter`` protocol)."""

    def __init__(self, table: HudiTable, max_commits: int = 30, trim_every: int = 10) -> None:
        self.hudi = table
        self.max_commits = max(2, max_commits)
        self.trim_every = max(1, trim_every)
        # Tables this one's commits follow (the dead-letter table of the same batches):
        # when T commits here, their pending T that staged nothing is discarded.
        self.followers: list[HudiCommitter] = []
        # completed commit time -> its pipeline id ("" for none): commit files never
        # change, so a walk past other writers' commits reads each of them once
        self._owners: dict[str, str] = {}

    @functools.lru_cache(maxsize=8)  # noqa: B019 - one committer per table, few pipelines
    def _slots(self, pipeline_id: str) -> CommitSlots:
        """Where fences and commits are ordered on an object store (no cross-process lock)."""
        return CommitSlots(
            self.hudi.files, pipeline_id, self._materialize, f"Hudi table {self.hudi.base}"
        )

    def _materialize(self, slot: Slot) -> None:
        """Write the ``.commit`` of a decided commit slot (creating the table if needed)."""
        assert slot.instant is not None and slot.metadata is not None
        with self.hudi.locked() as meta:
            if not self.hudi.exists():
                self.hudi.create(meta, slot.instant, slot.metadata)
            elif self.files.stat(f"{meta}/{commit_name(slot.instant)}") is None:
                self.hudi.complete(meta, slot.instant, slot.metadata)

    @property
    def spec(self) -> HudiTableSpec:
        return self.hudi.spec

    # -- the table's checkpoints ---------------------------------------------------------

    def _checkpoints(self, pipeline_id: str) -> Iterator[tuple[str, CommitCheckpoint]]:
        """This pipeline's checkpoints in completed commits, newest first, over the whole
        active timeline: no count bound, however many commits of other writers follow
        ours (docs/design.md invariant 12; trimming keeps every pipeline's newest commit).
        Other writers' commits are recognised from :attr:`_owners` without a read."""
        completed = self.hudi.completed_commits()
        if len(self._owners) > 2 * len(completed) + 64:  # trimmed commits: forget them
            live = set(completed)
            self._owners = {ts: o for ts, o in self._owners.items() if ts in live}
        for ts in completed:
            if self._owners.get(ts, pipeline_id) != pipeline_id:
                continue
            try:
                extra = self.hudi.extra_metadata(ts)
            except FileNotFoundError:
                continue
            self._owners[ts] = extra.get(PIPELINE_ID_KEY, "")
            if extra.get(PIPELINE_ID_KEY) != pipeline_id:
                continue
            cp = CommitCheckpoint.from_summary(extra)
            if cp is not None:
                yield ts, cp

    def _find_batch(
        self,
        pipeline_id: str,
        incarnation: str,
        batch_id: int,
        batch_end: Mapping[TopicPartition, int] | None,
    ) -> str | None:
        return find_batch(self._checkpoints(pipeline_id), incarnation, batch_id, batch_end)

    def refresh(self) -> None:
        """Nothing cached can be stale: every read lists ``.hoodie`` anew, and what is
        kept (commit files' metadata, their owners) is of immutable completed commits."""

    def last_commit_time(self, pipeline_id: str) -> float | None:
        """Unix time of this pipeline's newest commit (the ``.commit`` file's mtime)."""
        for ts, _ in self._checkpoints(pipeline_id):
            st = self.files.stat(f"{self.hudi.paths.meta}/{commit_name(ts)}")
            if st is not None:
                return st.mtime
        return None

    def table(self) -> None:
        """No pyiceberg ``Table`` here: Iceberg-only callers (snapshot summaries in
        ``ops.metrics``) get None and skip."""
        return None

    # -- fencing -------------------------------------------------------------------------

    def _fence_path(self, meta: str, pipeline_id: str) -> str:
        return TablePaths.own(meta, "fence", pipeline_id)

    def _fence_epoch(self, meta: str, pipeline_id: str) -> int:
        if not self.files.exclusive_lock:
            return self._slots(pipeline_id).epoch()
        rel = self._fence_path(meta, pipeline_id)
        data = self.files.read(rel)
        if data is None:
            return 0
        path = self.files.uri(rel)
        try:
            return int(decode_entry(path, data)["epoch"])
        except (CorruptEntry, KeyError, TypeError, ValueError) as e:
            raise CommitError(f"fence record {path} is unreadable: {e}") from None

    def _read_fence(self, pipeline_id: str) -> int:
        """The fence epoch without the lock (the record is replaced atomically)."""
        for _ in range(5):
            meta = self.hudi.paths.current_meta()
            try:
                return self._fence_epoch(meta, pipeline_id)
            except CommitError:
                if self.hudi.paths.current_meta() == meta:
                    raise
        return self._fence_epoch(self.hudi.paths.current_meta(), pipeline_id)

    def latest_epoch(self, pipeline_id: str) -> int | None:
        cp = self.latest_checkpoint(pipeline_id)
        known = max(self._read_fence(pipeline_id), cp.epoch if cp is not None else 0)
        return known or None

    def _owner_epoch(self, meta: str, pipeline_id: str) -> int:
        cp = self.latest_checkpoint(pipeline_id) if self.hudi.exists() else None
        return max(self._fence_epoch(meta, pipeline_id), cp.epoch if cp is not None else 0)

    def fence(self, pipeline_id: str, epoch: int, *, create: bool = False) -> None:
        """Record ``epoch`` as the lowest one allowed to commit for ``pipeline_id``.

        ``create`` is accepted for the protocol and not needed: the record is written
        under the commit lock also while the table does not exist (in the staging
        directory), so a zombie's table-creating commit is refused without creating an
        empty table first.
        """
        del create
        if not self.files.exclusive_lock:
            cp = self.latest_checkpoint(pipeline_id) if self.hudi.exists() else None
            self._slots(pipeline_id).fence(epoch, at_least=cp.epoch if cp is not None else 0)
            log.info("fenced Hudi table %s for %s at epoch %d", self.hudi.base, pipeline_id, epoch)
            return
        with self.hudi.locked() as meta:
            current = self._owner_epoch(meta, pipeline_id)
            check_fence(pipeline_id, epoch, current, f"fence of Hudi table {self.hudi.base}")
            if current == epoch:
                return
            self.files.write(
                self._fence_path(meta, pipeline_id),
                encode_entry({"epoch": epoch, "pipeline_id": pipeline_id, "at": time.time()}),
            )
        log.info("fenced Hudi table %s for %s at epoch %d", self.hudi.base, pipeline_id, epoch)

    # -- the instant's own state -----------------------------------------------------------

    def begin(self, instant: str) -> None:
        """``T.commit.requested`` and ``T.inflight`` before any worker stages a file of T,
        so Hudi readers never see staged files (no-op while the table does not exist)."""
        with self.hudi.locked() as meta:
            if not self.hudi.exists():
                return
            self.hudi.check()
            for ts in self.hudi.pending_times():
                if ts < instant and not self.hudi.has_markers(ts):
                    # an earlier instant that staged nothing here (its batch had no rows
                    # for this table, or a crash came before the follower's release)
                    self.hudi.discard_pending(meta, ts)
            if self.files.stat(f"{meta}/{commit_name(instant)}") is not None:
                raise CommitError(f"Hudi table {self.hudi.base}: instant {instant} exists")
            if self.files.stat(f"{meta}/{requested_name(instant)}") is None:
                latest = self.hudi.latest_instant_time()
                if latest is not None and latest >= instant:
                    raise CommitError(
                        f"Hudi table {self.hudi.base}: instant {instant} is not above the "
                        f"timeline's latest instant {latest}"
                    )
            self.hudi.write_pending(meta, instant)

    def abort(self, instant: str) -> None:
        """After the coordinator deleted the instant's files: ``.inflight``, then
        ``.commit.requested``, then the markers (never those of a completed commit)."""
        with self.hudi.locked() as meta:
            if not self.hudi.exists():
                for name in self.files.listdir(meta) or []:  # debris of a failed first commit
                    if name.startswith(f"{instant}."):
                        self.files.delete(f"{meta}/{name}")
                return
            if self._completed(instant):
                log.warning("instant %s is a completed commit: not aborted", instant)
                return
            self.hudi.discard_pending(meta, instant)

    def release(self, instant: str) -> None:
        """The batch of ``instant`` committed elsewhere (the main table) and staged
        nothing here: drop this table's pending ``instant`` (begun for nothing)."""
        with self.hudi.locked() as meta:
            if (
                self.hudi.exists()
                and not self._completed(instant)
                and not self.hudi.has_markers(instant)
            ):
                self.hudi.discard_pending(meta, instant)

    # -- commit --------------------------------------------------------------------------

    def commit(self, files: list[bytes], checkpoint: CommitCheckpoint) -> None:
        """One Hudi commit of ``files`` carrying ``checkpoint``; see the module docstring."""
        started = time.monotonic()
        descs = [describe(f) for f in files]
        instants = {str(d["instant"]) for d in descs}
        if checkpoint.instant is not None:
            instants.add(checkpoint.instant)
        if len(instants) > 1:
            raise CommitError(f"files of several instants in one commit: {sorted(instants)}")
        tags = set()
        for d in descs:
            m = BASE_FILE.match(str(d["fileName"]))
            if m is None:
                raise CommitError(f"staged file {d['fileName']!r} is not a Hudi base file name")
            tags.add(file_tag(m.group("token")))
        tag = tags.pop() if len(tags) == 1 else ""
        cp = checkpoint
        what = f"batch {cp.batch_id} ({cp.incarnation}) of {cp.pipeline_id}"
        with self.hudi.locked() as meta:
            exists = self.hudi.exists()
            if exists:
                self.hudi.check()
            # first: a superseded writer stops even when a newer one committed its batch
            # for it (recovery recommits a paused writer's instant)
            owner = self._owner_epoch(meta, cp.pipeline_id)
            check_fence(cp.pipeline_id, cp.epoch, owner, f"commit to Hudi table {self.hudi.base}")
            if exists:
                done = self._find_batch(cp.pipeline_id, cp.incarnation, cp.batch_id, cp.batch_end)
                if done is not None:
                    log.info("%s is already Hudi commit %s: not committed again", what, done)
                    return
            ts = instants.pop() if instants else self._mint()
            if cp.instant is None:
                cp = dataclasses.replace(cp, instant=ts)
            for d in descs:
                path = self.files.uri(d["path"])
                size = self.file_size(path)
                if size != int(d["size"]):
                    raise CommitError(
                        f"{what}: staged file {path} is missing or changed "
                        f"(size {size}, staged {d['size']})"
                    )
            keep = {str(d["path"]) for d in descs}
            self.hudi.sweep_strays(meta, ts, tag, keep)
            for partition in sorted({str(d["partitionPath"]) for d in descs}):
                self.hudi.ensure_partition_metadata(partition, ts)
            extra = cp.to_summary()
            extra.update(carry_forward(self._summaries() if exists else (), cp.pipeline_id))
            metadata = commit_metadata_json(descs, self.spec.avro_schema, extra)
            if not self.files.exclusive_lock:
                # the slot is the commit point (fence check included); .commit follows
                self._slots(cp.pipeline_id).commit(cp.epoch, ts, metadata, at_least=owner)
                if exists:
                    self._maybe_trim(meta)
            elif exists:
                self.hudi.complete(meta, ts, metadata)
                self._maybe_trim(meta)
            else:
                self.hudi.create(meta, ts, metadata)
        for follower in self.followers:
            follower.release(ts)
        log.info(
            "%s: Hudi commit %s with %d files, %d records in %s (%.3fs)",
            what,
            ts,
            len(descs),
            sum(int(d["records"]) for d in descs),  # this table's, not the batch's
            self.hudi.base,
            time.monotonic() - started,
        )

    def _mint(self) -> str:
        return next_instant_time(self.hudi.latest_instant_time())

    # -- bounded timeline (pipeline.formats.hudi.trim) -------------------------------------

    def _summaries(self) -> Iterator[dict[str, str]]:
        """``extraMetadata`` of the completed commits, newest first."""
        for ts in self.hudi.completed_commits():
            with contextlib.suppress(FileNotFoundError):
                yield self.hudi.extra_metadata(ts)

    def _maybe_trim(self, meta: str) -> None:
        maybe_trim(self.hudi, meta, self.max_commits, self.trim_every)

    # -- workers -------------------------------------------------------------------------

    def write_context(self, write_id: str, target_bytes: int) -> HudiWriteContext:
        """What the workers need to stage files of ``write_id`` (``<ts>[-<tag>]``; any
        other id -- at-least-once mode -- gets a fresh instant time)."""
        try:
            ts, tag = parse_write_id(write_id)
        except ValueError:
            ts, tag = self._mint(), ""
        return self.hudi.write_context(ts, tag, target_bytes)
