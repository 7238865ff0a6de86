"""Driver side: :class:`HudiSparkCommitter`, the coordinator's ``TableCommitter`` for a
Hudi table that Hudi's own Spark writer writes (:class:`~.client.HudiSparkClient`).

The operators, as the coordinator calls them for instant ``T``:

    begin(T)            nothing: Hudi's REQUESTED is written by the batch's writer right
                        before it writes rows here (a table that gets no rows in a batch
                        gets no pending instant to clean up)
    (write)             Hudi writes the data files of T; one descriptor per written file,
                        carrying Hudi's write statistics (the journal's precommit)
    commit(files, cp)   fence check, then "already committed?" on a fresh read of the
                        timeline, then ``commitStats`` from the descriptors alone with the
                        checkpoint in the extra metadata (T requested first when the batch
                        wrote nothing here)
    abort(T)            Hudi's own rollback of a pending T (its files deleted by Hudi)

Invariants:

* The commit needs only the journal's descriptors: recovery recommits in a process that
  did not write (Hudi's write statistics, the writer schema and the conflict baseline are
  in every descriptor, so no descriptor depends on another).
* Every check that can halt or skip reads Hudi's timeline afresh (hudi-rs, nothing cached).
* Fencing: the fence record (``.hoodie/.ingest/fence/<pipeline>``, where the native
  writer keeps it too) and each commit's epoch; a commit below the higher of the two is
  refused. A zombie that passed the check just before a take-over cannot complete an
  instant the new owner decided about: the new owner recommits a precommitted instant
  itself (the zombie's ``commitStats`` then finds it completed and fails) and rolls the
  others back through Hudi (their instant files gone, so ``commitStats`` fails).
* Data files are deleted only by Hudi (``delete_files`` and ``orphan_files`` leave them to
  :meth:`abort`'s rollback, which finds them by Hudi's markers).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from pipeline.commit.checkpoint import (
    PIPELINE_ID_KEY,
    CheckpointReads,
    CommitCheckpoint,
    find_batch,
)
from pipeline.commit.fence import check_fence
from pipeline.commit.history import carry_forward
from pipeline.commit.instant import parse_instant_time
from pipeline.commit.journal import CorruptEntry, decode_entry, encode_entry
from pipeline.errors import CommitError
from pipeline.formats.base import LastBatch, TableStatus
from pipeline.formats.hudi.instant import Action, Instant
from pipeline.formats.hudi.layout import META_DIR, PROPERTIES, TablePaths
from pipeline.formats.hudi.storage import TableFiles
from pipeline.formats.hudi_spark.client import HudiSparkClient, Written

log = logging.getLogger(__name__)

__all__ = ["HudiSparkCommitter", "descriptors"]


def descriptors(instant: str, written: Written) -> list[bytes]:
    """One journal descriptor per file of ``written`` (a write of ``instant``)."""
    return [
        json.dumps(
            {
                "instant": instant,
                "stat": stat,
                "baseline": written.baseline,
                "schema": written.schema,
            },
            sort_keys=True,
        ).encode()
        for stat in written.stats
    ]


def _load(descriptor: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(descriptor)
        doc["stat_doc"] = json.loads(doc["stat"])
        return dict(doc)
    except (ValueError, KeyError, TypeError) as e:
        raise CommitError(f"not a Hudi write descriptor: {e}") from None


class HudiSparkCommitter(CheckpointReads):
    """A Hudi table written by Hudi's Spark writer (``TableCommitter`` protocol)."""

    def __init__(
        self,
        client: HudiSparkClient,
        files: TableFiles,
        storage_options: Mapping[str, str],
        schema: Callable[[], str],
    ) -> None:
        self.client = client
        self.files = files  # the table's base, for the fence record and file sizes
        self.storage_options = dict(storage_options)  # hudi-rs, for the timeline
        self.schema = schema  # Hudi's writer schema of the table's rows (empty commits)

    @property
    def base(self) -> str:
        return self.client.base_path

    # -- the table's checkpoints (hudi-rs: a fresh read of the timeline every time) ------

    def exists(self) -> bool:
        return self.files.stat(f"{META_DIR}/{PROPERTIES}") is not None

    def _has_commits(self) -> bool:
        """A completed commit on the timeline (``<requested>_<completed>.commit``): until
        then the table may be half created (its properties being written by a batch)."""
        names = self.files.listdir(f"{META_DIR}/timeline") or []
        done = (i for i in map(Instant.parse, names) if i is not None and i.completion_time)
        return any(i.action is Action.COMMIT for i in done)

    def _summaries(self) -> Iterator[tuple[str, dict[str, str]]]:
        """``(instant, extraMetadata)`` of the completed commits, newest first."""
        if not self._has_commits():
            return
        import hudi

        for attempt in range(3):  # hoodie.properties is rewritten in place (upgrades)
            try:
                table = (
                    hudi.HudiTableBuilder.from_base_uri(self.files.uri())
                    .with_storage_options(self.storage_options)
                    .build()
                )
                break
            except Exception as e:  # hudi-rs raises its own HudiCoreError
                if attempt == 2:
                    raise CommitError(f"Hudi table {self.base} is unreadable: {e}") from e
                time.sleep(0.2)
        timeline = table.get_timeline()
        for instant in timeline.get_completed_commits(desc=True):
            doc = json.loads(timeline.get_instant_metadata_in_json(instant))
            extra = doc.get("extraMetadata") or {}
            yield str(instant.timestamp), {str(k): str(v) for k, v in extra.items()}

    def _checkpoints(
        self, pipeline_id: str, summaries: Iterable[tuple[str, dict[str, str]]] | None = None
    ) -> Iterator[tuple[str, CommitCheckpoint]]:
        """``pipeline_id``'s checkpoints in ``summaries`` (default: a fresh read)."""
        for ts, extra in self._summaries() if summaries is None else summaries:
            if extra.get(PIPELINE_ID_KEY) != pipeline_id:
                continue
            cp = CommitCheckpoint.from_summary(extra)
            if cp is not None:
                yield ts, cp

    def refresh(self) -> None:
        """Nothing is cached: every read lists Hudi's timeline anew."""

    def last_commit_time(self, pipeline_id: str) -> float | None:
        """The time of this pipeline's newest instant (its name: our journal mints it)."""
        for ts, _ in self._checkpoints(pipeline_id):
            return parse_instant_time(ts).timestamp()
        return None

    def table(self) -> None:
        return None  # no pyiceberg table (Iceberg-only callers skip)

    def status(self, pipeline_id: str) -> TableStatus:
        """What ``ingest status`` shows: the commits on Hudi's timeline, our last batch."""
        name = f"Hudi table {self.client.options.get('hoodie.table.name', '')} (Hudi's writer)"
        if not self.exists():
            return TableStatus(name, self.base, exists=False)
        summaries = list(self._summaries())  # one read of the timeline serves the rest
        ts, cp = next(self._checkpoints(pipeline_id, summaries), (None, None))
        last = None
        if ts is not None and cp is not None:
            last = LastBatch.of(cp, parse_instant_time(ts).timestamp())
        commits = len(summaries)
        return TableStatus(
            name, self.base, exists=True, commits=f"{commits} completed commits",
            history="timeline", last_batch=last,
        )  # fmt: skip

    # -- fencing -------------------------------------------------------------------------

    def _fence_rel(self, pipeline_id: str) -> str:
        return TablePaths.own(META_DIR, "fence", pipeline_id)

    def _fence_epoch(self, pipeline_id: str) -> int:
        rel = self._fence_rel(pipeline_id)
        data = self.files.read(rel)
        if data is None:
            return 0
        try:
            return int(decode_entry(self.files.uri(rel), data)["epoch"])
        except (CorruptEntry, KeyError, TypeError, ValueError) as e:
            raise CommitError(f"fence record {self.files.uri(rel)} is unreadable: {e}") from None

    def latest_epoch(
        self, pipeline_id: str, summaries: Iterable[tuple[str, dict[str, str]]] | None = None
    ) -> int | None:
        """The higher of the fence record's epoch and the newest commit's (``summaries``:
        the timeline as just read; default: a fresh read)."""
        cp = next((c for _, c in self._checkpoints(pipeline_id, summaries)), None)
        return max(self._fence_epoch(pipeline_id), cp.epoch if cp is not None else 0) or None

    def fence(self, pipeline_id: str, epoch: int, *, create: bool = False) -> None:
        """Record ``epoch`` as the lowest one allowed to commit for ``pipeline_id`` (also
        while the table does not exist: the record needs no table, ``create`` is moot)."""
        del create
        current = self.latest_epoch(pipeline_id) or 0
        check_fence(pipeline_id, epoch, current, f"fence of Hudi table {self.base}")
        if current == epoch:
            return
        record = {"epoch": epoch, "pipeline_id": pipeline_id, "at": time.time()}
        self.files.write(self._fence_rel(pipeline_id), encode_entry(record))
        log.info("fenced Hudi table %s for %s at epoch %d", self.base, pipeline_id, epoch)

    # -- staged files: Hudi's, deleted only by Hudi's rollback -----------------------------

    def describe(self, descriptor: bytes) -> tuple[str, int, int]:
        stat = _load(descriptor)["stat_doc"]
        path = self.files.uri(str(stat["path"]))
        # numInserts: the records this batch added (a rewritten small file holds older ones)
        return path, int(stat.get("fileSizeInBytes") or 0), int(stat.get("numInserts") or 0)

    def file_size(self, path: str) -> int | None:
        base = self.files.uri().rstrip("/") + "/"
        st = self.files.stat(path.removeprefix(base))
        return st.size if st is not None else None

    def delete_files(self, paths: Iterable[str]) -> list[str]:
        del paths  # Hudi's rollback (abort) deletes them, by its markers
        return []

    def orphan_files(self, write_id: str) -> list[str]:
        return []

    # -- the instant -----------------------------------------------------------------------

    def _state(self, instant: str) -> str | None:
        """``T``'s state on Hudi's timeline (REQUESTED, INFLIGHT, COMPLETED), None: absent."""
        if not self.exists():
            return None
        for line in self.client.timeline():
            ts, _action, state = line.split()
            if ts == instant:
                return state
        return None

    def begin(self, instant: str) -> None:
        """Nothing (see the module docstring): the writer requests ``T`` when it writes."""

    def abort(self, instant: str) -> None:
        state = self._state(instant)
        if state is None:
            return
        if state == "COMPLETED":
            log.warning("instant %s is a completed commit of %s: not aborted", instant, self.base)
            return
        if not self.client.rollback(instant):
            raise CommitError(f"Hudi did not roll back instant {instant} of {self.base}")

    def commit(self, files: list[bytes], checkpoint: CommitCheckpoint) -> None:
        started = time.monotonic()
        cp = checkpoint
        what = f"batch {cp.batch_id} ({cp.incarnation}) of {cp.pipeline_id}"
        docs = [_load(f) for f in files]
        instants = {str(d["instant"]) for d in docs} | ({cp.instant} if cp.instant else set())
        if len(instants) != 1:
            raise CommitError(f"{what}: one instant per commit, not {sorted(instants)}")
        instant = instants.pop()
        # one fresh read of the timeline decides the fence, the dedupe and the history
        summaries = list(self._summaries())
        check_fence(
            cp.pipeline_id,
            cp.epoch,
            self.latest_epoch(cp.pipeline_id, summaries),
            f"commit to Hudi table {self.base}",
        )
        mine = self._checkpoints(cp.pipeline_id, summaries)
        if find_batch(mine, cp.incarnation, cp.batch_id, cp.batch_end):
            log.info("%s is already committed to %s: not committed again", what, self.base)
            return
        state = self._state(instant)
        if state == "COMPLETED":
            raise CommitError(f"{what}: Hudi instant {instant} of {self.base} is another commit")
        if state is None:  # the batch wrote nothing here: an empty commit carries the offsets
            self.client.begin(instant)
        written = Written(
            [str(d["stat"]) for d in docs],
            str(docs[0]["baseline"]) if docs else "",
            str(docs[0]["schema"]) if docs else self.schema(),
        )
        extra = cp.to_summary()
        extra.update(carry_forward((s for _, s in summaries), cp.pipeline_id))
        self.client.commit(instant, written, extra)
        log.info(
            "%s: Hudi commit %s with %d files, %d records in %s (%.3fs)",
            what,
            instant,
            len(docs),
            written.records,
            self.base,
            time.monotonic() - started,
        )
