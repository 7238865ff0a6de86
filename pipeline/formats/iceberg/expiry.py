"""Local metadata views for one transaction, and bounded history.

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
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

from pyiceberg.table import Table, TableProperties
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Snapshot

from pipeline.commit.checkpoint import DATA_LOSS_BEFORE_KEY, RANGES_BEFORE_KEY
from pipeline.commit.history import carry_forward, forgettable
from pipeline.formats.iceberg.pyiceberg_internals import local_view

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_TABLE_PROPERTIES",
    "FORCED_TABLE_PROPERTIES",
    "NOTHING_BEFORE",
    "ancestry",
    "append_view",
    "carried_forward",
    "expirable",
    "expiry_view",
    "summary_of",
]

#: Properties every table created here gets (user properties win, except retries).
DEFAULT_TABLE_PROPERTIES: dict[str, str] = {
    TableProperties.FORMAT_VERSION: "2",
    TableProperties.MANIFEST_MERGE_ENABLED: "true",
    TableProperties.MANIFEST_MIN_MERGE_COUNT: "16",
}
#: Properties forced on tables created here (docs/design.md invariant 7).
FORCED_TABLE_PROPERTIES: dict[str, str] = {TableProperties.COMMIT_NUM_RETRIES: "0"}


def summary_of(snapshot: Snapshot) -> Mapping[str, str]:
    return snapshot.summary.additional_properties if snapshot.summary is not None else {}


def ancestry(table: Table) -> Iterator[Snapshot]:
    """Main's snapshots, head first, down to the oldest retained one -- no count limit
    (docs/design.md invariant 12): a pipeline's newest commit may lie behind any number
    of other writers' commits and compactions, and its checkpoint must still be found.
    The metadata is in memory already; the walk indexes it once, since pyiceberg's
    ``ancestors_of`` looks each parent up by a linear scan (quadratic in the history)."""
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    snapshot = table.current_snapshot()
    seen: set[int] = set()
    while snapshot is not None and snapshot.snapshot_id not in seen:
        seen.add(snapshot.snapshot_id)  # a corrupt parent cycle must not loop forever
        yield snapshot
        parent = snapshot.parent_snapshot_id
        snapshot = by_id.get(parent) if parent is not None else None


def carried_forward(table: Table, pipeline_id: str) -> dict[str, str]:
    """``ingest.ranges-before`` / ``ingest.data-loss-before`` for the next commit of
    ``pipeline_id`` on ``table``'s head (:func:`pipeline.commit.history.carry_forward`)."""
    return carry_forward((summary_of(s) for s in ancestry(table)), pipeline_id)


def expirable(table: Table, max_snapshots: int) -> list[int]:
    """Main's ancestors beyond the newest ``max_snapshots``, when every pipeline with
    commits among them carries their ranges forward
    (:func:`pipeline.commit.history.forgettable`)."""
    commits = [(str(s.snapshot_id), summary_of(s)) for s in ancestry(table)]
    old = forgettable(commits, max_snapshots)
    if not old and len(commits) > max_snapshots:
        log.debug("%s: history not carried forward yet: nothing expired", ".".join(table.name()))
    return [int(i) for i in old]


def append_view(table: Table) -> Table:
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
    return local_view(
        table,
        properties=props,
        snapshots=[head] if head is not None else [],
        refs={MAIN_BRANCH: main_ref} if main_ref is not None else {},
        current_snapshot_id=head.snapshot_id if head is not None else None,
    )


NOTHING_BEFORE = {RANGES_BEFORE_KEY: "{}", DATA_LOSS_BEFORE_KEY: "{}"}


def expiry_view(table: Table, expired: set[int]) -> Table:
    """The table as our expiry transaction sees it (local, never persisted): only the
    snapshots to expire, so pyiceberg's per-id checks do not deep-copy the whole history.
    The catalog removes them from ITS current metadata (no retry: a conflict just waits
    for the next expiry)."""
    metadata = table.metadata
    return local_view(
        table,
        properties={**metadata.properties, **FORCED_TABLE_PROPERTIES},
        snapshots=[s for s in metadata.snapshots if s.snapshot_id in expired],
    )
