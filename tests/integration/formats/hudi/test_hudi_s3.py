"""Hudi tables on object storage: a real SeaweedFS S3 server, read back with hudi-rs.

* The format on S3 without Spark: table creation with ``hoodie.properties`` last, commits,
  fences ordered by create-if-absent commit slots (a commit racing a fence, a decided but
  unwritten commit materialized by the next owner, a writer paused across slot trimming).
* The pipeline (real Spark) into Hudi on S3: exactly once with dead letters, a lost
  checkpoint resumed from the table, a rolled-back and a recommitted instant.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.drivers import arrow_coords, hudi_read, pipeline_config, produced
from support.s3_fixtures import S3Server

from lab.generator import GeneratorSpec, produce
from pipeline.app import Pipeline
from pipeline.columns import table_columns
from pipeline.commit.instant import BatchIdentity, InstantState, next_instant_time
from pipeline.config import parse_config
from pipeline.errors import FencedError
from pipeline.formats.hudi.committer import HudiCommitter
from pipeline.formats.hudi.cow_table import HudiTable
from pipeline.formats.hudi.schema import HudiTableSpec
from pipeline.formats.hudi.slots import KEEP, CommitSlots
from pipeline.formats.hudi.status import hudi_table_status
from pipeline.ops.verify import verify_pipeline
from pipeline.storage.s3_settings import S3Settings

hudi = pytest.importorskip("hudi")

from integration.formats.hudi.test_hudi_format import FIELDS, INC, PIPE, T0, checkpoint, rows, stage  # noqa: E402


def s3_spec(server: S3Server, base: str) -> HudiTableSpec:
    return HudiTableSpec.build(
        base,
        "db",
        "events",
        table_columns(FIELDS),
        (),
        ("country",),
        S3Settings.from_properties(server.properties()),
    )


def new_base(server: S3Server) -> str:
    return f"s3://{server.new_bucket('hudi')}/lake/{uuid.uuid4().hex[:6]}/events"


def keys(server: S3Server, base: str) -> list[str]:
    bucket, _, prefix = base.removeprefix("s3://").partition("/")
    client = server.client()
    out: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out += [o["Key"][len(prefix) + 1 :] for o in page.get("Contents", [])]
    return out


def read_s3(server: S3Server, base: str) -> pa.Table | None:
    """The table through hudi-rs reading S3 directly (None: no table)."""
    if ".hoodie/hoodie.properties" not in keys(server, base):
        return None
    return hudi_read(base, server)


def stage_commit(c: HudiCommitter, batch_id: int, first: int, last: int, epoch: int) -> str:
    ts = next_instant_time(c.hudi.latest_instant_time())
    c.begin(ts)
    files = stage(c, f"{ts}-t1", rows(T0, first, last), seed=1000 * (batch_id + 1))
    c.commit(files, checkpoint(ts, batch_id, {T0: (first, last)}, epoch))
    return ts


def test_table_on_s3_appears_whole_with_its_first_commit_and_reads_in_hudi_rs(
    s3_server: S3Server,
) -> None:
    base = new_base(s3_server)
    c = HudiCommitter(HudiTable(s3_spec(s3_server, base)))
    c.fence(PIPE, 1)  # before the table exists: a slot, no table
    assert not c.hudi.exists() and read_s3(s3_server, base) is None
    assert not hudi_table_status(c, PIPE).exists  # `ingest status`: "does not exist yet"
    stage_commit(c, 0, 0, 40, epoch=1)
    stage_commit(c, 1, 40, 100, epoch=1)
    status = hudi_table_status(c, PIPE)
    assert status.exists and status.commits is not None and "2 completed" in status.commits
    assert status.last_batch is not None and status.last_batch.batch_id == 1
    assert status.last_batch.committed_at is not None
    table = read_s3(s3_server, base)
    assert table is not None
    assert Counter(arrow_coords(table)) == Counter((T0.topic, T0.partition, o) for o in range(100))
    names = keys(s3_server, base)
    assert not [n for n in names if n.endswith("/")]  # no directory-marker objects
    assert not [n for n in names if n.startswith(".hoodie.init")]  # no staging on S3
    assert not [n for n in names if "/.temp/" in n]  # markers gone with the commits
    assert c.latest_checkpoint(PIPE) is not None and c.latest_epoch(PIPE) == 1


def test_retried_task_debris_on_s3_is_deleted_through_its_markers(s3_server: S3Server) -> None:
    base = new_base(s3_server)
    c = HudiCommitter(HudiTable(s3_spec(s3_server, base)))
    stage_commit(c, 0, 0, 10, epoch=1)
    ts = next_instant_time(c.hudi.latest_instant_time())
    c.begin(ts)
    dead_attempt = stage(c, f"{ts}-t1", rows(T0, 10, 40), seed=3000)
    retry = stage(c, f"{ts}-t1", rows(T0, 10, 40), seed=4000)
    c.commit(retry, checkpoint(ts, 1, {T0: (10, 40)}, 1))
    names = set(keys(s3_server, base))
    assert not {json.loads(d)["path"] for d in dead_attempt} & names
    assert {json.loads(d)["path"] for d in retry} <= names
    table = read_s3(s3_server, base)
    assert Counter(arrow_coords(table)) == Counter((T0.topic, T0.partition, o) for o in range(40))


def test_fence_and_commit_race_through_slots_on_s3(s3_server: S3Server) -> None:
    base = new_base(s3_server)
    zombie = HudiCommitter(HudiTable(s3_spec(s3_server, base)))
    zombie.fence(PIPE, 1)
    stage_commit(zombie, 0, 0, 10, epoch=1)

    # The zombie's commit of batch 1 is decided (its slot landed) but the process stops
    # before writing .commit: the new owner's fence materializes it, so recovery sees it.
    ts = next_instant_time(zombie.hudi.latest_instant_time())
    zombie.begin(ts)
    files = stage(zombie, f"{ts}-t1", rows(T0, 10, 20), seed=5000)
    frozen = CommitSlots(zombie.files, PIPE, lambda slot: None, "test")
    decided = checkpoint(ts, 1, {T0: (10, 20)}, 1)
    metadata = _metadata_of(zombie, files, decided)
    frozen.commit(1, ts, metadata)
    assert not zombie.is_committed(_batch(1, 1))
    owner = HudiCommitter(HudiTable(s3_spec(s3_server, base)))  # another process
    owner.fence(PIPE, 2)
    assert owner.is_committed(_batch(1, 1))
    assert len(read_s3(s3_server, base) or []) == 20

    # A commit of the old epoch after the fence is refused; the table does not change.
    ts2 = next_instant_time(zombie.hudi.latest_instant_time())
    zombie.begin(ts2)
    late = stage(zombie, f"{ts2}-t1", rows(T0, 20, 30), seed=6000)
    with pytest.raises(FencedError, match="epoch 2"):
        zombie.commit(late, checkpoint(ts2, 2, {T0: (20, 30)}, 1))
    with pytest.raises(FencedError):
        zombie.fence(PIPE, 1)
    stage_commit(owner, 2, 20, 30, epoch=2)
    assert Counter(arrow_coords(read_s3(s3_server, base))) == Counter(
        (T0.topic, T0.partition, o) for o in range(30)
    )


def test_writer_paused_across_slot_trimming_cannot_commit(s3_server: S3Server) -> None:
    base = new_base(s3_server)
    c = HudiCommitter(HudiTable(s3_spec(s3_server, base)))
    slots = CommitSlots(c.files, PIPE, lambda slot: None, "test")
    slots.fence(1)
    stale = slots.head()
    assert stale is not None
    for epoch in range(2, KEEP + 4):  # the newer owners' fences trim the old numbers
        slots.fence(epoch)
    assert c.files.stat(f"{slots.root}/{stale.number + 1:012d}") is None  # trimmed

    class Paused(CommitSlots):
        """Reads the head it saw before pausing (the slot after it was trimmed since)."""

        def head(self) -> Any:
            return stale

    with pytest.raises(FencedError, match="paused"):
        Paused(c.files, PIPE, lambda slot: None, "test").commit(1, "20260101000000000", b"{}")
    assert slots.head() is not None and slots.head().epoch == KEEP + 3  # type: ignore[union-attr]


def _batch(batch_id: int, epoch: int) -> Any:
    del epoch
    return BatchIdentity(PIPE, INC, batch_id)


def _metadata_of(c: HudiCommitter, files: list[bytes], cp: Any) -> bytes:
    from pipeline.formats.hudi.commit_metadata import commit_metadata_json
    from pipeline.formats.hudi.writer import describe

    return commit_metadata_json([describe(f) for f in files], c.spec.avro_schema, cp.to_summary())


# -- the pipeline --------------------------------------------------------------------------


def hudi_s3_config(server: S3Server, tmp: Path, bootstrap: str, topic: str, **source: Any) -> Any:
    base = new_base(server)
    sink = {
        "format": "hudi",
        "table": "db.events",
        "hudi": {
            "basePath": base,
            "partitionFields": ["country"],
            "properties": server.properties(),
        },
    }
    # Spark's own checkpoint stays local (under tmp): on S3 it would need hadoop-aws
    return parse_config(pipeline_config(tmp, bootstrap, topic, sink, source=source)), base


def s3_coords(server: S3Server, base: str) -> Counter[tuple[str, int, int]]:
    out: Counter[tuple[str, int, int]] = Counter()
    for b in (base, f"{base}_dead_letter"):
        out.update(arrow_coords(read_s3(server, b)))
    return out


def parquet(server: S3Server, base: str) -> set[str]:
    return {k for k in keys(server, base) if k.endswith(".parquet") and not k.startswith(".")}


@pytest.mark.extended  # CI's budget: the drill stage's Hudi kill and zombie drills run on S3
def test_pipeline_into_hudi_on_s3_exactly_once_recovery_and_lost_checkpoint(
    spark: Any, kafka_broker: Any, s3_server: S3Server, tmp_path: Path
) -> None:
    topic = kafka_broker.new_topic("hudis3", 3)
    bootstrap = kafka_broker.bootstrap_servers
    cfg, base = hudi_s3_config(s3_server, tmp_path, bootstrap, topic, maxRecordsPerTrigger=800)
    r1 = produce(bootstrap, topic, GeneratorSpec(count=1600, malformed_fraction=0.05, seed=71))
    stats = Pipeline(cfg, spark).run()
    assert stats.batches == 2 and stats.dead_letters == r1.malformed
    assert s3_coords(s3_server, base) == produced(r1)

    # staged on S3, crash before the precommit: rolled back (objects deleted), recomputed
    r2 = produce(bootstrap, topic, GeneratorSpec(count=500, malformed_fraction=0.05, seed=72))
    before = parquet(s3_server, base)
    with pytest.raises(Exception, match="fault-injected"):
        Pipeline(_faults(cfg, "after-write:raise"), spark).run()
    staged = parquet(s3_server, base) - before
    assert staged
    p = Pipeline(cfg, spark)
    p.run()
    assert s3_coords(s3_server, base) == produced(r1, r2)
    assert not staged & parquet(s3_server, base)

    # precommitted on S3, crash before the table commit: recommitted without recomputing
    r3 = produce(bootstrap, topic, GeneratorSpec(count=400, seed=73))
    with pytest.raises(Exception, match="fault-injected"):
        Pipeline(_faults(cfg, "after-precommit:raise"), spark).run()
    staged = parquet(s3_server, base)
    p = Pipeline(cfg, spark)
    p.run()
    assert s3_coords(s3_server, base) == produced(r1, r2, r3)
    assert parquet(s3_server, base) == staged  # the same objects, committed: no recompute
    assert p.timeline is not None
    states = Counter(i.state for i in p.timeline.instants())
    assert states[InstantState.ROLLED_BACK] == 1 and not p.timeline.pending()

    # the checkpoint lost: the table on S3 is authoritative
    shutil.rmtree(tmp_path / "checkpoint")
    r4 = produce(bootstrap, topic, GeneratorSpec(count=300, seed=74))
    Pipeline(cfg, spark).run()
    assert s3_coords(s3_server, base) == produced(r1, r2, r3, r4)
    # the independent verifier reads the tables on S3 through hudi-rs as well
    (report,) = verify_pipeline(cfg)
    assert report.ok and report.complete and report.table == base


def _faults(cfg: Any, faults: str) -> Any:
    return cfg.model_copy(update={"commit": cfg.commit.model_copy(update={"faults": faults})})
