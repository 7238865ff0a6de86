"""Driver side: catalog access, the consumption checkpoint, and the one-snapshot commit.

Every commit is ONE Iceberg snapshot (a merge-append) whose summary carries the
consumption checkpoint (DESIGN invariant 2): pipeline id, checkpoint incarnation, batch
id, writer epoch, this commit's offset ranges and the cumulative committed offsets. The
table alone therefore tells what was ingested; :meth:`IcebergTableSink.latest_checkpoint`
reads it back by walking the snapshot ancestry.

pyiceberg details this module relies on (pyiceberg 0.12):

* ``Transaction.commit_transaction`` retries a ``CommitFailedException`` by itself
  (``commit.retry.num-retries``, default 4) and rebases appends onto the new head without
  any check -- a fenced zombie's append would land. Tables created here get
  ``commit.retry.num-retries=0``; for tables created elsewhere the transaction runs on a
  local view of the metadata whose properties say 0 (only local: the catalog applies the
  snapshot updates to its own current metadata, the property is never persisted; see
  :func:`_append_view`, which also trims the history pyiceberg would deep-copy). Our own
  retry loop (tenacity) reloads the table, looks for the batch in the ancestry (unknown
  outcome of an earlier attempt), re-checks the writer epoch, and only then appends
  again. Conflicts are retried ``max_commit_attempts`` times; an unreachable catalog
  (connection refused or dropped, 5xx) is retried for ``catalog_retry_s`` seconds, table
  loads included, then fails with a one-line ``CatalogUnavailableError`` naming the
  catalog. A commit whose connection dropped mid-way may have landed: the next attempt
  finds it in the ancestry and does not append it again.
* ``merge_append()`` merges nothing unless the table property
  ``commit.manifest-merge.enabled`` is true; ``commit.manifest.min-count-to-merge``
  (default 100) bounds the manifests per snapshot. Tables created here get ``true`` and
  16; existing tables without these properties get the same values in the local view.
* A merge-append with zero files is allowed and still produces a snapshot (operation
  ``append``, no manifest change): an empty batch advances the committed offsets.
* A missing table is created in the same catalog operation as its first snapshot
  (``create_table_transaction``; DESIGN invariant 9), at the location the workers'
  :class:`~pipeline.formats.iceberg.writer.WriteContext` used.

Bounded history (so commit latency stays flat): every ``expire_every`` commits, main's
ancestors beyond the newest ``max_snapshots`` are expired with pyiceberg's
``ExpireSnapshots`` -- metadata only, no file is deleted (merge-appends carry every live
manifest forward, so the retained snapshots still reference all data files). What the
expired snapshots recorded is carried forward: every commit's summary holds
``ingest.ranges-before`` / ``ingest.data-loss-before``, the merged offset intervals this
pipeline committed (lost) before that commit, so the verifier starts from the oldest
retained snapshot. Expiry is skipped while the oldest retained commit of a pipeline lacks
these keys (tables written before they existed). Dedupe by batch id sees only the retained
history: a replay of a batch older than that is caught by the coordinator's overlap check
(its offsets are below the committed offsets), not appended twice.

Reads: the read-only checks of one batch (epoch, committed offsets, is_committed, write
context) and the commit share one view of the table for up to ``read_cache_s``: the last
load, or the metadata the catalog returned for our own last append (so back-to-back
batches load the metadata once per commit, inside the catalog's commit, not three
times). A stale view is harmless: the append carries "main is still at this head", the
catalog refuses it otherwise, and the retry reloads. A failed attempt, a fence, an expiry
or a table creation drops the view.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlparse

from pyiceberg.catalog import Catalog
from pyiceberg.catalog import load_catalog as _pyiceberg_load_catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    NoSuchPropertyException,
    NoSuchTableError,
    NotInstalledError,
    ServerError,
    ServiceUnavailableError,
    TableAlreadyExistsError,
    TooManyRequestsError,
)
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table, TableProperties
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Snapshot, ancestors_of
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    wait_exponential,
    wait_random,
)

from pipeline.commit.history import (
    DATA_LOSS_BEFORE_KEY,
    DATA_LOSS_KEY,
    PIPELINE_ID_KEY,
    RANGES_BEFORE_KEY,
    RANGES_KEY,
    carry_forward,
    forgettable,
)
from pipeline.commit.history import (
    parse_nested as _parse_nested,
)
from pipeline.commit.history import (
    parse_ranges as _parse_ranges,
)
from pipeline.commit.offsets import TopicPartition
from pipeline.errors import (
    CatalogUnavailableError,
    CommitError,
    ConfigError,
    FencedError,
    PipelineError,
)
from pipeline.formats.iceberg.writer import WriteContext, deserialize_data_file

log = logging.getLogger(__name__)
_T = TypeVar("_T")

__all__ = [
    "BATCH_ID_KEY",
    "COMMITTED_OFFSETS_KEY",
    "DATA_LOSS_BEFORE_KEY",
    "DATA_LOSS_KEY",
    "DEAD_LETTER_RECORDS_KEY",
    "EPOCH_KEY",
    "FENCE_KEY",
    "INCARNATION_KEY",
    "PIPELINE_ID_KEY",
    "RANGES_BEFORE_KEY",
    "RANGES_KEY",
    "RECORDS_KEY",
    "CommitCheckpoint",
    "IcebergTableSink",
    "WriterFencedError",
    "load_catalog",
]

# Snapshot summary keys of the consumption checkpoint (DESIGN invariant 2).
INCARNATION_KEY = "ingest.incarnation"
BATCH_ID_KEY = "ingest.batch-id"
EPOCH_KEY = "ingest.epoch"
COMMITTED_OFFSETS_KEY = "ingest.committed-offsets"  # {"topic": {"partition": next_offset}}
RECORDS_KEY = "ingest.records"
DEAD_LETTER_RECORDS_KEY = "ingest.dead-letter-records"  # optional
INSTANT_KEY = "ingest.instant"  # optional: the journal instant this commit completed
# optional: the batch's planned end offsets (Spark's offset log entry). Part of the batch
# identity: a restored older checkpoint reuses batch ids for different ranges.
BATCH_END_KEY = "ingest.batch-end"
FENCE_KEY = "ingest.fence"  # "true" on the empty snapshot of IcebergTableSink.fence()
# PIPELINE_ID_KEY, RANGES_KEY, DATA_LOSS_KEY, RANGES_BEFORE_KEY, DATA_LOSS_BEFORE_KEY:
# pipeline.commit.history (shared with the Hudi sink's bounded timeline).

#: Properties every table created here gets (user properties win, except retries).
DEFAULT_TABLE_PROPERTIES: dict[str, str] = {
    TableProperties.FORMAT_VERSION: "2",
    TableProperties.MANIFEST_MERGE_ENABLED: "true",
    TableProperties.MANIFEST_MIN_MERGE_COUNT: "16",
}
#: Properties forced on tables created here (DESIGN invariant 7).
FORCED_TABLE_PROPERTIES: dict[str, str] = {TableProperties.COMMIT_NUM_RETRIES: "0"}


class WriterFencedError(FencedError):
    """A newer writer epoch has committed to the table: this writer is a zombie."""

    code = "fenced"


# ---------------------------------------------------------------------------------------
# Catalog
# ---------------------------------------------------------------------------------------

_USERINFO = re.compile(r"(://[^:/@]*):[^@/]*@")


def _mask(uri: str) -> str:
    return _USERINFO.sub(r"\1:***@", uri)


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _ensure_sqlite_dir(uri: str) -> None:
    """The embedded SQLite catalog lives under the warehouse: create its directory."""
    if not uri.startswith("sqlite:///"):
        return
    path = urlparse(uri).path
    if path and path != "/:memory:":
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)


def load_catalog(name: str, properties: Mapping[str, str]) -> Catalog:
    """A pyiceberg catalog; failures become one-line ConfigError / CommitError.

    Examples: ``{"type": "sql", "uri": "sqlite:////abs/catalog.db", "warehouse":
    "file:///abs/warehouse"}``, ``{"type": "sql", "uri": "postgresql+psycopg2://u:p@h/db",
    ...}``, ``{"type": "rest", "uri": "http://host:8181"}``.
    """
    props = {str(k): str(v) for k, v in properties.items()}
    uri = _mask(props.get("uri", ""))
    where = f"catalog {name!r} ({props.get('type', '?')} at {uri or 'no uri'})"
    if "uri" in props:
        try:
            _ensure_sqlite_dir(props["uri"])
        except OSError as e:
            raise ConfigError(f"{where}: cannot create the SQLite directory: {_one_line(e)}") from e
    try:
        return _pyiceberg_load_catalog(name, **props)
    except (ValueError, NoSuchPropertyException, NotInstalledError, ImportError) as e:
        raise ConfigError(f"{where}: {_one_line(e)}") from e
    except Exception as e:
        raise CommitError(f"cannot reach {where}: {_one_line(e)}") from e


# ---------------------------------------------------------------------------------------
# Checkpoint
# ---------------------------------------------------------------------------------------


def _ranges_json(ranges: Mapping[TopicPartition, tuple[int, int]]) -> str:
    nested: dict[str, dict[str, list[int]]] = {}
    for (topic, partition), (start, end) in sorted(ranges.items()):
        nested.setdefault(topic, {})[str(partition)] = [int(start), int(end)]
    return json.dumps(nested, separators=(",", ":"), sort_keys=True)


def _offsets_json(offsets: Mapping[TopicPartition, int]) -> str:
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        nested.setdefault(topic, {})[str(partition)] = int(offset)
    return json.dumps(nested, separators=(",", ":"), sort_keys=True)


def _parse_offsets(text: str, key: str) -> dict[TopicPartition, int]:
    return {tp: int(value) for tp, value in _parse_nested(text, key)}


@dataclass(frozen=True)
class CommitCheckpoint:
    """The consumption checkpoint one table commit records in its snapshot summary.

    ``ranges``: this commit's half-open ``[start, end)`` per (topic, partition);
    ``committed_offsets``: cumulative next offset per (topic, partition) after this commit;
    ``data_loss``: offset ranges skipped because Kafka no longer had them (optional).
    Keys are ``TopicPartition`` named tuples (plain ``(topic, partition)`` tuples compare
    and hash equal, so they work at runtime too).
    """

    pipeline_id: str
    incarnation: str
    batch_id: int
    epoch: int
    ranges: Mapping[TopicPartition, tuple[int, int]]
    committed_offsets: Mapping[TopicPartition, int]
    records: int
    data_loss: Mapping[TopicPartition, tuple[int, int]] | None = None
    dead_letter_records: int = 0
    instant: str | None = None
    batch_end: Mapping[TopicPartition, int] | None = None

    def to_summary(self) -> dict[str, str]:
        """Snapshot summary properties (all strings, JSON for the offset maps)."""
        summary = {
            PIPELINE_ID_KEY: self.pipeline_id,
            INCARNATION_KEY: self.incarnation,
            BATCH_ID_KEY: str(int(self.batch_id)),
            EPOCH_KEY: str(int(self.epoch)),
            RANGES_KEY: _ranges_json(self.ranges),
            COMMITTED_OFFSETS_KEY: _offsets_json(self.committed_offsets),
            RECORDS_KEY: str(int(self.records)),
        }
        if self.data_loss:
            summary[DATA_LOSS_KEY] = _ranges_json(self.data_loss)
        if self.dead_letter_records:
            summary[DEAD_LETTER_RECORDS_KEY] = str(int(self.dead_letter_records))
        if self.instant:
            summary[INSTANT_KEY] = self.instant
        if self.batch_end is not None:
            summary[BATCH_END_KEY] = _offsets_json(self.batch_end)
        return summary

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> CommitCheckpoint | None:
        """The checkpoint in a snapshot summary; None when it carries none.

        A summary with a pipeline id but malformed checkpoint keys raises CommitError.
        """
        pipeline_id = summary.get(PIPELINE_ID_KEY)
        if pipeline_id is None:
            return None
        try:
            data_loss_text = summary.get(DATA_LOSS_KEY)
            return cls(
                pipeline_id=str(pipeline_id),
                incarnation=str(summary[INCARNATION_KEY]),
                batch_id=int(summary[BATCH_ID_KEY]),
                epoch=int(summary[EPOCH_KEY]),
                ranges=_parse_ranges(summary[RANGES_KEY], RANGES_KEY),
                committed_offsets=_parse_offsets(
                    summary[COMMITTED_OFFSETS_KEY], COMMITTED_OFFSETS_KEY
                ),
                records=int(summary[RECORDS_KEY]),
                data_loss=(
                    _parse_ranges(data_loss_text, DATA_LOSS_KEY)
                    if data_loss_text is not None
                    else None
                ),
                dead_letter_records=int(summary.get(DEAD_LETTER_RECORDS_KEY) or 0),
                instant=summary.get(INSTANT_KEY) or None,
                batch_end=(
                    _parse_offsets(summary[BATCH_END_KEY], BATCH_END_KEY)
                    if BATCH_END_KEY in summary
                    else None
                ),
            )
        except (KeyError, ValueError, TypeError) as e:
            raise CommitError(
                f"snapshot summary of pipeline {pipeline_id!r} has a malformed checkpoint: "
                f"{_one_line(e)}"
            ) from e


def _summary_of(snapshot: Snapshot) -> Mapping[str, str]:
    return snapshot.summary.additional_properties if snapshot.summary is not None else {}


# ---------------------------------------------------------------------------------------
# Sink
# ---------------------------------------------------------------------------------------


# Storage errors that waiting does not heal: a few attempts, never the catalog deadline.
_PERMANENT_OS_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


def _is_conflict(exc: BaseException) -> bool:
    """Retried a bounded number of times (``max_commit_attempts``)."""
    return isinstance(
        exc,
        (
            CommitFailedException,  # lost the optimistic-concurrency race
            TableAlreadyExistsError,  # someone created the table first
            *_PERMANENT_OS_ERRORS,
        ),
    )


def _is_unavailable(exc: BaseException) -> bool:
    """The catalog (or storage) did not answer: retried until the catalog deadline."""
    if isinstance(exc, _PERMANENT_OS_ERRORS):
        return False
    if isinstance(
        exc,
        (
            CommitStateUnknownException,  # REST 5xx during commit: ancestry is checked first
            ServiceUnavailableError,
            ServerError,
            TooManyRequestsError,
            OSError,  # network (requests' errors are OSErrors too) or storage hiccups
        ),
    ):
        return True
    # SQL catalog: database down, locked or connection dropped (sqlalchemy is optional).
    return type(exc).__module__.startswith("sqlalchemy") and type(exc).__name__ in (
        "OperationalError",
        "InterfaceError",
    )


def _is_retryable(exc: BaseException) -> bool:
    return _is_conflict(exc) or _is_unavailable(exc)


def _append_view(table: Table) -> Table:
    """The table as our append transaction sees it (a local view, never persisted).

    * Properties: ``commit.retry.num-retries=0`` so pyiceberg does not rebase and re-commit
      by itself after a conflict (our retry re-checks dedupe and fence first), and manifest
      merging on unless the table says otherwise.
    * History: only the head snapshot of ``main``, no snapshot or metadata log.
      pyiceberg's ``Transaction`` deep-copies the whole metadata on every
      ``table_metadata`` access (~15 per append), so commit time would grow linearly with
      the number of snapshots (about 16 ms with 10 and 300 ms with 300 snapshots here) and
      metadata-log entries. An append needs only the head (its manifests, its
      summary totals, the sequence number); the requirement it sends is "main is still at
      the head", checked by the catalog against its own metadata.

    The catalog applies our updates (add snapshot, move ``main``) to ITS current metadata,
    so nothing of this view is written back.
    """
    metadata = table.metadata
    props = dict(metadata.properties)
    props.update(FORCED_TABLE_PROPERTIES)
    for key in (TableProperties.MANIFEST_MERGE_ENABLED, TableProperties.MANIFEST_MIN_MERGE_COUNT):
        props.setdefault(key, DEFAULT_TABLE_PROPERTIES[key])
    head = metadata.snapshot_by_name(MAIN_BRANCH)
    main_ref = metadata.refs.get(MAIN_BRANCH)
    return _local_view(
        table,
        properties=props,
        snapshots=[head] if head is not None else [],
        refs={MAIN_BRANCH: main_ref} if main_ref is not None else {},
        current_snapshot_id=head.snapshot_id if head is not None else None,
    )


def _local_view(table: Table, **update: Any) -> Table:
    """``table`` with its metadata replaced by a copy carrying ``update`` and no history
    logs or statistics: a local view for one transaction, never written back."""
    view = table.metadata.model_copy(
        update={
            "snapshot_log": [],
            "metadata_log": [],
            "statistics": [],
            "partition_statistics": [],
            **update,
        }
    )
    return Table(
        identifier=table.name(),
        metadata=view,
        metadata_location=table.metadata_location,
        io=table.io,
        catalog=table.catalog,
        config=table.config,
    )


_NOTHING_BEFORE = {RANGES_BEFORE_KEY: "{}", DATA_LOSS_BEFORE_KEY: "{}"}


def _expiry_view(table: Table, expired: set[int]) -> Table:
    """The table as our expiry transaction sees it (local, never persisted): only the
    snapshots to expire, so pyiceberg's per-id checks do not deep-copy the whole history.
    The catalog removes them from ITS current metadata (no retry: a conflict just waits
    for the next expiry)."""
    metadata = table.metadata
    return _local_view(
        table,
        properties={**metadata.properties, **FORCED_TABLE_PROPERTIES},
        snapshots=[s for s in metadata.snapshots if s.snapshot_id in expired],
    )


class IcebergTableSink:
    """One Iceberg table as a commit target for one pipeline's batches."""

    def __init__(
        self,
        catalog: Catalog,
        identifier: str | tuple[str, ...],
        schema: Schema,
        partition_spec: PartitionSpec,
        table_properties: Mapping[str, str] | None = None,
        *,
        location: str | None = None,
        max_commit_attempts: int = 8,
        max_ancestry: int = 1000,
        catalog_retry_s: float = 120.0,
        max_snapshots: int = 30,
        expire_every: int = 10,
        read_cache_s: float = 1.0,
    ) -> None:
        self.catalog = catalog
        self.identifier: tuple[str, ...] = Catalog.identifier_to_tuple(identifier)
        if len(self.identifier) < 2:
            raise ConfigError(
                f"table identifier {identifier!r} needs a namespace, e.g. 'db.events'"
            )
        self.schema = schema
        self.partition_spec = partition_spec
        user = dict(table_properties or {})
        for key, value in FORCED_TABLE_PROPERTIES.items():
            if key in user and user[key] != value:
                log.warning(
                    "table property %s=%s ignored: %s (our own retry re-checks the fence)",
                    key,
                    user[key],
                    value,
                )
        self.table_properties: dict[str, str] = {
            **DEFAULT_TABLE_PROPERTIES,
            **user,
            **FORCED_TABLE_PROPERTIES,
        }
        self._location = location.rstrip("/") if location else None
        self.max_commit_attempts = max(1, max_commit_attempts)
        self.max_ancestry = max(1, max_ancestry)
        self.catalog_retry_s = max(0.0, catalog_retry_s)
        self.max_snapshots = max(2, max_snapshots)
        self.expire_every = max(1, expire_every)
        self.read_cache_s = max(0.0, read_cache_s)
        self._retry_scope = threading.local()  # set while a _with_retries loop runs
        # (monotonic time, table) of the last load, shared by the read-only checks
        self._read_view: tuple[float, Table | None] | None = None
        self._snapshots_at_commit = 0  # snapshots in the metadata our last commit saw

    @property
    def name(self) -> str:
        return ".".join(self.identifier)

    # -- state ---------------------------------------------------------------------------

    def load(self) -> Table | None:
        """The table as the catalog has it now, or None when it does not exist.

        An unreachable catalog is retried for ``catalog_retry_s`` (CatalogUnavailableError
        after that)."""

        def once() -> Table | None:
            try:
                return self.catalog.load_table(self.identifier)
            except NoSuchTableError:
                return None

        table = self._with_retries("load", once)
        self._read_view = (time.monotonic(), table)
        return table

    def _load_for_read(self) -> Table | None:
        """The table for read-only checks: the last load if younger than ``read_cache_s``
        (never across one of our own commits), else a fresh one."""
        view = self._read_view
        if view is not None and time.monotonic() - view[0] < self.read_cache_s:
            return view[1]
        return self.load()

    def _forget_read_view(self) -> None:
        self._read_view = None

    def exists(self) -> bool:
        return self._load_for_read() is not None

    def _ancestry(self, table: Table) -> Iterator[Snapshot]:
        for i, snapshot in enumerate(ancestors_of(table.current_snapshot(), table.metadata)):
            if i >= self.max_ancestry:
                return
            yield snapshot

    def _latest(self, table: Table, pipeline_id: str) -> CommitCheckpoint | None:
        for snapshot in self._ancestry(table):
            summary = _summary_of(snapshot)
            if summary.get(PIPELINE_ID_KEY) == pipeline_id:
                return CommitCheckpoint.from_summary(summary)
        return None

    def _find_batch(
        self,
        table: Table,
        pipeline_id: str,
        incarnation: str,
        batch_id: int,
        batch_end: Mapping[TopicPartition, int] | None = None,
    ) -> Snapshot | None:
        for snapshot in self._ancestry(table):
            summary = _summary_of(snapshot)
            if (
                summary.get(PIPELINE_ID_KEY) != pipeline_id
                or summary.get(INCARNATION_KEY) != incarnation
                or FENCE_KEY in summary
            ):
                continue
            try:
                found = int(summary.get(BATCH_ID_KEY, ""))
            except ValueError:
                continue
            if found == batch_id:
                if batch_end is not None and BATCH_END_KEY in summary:
                    logged = _parse_offsets(summary[BATCH_END_KEY], BATCH_END_KEY)
                    if logged != {(t, p): o for (t, p), o in batch_end.items()}:
                        continue  # same id, other range: a restored older checkpoint
                return snapshot
            if found < batch_id:
                return None  # batches of one incarnation commit in order: no need to look further
        return None

    def latest_checkpoint(self, pipeline_id: str) -> CommitCheckpoint | None:
        """The newest checkpoint of ``pipeline_id`` in the current snapshot's ancestry."""
        table = self._load_for_read()
        return self._latest(table, pipeline_id) if table is not None else None

    def committed_offsets(self, pipeline_id: str) -> dict[TopicPartition, int]:
        """Cumulative next offsets ``{(topic, partition): offset}`` (empty: none)."""
        checkpoint = self.latest_checkpoint(pipeline_id)
        return dict(checkpoint.committed_offsets) if checkpoint is not None else {}

    def committed_snapshot_id(
        self,
        pipeline_id: str,
        incarnation: str,
        batch_id: int,
        batch_end: Mapping[TopicPartition, int] | None = None,
    ) -> int | None:
        """The snapshot that committed this batch, if any."""
        table = self._load_for_read()
        if table is None:
            return None
        snapshot = self._find_batch(table, pipeline_id, incarnation, batch_id, batch_end)
        return snapshot.snapshot_id if snapshot is not None else None

    def is_committed(
        self,
        pipeline_id: str,
        incarnation: str,
        batch_id: int,
        batch_end: Mapping[TopicPartition, int] | None = None,
    ) -> bool:
        """True when a snapshot in the ancestry committed (pipeline, incarnation, batch)
        -- with the same planned end offsets, when both sides know them."""
        return self.committed_snapshot_id(pipeline_id, incarnation, batch_id, batch_end) is not None

    # -- write ---------------------------------------------------------------------------

    def _check_schema(self, table: Table) -> None:
        table_schema = table.schema()
        for field in self.schema.fields:
            try:
                existing = table_schema.find_field(field.name)
            except ValueError:
                raise ConfigError(
                    f"column {field.name!r} is configured but table {self.name} has no such "
                    "column; evolve the table schema first"
                ) from None
            if existing.field_type != field.field_type:
                raise ConfigError(
                    f"column {field.name!r} is {field.field_type} in the configuration but "
                    f"{existing.field_type} in table {self.name}"
                )

    def table_location(self) -> str:
        """Where the table lives (or will live: fixed once resolved for a new table)."""
        if self._location is None:
            table = self._load_for_read()
            if table is not None:
                self._location = table.location().rstrip("/")
            else:
                self._location = self._new_table_context("location-probe").table_location
        return self._location

    def _new_table_context(self, write_uuid: str) -> WriteContext:
        # creates the namespace and stages the create: catalog round trips, so they get
        # the same patience as a load (a pooled connection can die with a restarted catalog)
        return self._with_retries(
            "create staging",
            lambda: WriteContext.for_new_table(
                self.catalog,
                self.identifier,
                self.schema,
                self.partition_spec,
                self.table_properties,
                location=self._location,
                write_uuid=write_uuid,
            ),
        )

    def write_context(self, write_uuid: str) -> WriteContext:
        """What the workers need to stage files for the next commit."""
        table = self._load_for_read()
        if table is not None:
            self._check_schema(table)
            return WriteContext.for_table(table, write_uuid)
        ctx = self._new_table_context(write_uuid)
        self._location = ctx.table_location
        return ctx

    # -- commit --------------------------------------------------------------------------

    def commit(
        self,
        data_files: list[bytes],
        checkpoint: CommitCheckpoint,
        *,
        precondition: Callable[[CommitCheckpoint | None], None] | None = None,
    ) -> int:
        """Append ``data_files`` in ONE snapshot carrying ``checkpoint``; its snapshot id.

        Idempotent: when the ancestry already holds this (pipeline, incarnation, batch),
        that snapshot's id is returned and nothing is appended. Fenced: when the table's
        latest checkpoint of this pipeline has a higher epoch, WriterFencedError.
        ``precondition`` is called before every attempt with that latest checkpoint (None
        if none) and may raise to refuse the commit. A conflict with a concurrent commit
        is retried (reload, dedupe, fence check, append) up to ``max_commit_attempts``.
        A missing table is created by the same catalog commit. Zero files still commit a
        snapshot so the checkpoint advances.
        """
        files = [deserialize_data_file(blob) for blob in data_files]
        summary = checkpoint.to_summary()
        what = f"commit of batch {checkpoint.batch_id} ({checkpoint.incarnation})"
        started = time.monotonic()
        # every failed attempt drops the shared view (_commit_once); a success leaves
        # the catalog's answer as the next view
        snapshot_id = self._with_retries(
            what, lambda: self._commit_once(files, checkpoint, summary, precondition)
        )
        self._maybe_expire()
        log.info(
            "%s: %d files, %d records in %s as snapshot %d (%.3fs)",
            what,
            len(files),
            sum(f.record_count for f in files),  # this table's; the checkpoint counts the batch
            self.name,
            snapshot_id,
            time.monotonic() - started,
        )
        return snapshot_id

    def fence(self, pipeline_id: str, epoch: int, *, create: bool = False) -> int | None:
        """Claim the table for writer ``epoch`` of ``pipeline_id`` (DESIGN invariant 7).

        Commits an empty snapshot that repeats the latest checkpoint (same committed
        offsets, no ranges, marked ``ingest.fence=true``) at the new epoch. It moves the
        table's head, so the in-flight commit of an older writer fails its catalog
        assertion, and that writer's retry then sees the newer epoch and raises
        WriterFencedError. Returns the fence snapshot id; None when the table does not
        exist yet (the first commit creates it atomically; a losing creator retries and
        is fenced then) or already carries this epoch. WriterFencedError when a newer
        epoch already committed.
        """

        def once() -> int | None:
            table = self.load()
            if table is None:
                if not create:
                    return None
                # An earlier run may still be alive and about to create the table with its
                # first commit: create it now, empty, carrying the fence. The zombie's
                # create then fails and its retry sees this epoch.
                marker = CommitCheckpoint(
                    pipeline_id=pipeline_id,
                    incarnation="",
                    batch_id=-1,
                    epoch=epoch,
                    ranges={},
                    committed_offsets={},
                    records=0,
                )
                return self._create_with_first_commit(
                    [], {**marker.to_summary(), **_NOTHING_BEFORE, FENCE_KEY: "true"}
                )
            latest = self._latest(table, pipeline_id)
            if latest is not None and latest.epoch >= epoch:
                if latest.epoch > epoch:
                    raise WriterFencedError(
                        f"cannot fence table {self.name} at epoch {epoch}: pipeline "
                        f"{pipeline_id!r} already committed at epoch {latest.epoch}"
                    )
                return None
            marker = CommitCheckpoint(
                pipeline_id=pipeline_id,
                incarnation=latest.incarnation if latest is not None else "",
                batch_id=latest.batch_id if latest is not None else -1,
                epoch=epoch,
                ranges={},
                committed_offsets=latest.committed_offsets if latest is not None else {},
                records=0,
            )
            fence_summary = {
                **marker.to_summary(),
                **self._carried_forward(table, pipeline_id),
                FENCE_KEY: "true",
            }
            return self._append(table, [], fence_summary)

        try:
            snapshot_id = self._with_retries(f"fence of {pipeline_id!r} at epoch {epoch}", once)
        finally:
            self._forget_read_view()
        if snapshot_id is not None:
            log.info("fenced %s for %s at epoch %d", self.name, pipeline_id, epoch)
        return snapshot_id

    def _catalog_description(self) -> str:
        props = getattr(self.catalog, "properties", {}) or {}
        uri = _mask(str(props.get("uri", ""))) or "no uri"
        return f"catalog {self.catalog.name!r} ({props.get('type', '?')} at {uri})"

    def _with_retries(self, what: str, attempt_once: Callable[[], _T]) -> _T:
        """Run ``attempt_once`` until it succeeds: conflicts are retried
        ``max_commit_attempts`` times, an unreachable catalog for ``catalog_retry_s``."""
        if getattr(self._retry_scope, "active", False):
            return attempt_once()  # nested (a load inside a commit): the outer loop retries
        started = time.monotonic()
        conflicts = 0

        def stop(state: RetryCallState) -> bool:
            nonlocal conflicts
            exc = state.outcome.exception() if state.outcome is not None else None
            if exc is not None and _is_unavailable(exc):
                return time.monotonic() - started >= self.catalog_retry_s
            conflicts += 1
            return conflicts >= self.max_commit_attempts

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            if exc is not None and _is_unavailable(exc):
                waited = time.monotonic() - started
                log.warning(
                    "%s unreachable during %s of %s (%s); waited %.0fs of %.0fs, retrying",
                    self._catalog_description(),
                    what,
                    self.name,
                    _one_line(exc),
                    waited,
                    self.catalog_retry_s,
                )
                return
            log.warning(
                "%s to %s: attempt %d failed (%s); retrying",
                what,
                self.name,
                state.attempt_number,
                _one_line(exc) if exc is not None else "?",
            )

        retrying = Retrying(
            stop=stop,
            wait=wait_exponential(multiplier=0.05, max=2.0) + wait_random(0, 0.1),
            retry=retry_if_exception(_is_retryable),
            before_sleep=before_sleep,
            reraise=True,
        )
        self._retry_scope.active = True
        try:
            for attempt in retrying:
                with attempt:
                    return attempt_once()
        except PipelineError:
            raise
        except Exception as e:
            if _is_unavailable(e):
                raise CatalogUnavailableError(
                    f"{self._catalog_description()} unreachable for "
                    f"{time.monotonic() - started:.0f}s (limit commit.catalogRetrySeconds="
                    f"{self.catalog_retry_s:g}) during {what} of {self.name}: {_one_line(e)}"
                ) from e
            raise CommitError(f"{what} to {self.name} failed: {_one_line(e)}") from e
        finally:
            self._retry_scope.active = False
        raise AssertionError("unreachable: tenacity either returns or raises")

    def _check_fence(
        self,
        latest: CommitCheckpoint | None,
        checkpoint: CommitCheckpoint,
        precondition: Callable[[CommitCheckpoint | None], None] | None,
    ) -> None:
        if latest is not None and latest.epoch > checkpoint.epoch:
            raise WriterFencedError(
                f"table {self.name} has commits of pipeline {checkpoint.pipeline_id!r} at "
                f"writer epoch {latest.epoch} (batch {latest.batch_id}); this writer holds "
                f"epoch {checkpoint.epoch} and must stop"
            )
        if precondition is not None:
            precondition(latest)

    def _check_files(self, table: Table, files: list[DataFile]) -> None:
        spec_id = table.metadata.default_spec_id
        for f in files:
            try:
                file_spec = f.spec_id
            except AttributeError:
                continue
            if file_spec != spec_id:
                raise CommitError(
                    f"data file {f.file_path} was written for partition spec {file_spec} but "
                    f"table {self.name} now uses spec {spec_id}; the batch must be rewritten"
                )

    def _commit_once(
        self,
        files: list[DataFile],
        checkpoint: CommitCheckpoint,
        summary: dict[str, str],
        precondition: Callable[[CommitCheckpoint | None], None] | None,
    ) -> int:
        # A view under read_cache_s old (the batch's checks, or our previous commit's
        # result) is as good a base as a fresh load: the catalog refuses the append
        # unless main is still at the view's head, and the retry then reloads.
        try:
            table = self._load_for_read()
            if table is None:
                self._check_fence(None, checkpoint, precondition)
                return self._create_with_first_commit(files, {**summary, **_NOTHING_BEFORE})
            done = self._find_batch(
                table,
                checkpoint.pipeline_id,
                checkpoint.incarnation,
                checkpoint.batch_id,
                checkpoint.batch_end,
            )
            if done is not None:
                log.info(
                    "batch %s (%s) of %s is already in %s (snapshot %d): not appended again",
                    checkpoint.batch_id,
                    checkpoint.incarnation,
                    checkpoint.pipeline_id,
                    self.name,
                    done.snapshot_id,
                )
                return done.snapshot_id
            self._check_fence(self._latest(table, checkpoint.pipeline_id), checkpoint, precondition)
            self._check_files(table, files)
            self._snapshots_at_commit = len(table.metadata.snapshots) + 1
            carried = self._carried_forward(table, checkpoint.pipeline_id)
            return self._append(table, files, {**summary, **carried})
        except BaseException:
            self._forget_read_view()
            raise

    # -- bounded history -----------------------------------------------------------------

    def _carried_forward(self, table: Table, pipeline_id: str) -> dict[str, str]:
        """``ingest.ranges-before`` / ``ingest.data-loss-before`` for the next commit of
        ``pipeline_id`` on ``table``'s head (:func:`pipeline.commit.history.carry_forward`)."""
        ancestry = ancestors_of(table.current_snapshot(), table.metadata)
        return carry_forward((_summary_of(s) for s in ancestry), pipeline_id)

    def _expirable(self, table: Table) -> list[int]:
        """Main's ancestors beyond the newest ``max_snapshots``, when every pipeline with
        commits among them carries their ranges forward
        (:func:`pipeline.commit.history.forgettable`)."""
        ancestry = [
            (str(s.snapshot_id), _summary_of(s))
            for s in ancestors_of(table.current_snapshot(), table.metadata)
        ]
        old = forgettable(ancestry, self.max_snapshots)
        if not old and len(ancestry) > self.max_snapshots:
            log.debug("%s: history not carried forward yet: nothing expired", self.name)
        return [int(i) for i in old]

    def _maybe_expire(self) -> None:
        """Expire old snapshots every ``expire_every`` commits (metadata only). Never fails
        the batch, which is committed already: a failed expiry is retried later."""
        if self._snapshots_at_commit < self.max_snapshots + self.expire_every:
            return
        self._snapshots_at_commit = 0
        try:
            table = self.load()
            if table is None:
                return
            expired = self._expirable(table)
            if expired:
                view = _expiry_view(table, set(expired))
                view.maintenance.expire_snapshots().by_ids(expired).commit()
                log.info("%s: expired %d old snapshots (metadata only)", self.name, len(expired))
        except Exception as e:  # housekeeping: retried after more commits
            log.warning("%s: snapshot expiry failed, retried later: %s", self.name, _one_line(e))
        finally:
            self._forget_read_view()

    def _append(self, table: Table, files: list[DataFile], summary: dict[str, str]) -> int:
        """One merge-append snapshot on top of ``table``'s head; no pyiceberg retry."""
        txn = _append_view(table).transaction()
        with txn.update_snapshot(snapshot_properties=summary).merge_append() as append:
            for f in files:
                append.append_data_file(f)
            snapshot_id = append.snapshot_id
        # the view now holds the catalog's metadata as our commit left it: the next
        # batch's checks (and commit) start from it instead of loading again
        committed = txn.commit_transaction()
        self._read_view = (time.monotonic(), committed)
        return snapshot_id

    def _create_with_first_commit(self, files: list[DataFile], summary: dict[str, str]) -> int:
        location = self.table_location()
        self.catalog.create_namespace_if_not_exists(Catalog.namespace_from(self.identifier))
        txn = self.catalog.create_table_transaction(
            self.identifier,
            self.schema,
            location=location,
            partition_spec=self.partition_spec,
            properties=dict(self.table_properties),
        )
        with txn.update_snapshot(snapshot_properties=summary).merge_append() as append:
            for f in files:
                append.append_data_file(f)
            snapshot_id = append.snapshot_id
        txn.commit_transaction()
        self._forget_read_view()
        log.info("created table %s at %s with its first commit", self.name, location)
        return snapshot_id
