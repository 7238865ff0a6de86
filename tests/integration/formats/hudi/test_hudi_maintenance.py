"""Hudi table maintenance without Spark: compaction as a ``replacecommit``, orphan cleanup
and file statistics on tables built through the adapter's committer, read back with hudi-rs.

The first test is the evidence for the commit shape: what hudi-rs 0.5 does with a
hand-checked replacecommit (replaced groups dropped, time travel, a replace older than
later commits, pending replaces skipped, and why trimming must delete replaced files).
Crashes are simulated by running a compaction's steps by hand and stopping between them.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.drivers import arrow_coords

from pipeline.commit.checkpoint import PIPELINE_ID_KEY
from pipeline.commit.instant import BatchIdentity, next_instant_time
from pipeline.commit.maintenance import COMPACTION_KEY, CompactionPolicy, WriterFence
from pipeline.commit.offsets import PartitionOffsets
from pipeline.errors import FencedError
from pipeline.formats.hudi.committer import HudiCommitter
from pipeline.formats.hudi.compaction import COMPACTION_SLOTS, HudiMaintenance, plan_compaction
from pipeline.formats.hudi.cow_table import HudiTable
from pipeline.formats.hudi.pipeline_tables import HudiTables
from pipeline.formats.hudi.slots import CommitSlots
from pipeline.formats.hudi.status import hudi_table_status
from pipeline.formats.hudi.view import BaseFile, TableView

hudi = pytest.importorskip("hudi")

from integration.formats.hudi.test_hudi_format import (  # noqa: E402
    INC,
    PIPE,
    T0,
    T1,
    TAG,
    checkpoint,
    commit_range,
    expected,
    make_spec,
    read,
    rows,
    stage,
)

POLICY = CompactionPolicy(target_file_size_bytes=1 << 20, min_input_files=3)
DAY = 86_400.0


def snapshot(base: Path | str, as_of: str | None = None) -> list[tuple[Any, ...]]:
    """Every row hudi-rs reads, all columns but ``_hoodie_file_name``, sorted."""
    table = hudi.HudiTableBuilder.from_base_uri(str(base)).build()
    opts = hudi.HudiReadOptions()
    batches = table.read(opts.with_as_of_timestamp(as_of) if as_of else opts)
    if not batches:
        return []
    t = pa.Table.from_batches(batches).drop_columns(["_hoodie_file_name"])
    return sorted(tuple(r.values()) for r in t.to_pylist())


def file_names(base: Path) -> set[str]:
    """Every file under ``base``, ``.hoodie`` included, relative."""
    return {str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()}


def data_files(base: Path) -> set[str]:
    return {f for f in file_names(base) if f.endswith(".parquet") and not f.startswith(".")}


def small_table(base: Path, batches: int = 5, **kw: int) -> HudiCommitter:
    """``batches`` commits of 12 offsets of T0 each: 3 files per commit (one per country)."""
    c = HudiCommitter(HudiTable(make_spec(base)), **kw)
    for b in range(batches):
        commit_range(c, b, b * 12, b * 12 + 12)
    return c


def age(base: Path, rels: set[str], seconds: float) -> None:
    when = time.time() - seconds
    for rel in rels:
        os.utime(base / rel, (when, when))


# -- the commit shape, as hudi-rs reads it -------------------------------------------------


def test_replacecommit_is_honoured_by_hudi_rs(tmp_path: Path) -> None:
    base = tmp_path / "events"
    c = small_table(base, 3)
    before, files_before = snapshot(base), data_files(base)
    last = c.hudi.completed_commits()[0]
    m = HudiMaintenance(c)
    view = TableView.load(c.hudi)
    groups = plan_compaction(view, POLICY)
    assert len(groups) == 3 and all(len(g) == 3 for g in groups)  # 3 files per partition
    # pending: requested, then files written; an ingest commit lands above it
    ts = m.reserve()
    written = m.write(ts, groups)
    assert snapshot(base) == before  # files of a pending replacecommit are not read
    later = commit_range(c, 3, 36, 48)
    assert ts < later
    grown = snapshot(base)
    assert len(grown) == 48
    # completed older than the later commit: the snapshot holds each row once
    assert m.commit(ts, m.claim(), groups, written, None)
    assert snapshot(base) == grown
    got = read(base)
    new_names = {w.rel.split("/")[-1] for w in written}
    assert set(got["_hoodie_file_name"].to_pylist()) - new_names == {
        f.split("/")[-1] for f in data_files(base) if later in f
    }  # only the new files and the later commit's files are opened
    # time travel: before the replace, the replaced files hold the same rows
    assert snapshot(base, last) == before
    assert snapshot(base, ts) == before
    tl = hudi.HudiTableBuilder.from_base_uri(str(base)).build().get_timeline()
    assert [i.timestamp for i in tl.get_completed_replacecommits()] == [ts]
    assert ts not in [i.timestamp for i in tl.get_completed_commits()]  # what verify pins
    # why the trim deletes replaced files: without the replacecommit they are read again
    copy = tmp_path / "copy"
    shutil.copytree(base, copy)
    for name in os.listdir(copy / ".hoodie"):
        if name[:17] <= ts and name[:1].isdigit():
            os.unlink(copy / ".hoodie" / name)
    assert len(snapshot(copy)) == len(grown) + 36  # duplicates: 36 replaced rows again
    assert files_before <= data_files(base)  # replaced files stay for time travel


# -- compaction ------------------------------------------------------------------------------


def test_compaction_keeps_records_checkpoint_and_dedupe(tmp_path: Path) -> None:
    from pipeline.ops.verify.range_ledger import CommitRanges, plan_partitions, range_issues
    from pipeline.ops.verify.tables import HudiSource

    base = tmp_path / "events"
    c = small_table(base, 5)
    before = snapshot(base)
    cp, offsets = c.latest_checkpoint(PIPE), c.committed_offsets(PIPE)
    last_time = c.last_commit_time(PIPE)
    m = HudiMaintenance(c)
    assert m.name == "Hudi table db.events"
    stats = m.file_stats()
    assert stats.files == 15 and stats.bytes == sum(
        (base / f).stat().st_size for f in data_files(base)
    )

    result = m.compact(POLICY)
    assert result.commit is not None and result.attempts == 1
    assert (result.rewritten_files, result.written_files) == (15, 3)
    assert m.compaction_commits() == [result.commit]
    assert snapshot(base) == before  # same rows, meta columns (commit time, seqno) kept
    assert m.file_stats().files == 3
    assert m.file_stats().bytes == result.written_bytes
    doc = json.loads((base / ".hoodie" / f"{result.commit}.replacecommit").read_text())
    assert doc["operationType"] == "CLUSTER"
    assert sum(len(v) for v in doc["partitionToReplaceFileIds"].values()) == 15
    extra = doc["extraMetadata"]
    assert extra[COMPACTION_KEY] == "true" and "schema" in extra
    assert not [k for k in extra if k.startswith("ingest.") and k != COMPACTION_KEY]
    assert not (base / ".hoodie" / ".temp" / result.commit).exists()
    # the checkpoint readers see what they saw
    assert c.latest_checkpoint(PIPE) == cp and c.committed_offsets(PIPE) == offsets
    assert c.last_commit_time(PIPE) == last_time and c.latest_epoch(PIPE) == 1
    assert c.is_committed(BatchIdentity(PIPE, INC, 4))
    assert not c.is_committed(BatchIdentity(PIPE, INC, 5))
    assert c.hudi.completed_commits()[0] < result.commit
    assert "1 compactions" in str(hudi_table_status(c, PIPE).commits)
    # a replayed batch is still skipped, the next one commits
    replay = c.hudi.completed_commits()[0]
    c.commit([], checkpoint(replay, 4, {T0: (48, 60)}))
    commit_range(c, 5, 60, 72)
    assert arrow_coords(read(base)) == expected(T0, 0, 72)
    assert c.committed_offsets(PIPE) == PartitionOffsets({T0: 72})
    # the verifier's view: no compaction among the commits, every offset once
    src = HudiSource(str(base))
    assert all(PIPELINE_ID_KEY in meta for _, meta in src.commits())
    commits = [x for i, mt in src.commits() if (x := CommitRanges.from_metadata(i, mt))]
    assert range_issues(commits) == [] and plan_partitions(commits)[T0].expected == [(0, 72)]
    coords = pa.Table.from_batches(list(src.coordinates()))
    assert arrow_coords(coords) == expected(T0, 0, 72)
    # nothing left to do: no slot taken, no commit
    again = m.compact(POLICY)
    assert again.commit is None and again.attempts == 0


def test_trim_deletes_replaced_files_before_the_replacecommit_leaves(tmp_path: Path) -> None:
    base = tmp_path / "events"
    c = small_table(base, 5, max_commits=2, trim_every=1)
    result = HudiMaintenance(c).compact(POLICY)
    assert result.commit is not None
    replaced = data_files(base)
    for b in range(5, 9):
        commit_range(c, b, b * 12, b * 12 + 12, tp=T1)
    names = os.listdir(base / ".hoodie")
    assert not [n for n in names if n.startswith(result.commit)]  # trimmed with its commits
    assert not [f for f in replaced if f in data_files(base) and result.commit not in f]
    got = arrow_coords(read(base))
    assert got == expected(T0, 0, 60) + expected(T1, 60, 108)


def test_killed_compaction_leaves_the_table_exact_and_the_next_run_cleans_up(
    tmp_path: Path,
) -> None:
    base = tmp_path / "events"
    c = small_table(base, 4, max_commits=2, trim_every=1)
    before = snapshot(base)
    m = HudiMaintenance(c)
    # killed after writing its files, before its commit
    ts = m.reserve()
    written = m.write(ts, plan_compaction(TableView.load(c.hudi), POLICY))
    assert snapshot(base) == before
    ours = {w.rel for w in written}
    age(base, data_files(base), DAY)
    assert m.remove_orphans(60).removed == ()  # files of a pending instant: kept
    # ingest goes on; the timeline is never trimmed past the pending replacecommit
    commit_range(c, 4, 48, 60)
    commit_range(c, 5, 60, 72)
    assert c.hudi.trim_limit() == ts and str(c.hudi.trimmed_through()) < ts
    assert arrow_coords(read(base)) == expected(T0, 0, 72)
    # the next run rolls it back first, then compacts
    result = HudiMaintenance(c).compact(POLICY)
    assert result.commit is not None and result.commit != ts
    assert not ours & data_files(base)
    assert not [n for n in os.listdir(base / ".hoodie") if n.startswith(ts)]
    assert arrow_coords(read(base)) == expected(T0, 0, 72)

    # killed after its commit point (the slot), before writing .replacecommit
    commit_range(c, 6, 72, 84)
    commit_range(c, 7, 84, 96)
    before = snapshot(base)
    m = HudiMaintenance(c)
    epoch = m.claim()
    groups = plan_compaction(TableView.load(c.hudi), CompactionPolicy(1 << 20, 2))
    ts = m.reserve()
    written = m.write(ts, groups)
    frozen = CommitSlots(c.files, COMPACTION_SLOTS, lambda slot: None, "test")
    m.slots = frozen  # the process stops right after the slot is taken
    assert m.commit(ts, epoch, groups, written, None)
    assert not (base / ".hoodie" / f"{ts}.replacecommit").exists()
    assert snapshot(base) == before  # decided but not written: readers see the old files
    HudiMaintenance(c).compact(POLICY)  # the next run writes it first
    assert (base / ".hoodie" / f"{ts}.replacecommit").exists()
    assert snapshot(base) == before and len(TableView.load(c.hudi).live()) < 6


def test_orphan_cleanup_rolls_back_a_compaction_dead_for_longer_than_its_interval(
    tmp_path: Path,
) -> None:
    base = tmp_path / "events"
    c = small_table(base, 4)
    files_before = data_files(base)
    m = HudiMaintenance(c)
    ts = m.reserve()
    m.write(ts, plan_compaction(TableView.load(c.hudi), POLICY))  # then killed
    age(base, data_files(base), DAY)
    assert m.remove_orphans(3600).removed == () and c.hudi.pending_replacecommits() == [ts]
    time.sleep(0.01)
    assert m.remove_orphans(0, dry_run=True).removed == ()  # a dry run changes nothing
    assert c.hudi.pending_replacecommits() == [ts]
    m.remove_orphans(0)
    assert c.hudi.pending_replacecommits() == [] and data_files(base) == files_before
    assert not [n for n in os.listdir(base / ".hoodie") if n.startswith(ts)]
    assert arrow_coords(read(base)) == expected(T0, 0, 48)


def test_failures_between_steps_leave_nothing_behind(tmp_path: Path) -> None:
    base = tmp_path / "events"
    c = small_table(base, 4)
    before, files_before = snapshot(base), file_names(base)

    def boom(step: str) -> None:
        raise RuntimeError(step)

    with pytest.raises(RuntimeError, match="written"):
        HudiMaintenance(c).compact(POLICY, on_step=boom)
    assert snapshot(base) == before
    left = file_names(base) - files_before
    assert not [f for f in left if not f.startswith(".hoodie/.ingest/")]  # only the slot


def test_commits_racing_a_compaction_end_exact(tmp_path: Path) -> None:
    base = tmp_path / "events"
    c = small_table(base, 4)

    def ingest(step: str) -> None:
        if step == "written":
            commit_range(c, 4, 48, 60)

    result = HudiMaintenance(c).compact(POLICY, on_step=ingest)
    assert result.commit is not None and result.attempts == 1  # no conflict: new groups
    assert arrow_coords(read(base)) == expected(T0, 0, 60)

    # a commit that writes a newer slice of an input's file group: the plan no longer
    # holds, its files are rolled back and the next attempt compacts the new slice
    for b in range(5, 9):
        commit_range(c, b, b * 12, b * 12 + 12)
    written_first: list[str] = []

    def upsert(step: str) -> None:
        if step != "written" or written_first:
            return
        written_first.extend(
            f for f in data_files(base) if f.split("_")[-1][:17] == c.hudi.latest_instant_time()
        )
        victim = next(f for f in TableView.load(c.hudi).live() if f.partition == "country=us")
        new_slice(c, victim, 9, 0, 10)

    result = HudiMaintenance(c).compact(POLICY, on_step=upsert)
    assert result.attempts == 2 and result.commit is not None
    assert not set(written_first) & data_files(base)
    assert arrow_coords(read(base)) == expected(T0, 0, 108) + expected(T1, 0, 10)


def new_slice(c: HudiCommitter, f: BaseFile, batch_id: int, first: int, last: int) -> None:
    """A JVM-style upsert: file group ``f.file_id`` gets a newer slice holding its rows plus
    T1 offsets [first, last), in one commit of instant T."""
    base = Path(c.hudi.base)
    ts = next_instant_time(c.hudi.latest_instant_time())
    c.begin(ts)
    batch = rows(T1, first, last)
    batch = batch.set_column(1, "country", pa.array(["us"] * batch.num_rows))
    (staged,) = stage(c, f"{ts}-{TAG}", batch, seed=9000)
    staged_rel = json.loads(staged)["path"]
    parts = [pq.read_table(base / r).replace_schema_metadata(None) for r in (f.rel, staged_rel)]
    new = pa.concat_tables(parts)
    name = f"{f.file_id}_0-0-99_{ts}.parquet"
    new = new.set_column(4, "_hoodie_file_name", pa.array([name] * new.num_rows))
    rel = f"{f.partition}/{name}"
    pq.write_table(new, base / rel)
    os.unlink(base / staged_rel)
    desc = json.loads(staged) | {
        "path": rel,
        "fileId": f.file_id,
        "fileName": name,
        "records": new.num_rows,
        "size": (base / rel).stat().st_size,
    }
    cp = checkpoint(ts, batch_id, {T1: (first, last)})
    c.commit([json.dumps(desc).encode()], cp)


def test_fenced_compaction_is_refused(tmp_path: Path) -> None:
    base = tmp_path / "events"
    c = small_table(base, 4)
    before, files_before = snapshot(base), data_files(base)
    c.fence(PIPE, 2)
    with pytest.raises(FencedError):
        HudiMaintenance(c).compact(POLICY, WriterFence(PIPE, 1))

    def fence(step: str) -> None:
        if step == "written":
            c.fence(PIPE, 3)  # the new owner arrives while the files are written

    with pytest.raises(FencedError):
        HudiMaintenance(c).compact(POLICY, WriterFence(PIPE, 2), on_step=fence)
    assert snapshot(base) == before and data_files(base) == files_before
    assert not c.hudi.pending_replacecommits()
    assert HudiMaintenance(c).compact(POLICY, WriterFence(PIPE, 3)).commit is not None
    assert snapshot(base) == before


# -- orphan cleanup ----------------------------------------------------------------------


def plant_orphans(c: HudiCommitter) -> tuple[set[str], set[str]]:
    """(killed task attempt's late file of a committed instant, rolled-back zombie's
    file), relative paths."""
    ts = commit_range(c, 100, 1000, 1012, tp=T1)
    late = stage(c, f"{ts}-{TAG}", rows(T1, 1000, 1003), seed=555)  # after the commit
    zombie_ts = next_instant_time(c.hudi.latest_instant_time())
    c.begin(zombie_ts)
    c.abort(zombie_ts)  # rolled back; the zombie's task writes after that
    zombie = stage(c, f"{zombie_ts}-{TAG}", rows(T1, 2000, 2003), seed=556)
    commit_range(c, 101, 1012, 1024, tp=T1)
    return {json.loads(d)["path"] for d in late}, {json.loads(d)["path"] for d in zombie}


def test_orphan_cleanup_removes_only_unreferenced_old_files(tmp_path: Path) -> None:
    base = tmp_path / "events"
    c = small_table(base, 5, max_commits=4, trim_every=1)  # early commits get trimmed
    assert c.hudi.trimmed_through() is not None
    assert HudiMaintenance(c).compact(POLICY).commit is not None  # replaced files stay
    late, zombie = plant_orphans(c)
    assert sum(arrow_coords(read(base)).values()) == 60 + 24 + 3  # late copy: read twice
    # a pending instant's file and a protected one
    pending_ts = next_instant_time(c.hudi.latest_instant_time())
    c.begin(pending_ts)
    pending = {json.loads(d)["path"] for d in stage(c, f"{pending_ts}-{TAG}", rows(T1, 3000, 3003))}
    protected_ts = next_instant_time(pending_ts)
    shielded = {
        json.loads(d)["path"] for d in stage(c, f"{protected_ts}-{TAG}", rows(T1, 4000, 4003))
    }
    all_before = file_names(base)
    m = HudiMaintenance(c)
    guard = [str(base / p) for p in shielded]

    young = m.remove_orphans(3600, guard)
    assert young.removed == () and young.too_young == len(late | zombie)
    assert file_names(base) == all_before

    age(base, data_files(base), DAY)  # everything old: only unreferenced files may go
    dry = m.remove_orphans(3600, guard, dry_run=True)
    assert dry.dry_run and {str(Path(p).relative_to(base)) for p in dry.removed} == late | zombie
    assert file_names(base) == all_before

    done = m.remove_orphans(3600, guard)
    assert {str(Path(p).relative_to(base)) for p in done.removed} == late | zombie
    assert done.removed_bytes > 0 and done.errors == ()
    assert done.referenced == len(data_files(base))
    assert file_names(base) == all_before - late - zombie  # nothing else, .hoodie untouched
    assert pending <= data_files(base) and shielded <= data_files(base)
    assert arrow_coords(read(base)) == expected(T0, 0, 60) + expected(T1, 1000, 1024)
    assert m.remove_orphans(0, guard).removed == ()  # protected and pending: at any age


def test_orphan_cleanup_and_compaction_on_s3(s3_server: Any) -> None:
    from integration.formats.hudi.test_hudi_s3 import keys, new_base, read_s3, s3_spec, stage_commit

    base = new_base(s3_server)
    c = HudiCommitter(HudiTable(s3_spec(s3_server, base)))
    for b in range(4):
        stage_commit(c, b, b * 12, b * 12 + 12, epoch=1)
    zombie_ts = next_instant_time(c.hudi.latest_instant_time())
    c.begin(zombie_ts)
    c.abort(zombie_ts)
    zombie = {json.loads(d)["path"] for d in stage(c, f"{zombie_ts}-t1", rows(T0, 900, 903))}
    stage_commit(c, 4, 48, 60, epoch=1)
    m = HudiMaintenance(c)
    result = m.compact(POLICY, WriterFence(PIPE, 1))
    assert result.commit is not None and result.written_files == 3
    before = set(keys(s3_server, base))
    assert m.remove_orphans(3600).too_young == len(zombie)
    done = m.remove_orphans(0)
    assert {p.removeprefix(base + "/") for p in done.removed} == zombie
    assert set(keys(s3_server, base)) == before - zombie
    got = read_s3(s3_server, base)
    assert arrow_coords(got) == expected(T0, 0, 60)
    assert m.file_stats().files == 3


def test_pipeline_tables_give_main_then_dead_letter_maintenance(tmp_path: Path) -> None:
    from integration.formats.hudi.test_hudi_format import _config
    from pipeline.columns import dead_letter_columns
    from pipeline.formats.hudi.schema import HudiTableSpec

    sinks = HudiTables.open(_config(tmp_path))
    main, dead = sinks.maintenance()
    assert (main.name, dead.name) == ("Hudi table db.events", "Hudi table db.events_dead_letter")
    assert main.compact(POLICY).commit is None and dead.file_stats().files == 0  # no tables
    assert dead.remove_orphans(0).removed == ()
    # the dead-letter table: unpartitioned (files in the base path), nested headers
    spec = HudiTableSpec.build(str(tmp_path / "dlq"), "db", "dlq", dead_letter_columns(), (), ())
    c = HudiCommitter(HudiTable(spec))
    headers = spec.arrow_schema.field("headers").type
    for b in range(4):
        batch = pa.record_batch(
            {
                "key": pa.array([b"k", None], pa.binary()),
                "value": pa.array([b"{oops", b"\xff"], pa.binary()),
                "headers": pa.array([[{"key": "h", "value": b"v"}], None], headers),
                "error": ["malformed", "too big"],
                "_kafka_topic": ["t", "t"],
                "_kafka_partition": pa.array([0, 0], pa.int32()),
                "_kafka_offset": pa.array([2 * b, 2 * b + 1], pa.int64()),
                "_kafka_timestamp": pa.array([None, None], pa.timestamp("us", tz="UTC")),
            }
        )
        ts = next_instant_time(c.hudi.latest_instant_time())
        c.commit(stage(c, ts, batch), checkpoint(ts, b, {T0: (2 * b, 2 * b + 2)}))
    before = snapshot(tmp_path / "dlq")
    result = HudiMaintenance(c).compact(POLICY)
    assert (result.rewritten_files, result.written_files) == (4, 1)
    assert snapshot(tmp_path / "dlq") == before and len(before) == 8
