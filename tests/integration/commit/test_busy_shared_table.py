"""A busy shared table: a pipeline's last commit lies behind ≥ 1,500 commits of other
writers and compactions. Its checkpoint (epoch, committed offsets, dedupe, fencing) must
still be found, on both formats (docs/design.md invariant 12).

The foreign commits are metadata only, made directly through the format (one catalog
commit of 1,500 snapshots for Iceberg, instant files for Hudi): no Spark, seconds.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import AddSnapshotUpdate, SetSnapshotRefUpdate

from pipeline.commit.checkpoint import CommitCheckpoint
from pipeline.commit.instant import BatchIdentity, next_instant_time
from pipeline.commit.maintenance import COMPACTION_KEY
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.errors import FencedError
from pipeline.formats.hudi.commit_metadata import commit_metadata_json
from pipeline.formats.hudi.committer import HudiCommitter
from pipeline.formats.hudi.cow_table import HudiTable
from pipeline.formats.hudi.instant import Action, instant_files
from pipeline.formats.hudi.layout import EMPTY_COMMIT_METADATA
from pipeline.formats.iceberg.catalog import load_catalog
from pipeline.formats.iceberg.pipeline_tables import IcebergCommitter

FOREIGN = 1_600  # commits after ours: 1,200 of another pipeline, 400 compactions


def foreign_checkpoint(i: int) -> dict[str, str]:
    tp = TopicPartition("elsewhere", 0)
    return CommitCheckpoint(
        pipeline_id="other",
        incarnation="inc-x",
        batch_id=i,
        epoch=1,
        ranges={tp: (i, i + 1)},
        committed_offsets={tp: i + 1},
        records=1,
    ).to_summary()


def foreign_summary(i: int) -> tuple[str, dict[str, str]]:
    """Commit ``i`` of the busy neighbours: (operation, summary properties)."""
    if i % 4 == 3:
        return Operation.REPLACE.value, {COMPACTION_KEY: "true"}
    return Operation.APPEND.value, foreign_checkpoint(i)


# -- Iceberg -----------------------------------------------------------------------------


def add_foreign_snapshots(catalog: Catalog, identifier: str, n: int) -> None:
    """``n`` metadata-only snapshots on top of main, in one catalog commit."""
    table = catalog.load_table(identifier)
    head = table.current_snapshot()
    assert head is not None
    seq = table.metadata.last_sequence_number
    now = int(time.time() * 1000)
    updates: list[Any] = []
    parent = head.snapshot_id
    for i in range(n):
        operation, props = foreign_summary(i)
        snapshot = Snapshot(
            snapshot_id=10_000_000 + i,
            parent_snapshot_id=parent,
            sequence_number=seq + i + 1,
            timestamp_ms=now + i,
            manifest_list=head.manifest_list,  # the same data: a no-op commit
            summary=Summary(Operation(operation), **props),
            schema_id=head.schema_id,
        )
        updates.append(AddSnapshotUpdate(snapshot=snapshot))
        parent = snapshot.snapshot_id
    updates.append(
        SetSnapshotRefUpdate(ref_name="main", type=SnapshotRefType.BRANCH, snapshot_id=parent)
    )
    catalog.commit_table(table, (), tuple(updates))


def test_iceberg_checkpoint_behind_1500_foreign_and_compaction_commits(tmp_path: Path) -> None:
    from integration.formats.iceberg.test_iceberg_adapter import (
        checkpoint,
        make_sink,
        write_and_commit,
    )

    props = {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": (tmp_path / "warehouse").as_uri(),
    }
    sink = make_sink(load_catalog("busy", props))
    write_and_commit(sink, 0, 0, 10, epoch=7)
    write_and_commit(sink, 1, 10, 5, epoch=7)
    add_foreign_snapshots(sink.catalog, "db.events", FOREIGN)
    sink.refresh()

    latest = sink.latest_checkpoint("p1")
    assert latest is not None, "the checkpoint behind the foreign commits was not found"
    assert (latest.batch_id, latest.epoch) == (1, 7)
    assert sink.committed_offsets("p1") == {("orders", 0): 15}
    assert sink.is_committed("p1", "inc-a", 1) and sink.is_committed("p1", "inc-a", 0)
    committer = IcebergCommitter(sink, {})
    assert committer.last_commit_time("p1") is not None
    # fencing sees the epoch: a writer of an older epoch is refused
    try:
        sink.commit([], checkpoint(2, 15, 16, epoch=6))
        raise AssertionError("a commit of an older epoch went through")
    except FencedError:
        pass
    # a replay of batch 1 is not appended again; the next batch carries ranges forward
    snapshots = len(sink.load().metadata.snapshots)  # type: ignore[union-attr]
    write_and_commit(sink, 1, 10, 5, epoch=7)
    assert len(sink.load().metadata.snapshots) == snapshots  # type: ignore[union-attr]
    write_and_commit(sink, 2, 15, 5, epoch=7)
    latest = sink.latest_checkpoint("p1")
    assert latest is not None and latest.batch_id == 2
    assert latest.committed_offsets == {("orders", 0): 20}


# -- Hudi --------------------------------------------------------------------------------


def add_foreign_instants(c: HudiCommitter, n: int) -> None:
    """``n`` completed instants of other writers (commits and replacecommits), no files."""
    with c.hudi.locked() as meta:
        ts = c.hudi.latest_instant_time()
        for i in range(n):
            ts = next_instant_time(ts)
            operation, props = foreign_summary(i)
            if operation == Operation.REPLACE.value:
                completed = instant_files(ts, Action.REPLACE_COMMIT)[2]
                c.files.write(f"{meta}/{completed}", EMPTY_COMMIT_METADATA)
            else:
                extra = {**props, "ingest.ranges-before": "{}", "ingest.data-loss-before": "{}"}
                c.files.write(
                    f"{meta}/{ts}.commit", commit_metadata_json([], c.spec.avro_schema, extra)
                )


def test_hudi_checkpoint_behind_1500_foreign_and_compaction_commits(tmp_path: Path) -> None:
    from integration.formats.hudi.test_hudi_format import (
        INC,
        PIPE,
        T0,
        checkpoint,
        commit_range,
        make_spec,
    )

    base = tmp_path / "events"
    c = HudiCommitter(HudiTable(make_spec(base)))
    commit_range(c, 0, 0, 10, epoch=7)
    commit_range(c, 1, 10, 15, epoch=7)
    add_foreign_instants(c, FOREIGN)
    fresh = HudiCommitter(HudiTable(make_spec(base)))  # nothing cached

    latest = fresh.latest_checkpoint(PIPE)
    assert latest is not None, "the checkpoint behind the foreign commits was not found"
    assert (latest.batch_id, latest.epoch) == (1, 7)
    assert fresh.committed_offsets(PIPE) == PartitionOffsets({T0: 15})
    assert fresh.is_committed(BatchIdentity(PIPE, INC, 1))
    assert fresh.last_commit_time(PIPE) is not None
    ts = next_instant_time(fresh.hudi.latest_instant_time())
    try:  # fencing sees the epoch
        fresh.commit([], checkpoint(ts, 2, {T0: (15, 16)}, epoch=6))
        raise AssertionError("a commit of an older epoch went through")
    except FencedError:
        pass
    commit_range(fresh, 2, 15, 20, epoch=7)
    latest = fresh.latest_checkpoint(PIPE)
    assert latest is not None and latest.batch_id == 2
    assert dict(latest.committed_offsets) == {T0: 20}
