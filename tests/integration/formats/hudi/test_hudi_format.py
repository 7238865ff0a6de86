"""The native Hudi writer and committer without Spark: real files, read back with hudi-rs.

Tables are written with :func:`pipeline.formats.hudi.writer.write_base_files` and
:class:`pipeline.formats.hudi.committer.HudiCommitter` (and, for the protocol tests, the real
:class:`~pipeline.commit.coordinator.Coordinator` and the real worker loop
``pipeline.spark.writer.run_task``), then read with the ``hudi`` package (hudi-rs), an
independent reader. Nothing is mocked: crashes are injected fault points (``raise``) and
a second OS process holding the table lock.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import zlib
from collections import Counter
from collections.abc import Sequence
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.drivers import arrow_coords, hudi_base_files, hudi_completed_commits, hudi_coords

from pipeline.columns import FieldSpec, dead_letter_columns, table_columns
from pipeline.commit.checkpoint import CommitCheckpoint
from pipeline.commit.coordinator import Coordinator
from pipeline.commit.faults import FaultInjected, FaultPoints
from pipeline.commit.instant import BatchIdentity, InstantState, Requested, next_instant_time
from pipeline.commit.journal import AlreadyExists
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.commit.types import StagedBatch
from pipeline.config import parse_config
from pipeline.errors import CommitError, ConfigError, FencedError
from pipeline.formats.hudi.committer import HudiCommitter
from pipeline.formats.hudi.cow_table import HudiTable
from pipeline.formats.hudi.layout import BASE_FILE, PARTITION_METADATA
from pipeline.formats.hudi.pipeline_tables import HudiTables
from pipeline.formats.hudi.schema import HudiTableSpec
from pipeline.formats.hudi.writer import write_base_files
from pipeline.spark.writer import collect_staged, run_task

hudi = pytest.importorskip("hudi")

ROOT = Path(__file__).resolve().parents[4]
PIPE, INC = "p1", "inc-1"
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
TAG = "cafe0001"
FIELDS = [
    FieldSpec("id", "string", True),
    FieldSpec("country", "string", True),
    FieldSpec("amount", "decimal(10,2)"),
    FieldSpec("day", "date"),
    FieldSpec("score", "int"),
    FieldSpec("ts", "timestamptz"),
]
COUNTRIES = ("us", "de", "fr")


def make_spec(
    base: Path,
    partition_fields: Sequence[str] = ("country",),
    key_fields: Sequence[str] = (),
    name: str = "events",
) -> HudiTableSpec:
    return HudiTableSpec.build(
        str(base), "db", name, table_columns(FIELDS), key_fields, partition_fields
    )


def rows(tp: TopicPartition, first: int, last: int) -> pa.RecordBatch:
    """Decoded rows of offsets [first, last) of ``tp`` (values derived from the offset)."""
    offs = list(range(first, last))
    n = len(offs)
    return pa.record_batch(
        {
            "id": [f"{tp.topic}-{tp.partition}-{o}" for o in offs],
            "country": [COUNTRIES[o % 3] for o in offs],
            "amount": pa.array([Decimal(o) / 4 for o in offs], pa.decimal128(10, 2)),
            "day": pa.array([date(2024, 1, 1 + o % 28) for o in offs]),
            "score": pa.array([o % 100 for o in offs], pa.int16()),  # narrower than int
            "ts": pa.array(
                [1_700_000_000_000_000 + o for o in offs], pa.timestamp("us", tz="Asia/Tokyo")
            ),
            "_kafka_topic": [tp.topic] * n,
            "_kafka_partition": pa.array([tp.partition] * n, pa.int32()),
            "_kafka_offset": pa.array(offs, pa.int64()),
            "_kafka_timestamp": pa.array([None] * n, pa.timestamp("us", tz="UTC")),
        }
    )


def stage(c: HudiCommitter, write_id: str, batch: pa.RecordBatch, seed: int = 0) -> list[bytes]:
    ctx = c.write_context(write_id, 64 * 1024 * 1024)
    return write_base_files(ctx, [batch], seed)


def checkpoint(
    ts: str,
    batch_id: int,
    ranges: dict[TopicPartition, tuple[int, int]],
    epoch: int = 1,
    incarnation: str = INC,
    records: int | None = None,
) -> CommitCheckpoint:
    end = PartitionOffsets({tp: e for tp, (_, e) in ranges.items()})
    return CommitCheckpoint(
        pipeline_id=PIPE,
        incarnation=incarnation,
        batch_id=batch_id,
        epoch=epoch,
        ranges=ranges,
        committed_offsets=end,
        records=sum(e - s for s, e in ranges.values()) if records is None else records,
        instant=ts,
        batch_end=end,
    )


def commit_range(
    c: HudiCommitter, batch_id: int, first: int, last: int, epoch: int = 1, tp: TopicPartition = T0
) -> str:
    """One whole batch: mint, begin, stage, commit."""
    ts = next_instant_time(c.hudi.latest_instant_time())
    c.begin(ts)
    files = stage(c, f"{ts}-{TAG}", rows(tp, first, last), seed=1000 * (batch_id + 1))
    c.commit(files, checkpoint(ts, batch_id, {tp: (first, last)}, epoch))
    return ts


def read(base: Path | str) -> pa.Table:
    table = hudi.HudiTableBuilder.from_base_uri(str(base)).build()
    batches = table.read()
    if not batches:
        return pa.table({})
    return pa.Table.from_batches(batches)


def expected(tp: TopicPartition, first: int, last: int) -> Counter[tuple[str, int, int]]:
    return Counter((tp.topic, tp.partition, o) for o in range(first, last))


# -- format ------------------------------------------------------------------------------


def test_snapshot_returns_exactly_the_records_with_meta_columns(tmp_path: Path) -> None:
    base = tmp_path / "events"
    c = HudiCommitter(HudiTable(make_spec(base)))
    t1 = commit_range(c, 0, 0, 30)
    t2 = commit_range(c, 1, 30, 75)

    table = read(base)
    assert arrow_coords(table) == expected(T0, 0, 75)
    assert hudi_completed_commits(base) == [t1, t2]  # hudi-rs's timeline: both commits, in order
    assert table.column_names[:5] == [
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
    ]
    by_offset = {r["_kafka_offset"]: r for r in table.to_pylist()}
    seqnos = set()
    for off, r in by_offset.items():
        instant = t1 if off < 30 else t2
        assert r["_hoodie_commit_time"] == instant
        assert r["_hoodie_record_key"] == f"_kafka_topic:t,_kafka_partition:0,_kafka_offset:{off}"
        assert r["_hoodie_partition_path"] == f"country={COUNTRIES[off % 3]}"
        m = BASE_FILE.match(r["_hoodie_file_name"])
        assert m is not None and m.group("instant") == instant
        assert (base / r["_hoodie_partition_path"] / r["_hoodie_file_name"]).is_file()
        assert r["_hoodie_commit_seqno"].startswith(f"{instant}_")
        seqnos.add(r["_hoodie_commit_seqno"])
        # values and types survive: int16 -> int32, Tokyo time -> UTC micros, decimal, date
        assert r["score"] == off % 100 and r["amount"] == Decimal(off) / 4
        assert r["day"] == date(2024, 1, 1 + off % 28) and r["id"] == f"t-0-{off}"
        assert r["ts"].timestamp() * 1_000_000 == pytest.approx(1_700_000_000_000_000 + off)
    assert len(seqnos) == 75
    assert table.schema.field("score").type == pa.int32()
    assert table.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert table.schema.field("amount").type == pa.decimal128(10, 2)

    # the commit metadata as Hudi expects it, with our checkpoint in extraMetadata
    doc = json.loads((base / ".hoodie" / f"{t2}.commit").read_text())
    assert doc["operationType"] == "INSERT" and doc["compacted"] is False
    stats = [s for ss in doc["partitionToWriteStats"].values() for s in ss]
    assert sum(s["numInserts"] for s in stats) == 45
    for s in stats:
        assert s["prevCommit"] == "null"
        assert s["fileSizeInBytes"] == s["totalWriteBytes"] == (base / s["path"]).stat().st_size
        assert s["path"].startswith(s["partitionPath"] + "/")
    extra = doc["extraMetadata"]
    schema = json.loads(extra["schema"])
    assert schema["name"] == "events_record" and schema["namespace"] == "hoodie.events"
    assert not any(f["name"].startswith("_hoodie") for f in schema["fields"])
    assert extra["ingest.pipeline-id"] == PIPE and extra["ingest.instant"] == t2
    assert json.loads(extra["ingest.committed-offsets"]) == {"t": {"0": 75}}
    assert c.committed_offsets(PIPE) == PartitionOffsets({T0: 75})
    assert c.is_committed(BatchIdentity(PIPE, INC, 1)) and c.is_committed(
        BatchIdentity(PIPE, INC, 0)
    )
    assert not c.is_committed(BatchIdentity(PIPE, INC, 2)) and not c.is_committed(
        BatchIdentity(PIPE, "other", 1)
    )
    assert c.latest_epoch(PIPE) == 1


def test_layout_properties_and_partition_metadata(tmp_path: Path) -> None:
    base = tmp_path / "events"
    c = HudiCommitter(HudiTable(make_spec(base)))
    ts = commit_range(c, 0, 0, 9)
    props = dict(
        line.split("=", 1)
        for line in (base / ".hoodie" / "hoodie.properties").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert props["hoodie.table.version"] == "6"
    assert props["hoodie.timeline.layout.version"] == "1"
    assert props["hoodie.table.type"] == "COPY_ON_WRITE"
    assert props["hoodie.table.partition.fields"] == "country"
    assert props["hoodie.table.recordkey.fields"] == "_kafka_topic,_kafka_partition,_kafka_offset"
    assert props["hoodie.table.keygenerator.class"].endswith(".ComplexKeyGenerator")
    assert props["hoodie.table.checksum"] == str(zlib.crc32(b"db.events"))
    assert props["hoodie.table.timeline.timezone"] == "UTC"
    assert "hoodie.table.metadata.partitions" not in props  # metadata table off
    assert not (base / ".hoodie" / "metadata").exists()
    # instant files: requested (empty), inflight, commit; our state only under .hoodie/.ingest
    meta = sorted(os.listdir(base / ".hoodie"))
    assert [f for f in meta if f.startswith(ts)] == [
        f"{ts}.commit",
        f"{ts}.commit.requested",
        f"{ts}.inflight",
    ]
    assert (base / ".hoodie" / f"{ts}.commit.requested").stat().st_size == 0
    assert sorted(os.listdir(base)) == [".hoodie", "country=de", "country=fr", "country=us"]
    for country in COUNTRIES:
        part = base / f"country={country}"
        pm = (part / PARTITION_METADATA).read_text()
        assert f"commitTime={ts}" in pm and "partitionDepth=1" in pm
        (f,) = [p for p in os.listdir(part) if p.endswith(".parquet")]
        m = BASE_FILE.match(f)
        assert m is not None and m.group("file_id").endswith("-0")
        assert m.group("token").endswith(f"-{TAG}") and "." not in f.removesuffix(".parquet")
    assert not (tmp_path / "events" / ".hoodie.init").exists()
    # partition pruning in hudi-rs
    pruned = hudi.HudiTableBuilder.from_base_uri(str(base)).build()
    got = pruned.read(hudi.HudiReadOptions(filters=[("country", "=", "de")]))
    assert set(pa.Table.from_batches(got)["country"].to_pylist()) == {"de"}


def test_hudi_rs_ignores_our_state_inside_hoodie_but_reads_a_sibling_dot_dir(
    tmp_path: Path,
) -> None:
    """Why the journal, lock and fence records live in ``.hoodie/.ingest/``: hudi-rs lists
    every directory under the base path except ``.hoodie`` as a possible partition."""
    base = tmp_path / "events"
    c = HudiCommitter(HudiTable(make_spec(base)))
    commit_range(c, 0, 0, 30)
    journal = base / ".hoodie" / ".ingest" / "journal"
    assert (base / ".hoodie" / ".ingest" / "lock").is_file()
    a_file = base / next(iter(sorted(hudi_base_files(base))))
    inside = base / ".hoodie" / ".ingest" / "tmp" / a_file.name
    inside.parent.mkdir(parents=True, exist_ok=True)
    inside.write_bytes(a_file.read_bytes())
    (journal / "x").mkdir(parents=True, exist_ok=True)
    (journal / "x" / "20240101000000000.requested").write_text("{}")
    assert arrow_coords(read(base)) == expected(T0, 0, 30)  # undisturbed
    beside = base / ".ingest" / "tmp" / a_file.name
    beside.parent.mkdir(parents=True)
    beside.write_bytes(a_file.read_bytes())
    try:
        disturbed = arrow_coords(read(base))
    except Exception:  # hudi-rs may also refuse the duplicate file id
        disturbed = None
    assert disturbed != expected(T0, 0, 30)


def test_unpartitioned_table_with_a_configured_key(tmp_path: Path) -> None:
    base = tmp_path / "flat"
    c = HudiCommitter(HudiTable(make_spec(base, partition_fields=(), key_fields=("id",))))
    commit_range(c, 0, 0, 12)
    commit_range(c, 1, 12, 20, tp=T1)
    table = read(base)
    assert arrow_coords(table) == expected(T0, 0, 12) + expected(T1, 12, 20)
    assert set(table["_hoodie_partition_path"].to_pylist()) == {""}
    assert sorted(table["_hoodie_record_key"].to_pylist()) == sorted(table["id"].to_pylist())
    assert "NonpartitionedKeyGenerator" in (base / ".hoodie" / "hoodie.properties").read_text()
    assert "partitionDepth=0" in (base / PARTITION_METADATA).read_text()


def test_awkward_partition_values_are_escaped_and_read_back(tmp_path: Path) -> None:
    fields = [FieldSpec("k", "string", True), FieldSpec("c", "string")]
    spec = HudiTableSpec.build(str(tmp_path / "t"), "db", "t", table_columns(fields), ["k"], ["c"])
    c = HudiCommitter(HudiTable(spec))
    values = ["a/b", "x=y", "", None, "plain", "%41"]
    n = len(values)
    batch = pa.record_batch(
        {
            "k": [f"k{i}" for i in range(n)],
            "c": pa.array(values, pa.string()),
            "_kafka_topic": ["t"] * n,
            "_kafka_partition": pa.array([0] * n, pa.int32()),
            "_kafka_offset": pa.array(range(n), pa.int64()),
            "_kafka_timestamp": pa.array([None] * n, pa.timestamp("us", tz="UTC")),
        }
    )
    ts = next_instant_time(None)
    c.commit(stage(c, ts, batch), checkpoint(ts, 0, {T0: (0, n)}))
    got = {r["k"]: r for r in read(tmp_path / "t").to_pylist()}
    assert {k: r["c"] for k, r in got.items()} == {f"k{i}": v for i, v in enumerate(values)}
    paths = {r["c"]: r["_hoodie_partition_path"] for r in got.values()}
    assert paths["a/b"] == "c=a%2Fb" and paths["x=y"] == "c=x%3Dy" and paths["%41"] == "c=%2541"
    assert paths[None] == paths[""] == "c=__HIVE_DEFAULT_PARTITION__"


def test_dead_letter_schema_with_nested_headers(tmp_path: Path) -> None:
    spec = HudiTableSpec.build(str(tmp_path / "dlq"), "db", "dlq", dead_letter_columns(), (), ())
    c = HudiCommitter(HudiTable(spec))
    headers_type = spec.arrow_schema.field("headers").type
    batch = pa.record_batch(
        {
            "key": pa.array([b"k0", None], pa.binary()),
            "value": pa.array([b"{oops", b"\xff"], pa.binary()),
            "headers": pa.array([[{"key": "h", "value": b"v"}], None], headers_type),
            "error": ["malformed", "too big"],
            "_kafka_topic": ["t", "t"],
            "_kafka_partition": pa.array([0, 1], pa.int32()),
            "_kafka_offset": pa.array([5, 6], pa.int64()),
            "_kafka_timestamp": pa.array([None, None], pa.timestamp("us", tz="UTC")),
        }
    )
    ts = next_instant_time(None)
    c.commit(stage(c, ts, batch), checkpoint(ts, 0, {T0: (5, 6), T1: (6, 7)}))
    got = sorted(read(tmp_path / "dlq").to_pylist(), key=lambda r: r["_kafka_offset"])
    assert [r["value"] for r in got] == [b"{oops", b"\xff"]
    assert got[0]["headers"] == [{"key": "h", "value": b"v"}] and got[1]["headers"] is None
    assert [r["error"] for r in got] == ["malformed", "too big"]


# -- visibility: pending, rolled back, strays ----------------------------------------------


def test_files_of_pending_and_rolled_back_instants_are_never_returned(tmp_path: Path) -> None:
    base = tmp_path / "events"
    c = HudiCommitter(HudiTable(make_spec(base)))
    t1 = commit_range(c, 0, 0, 20)
    # a pending instant: requested + inflight written before staging, no commit
    t2 = next_instant_time(t1)
    c.begin(t2)
    pending = stage(c, f"{t2}-{TAG}", rows(T0, 20, 40), seed=7000)
    assert pending and all((base / json.loads(d)["path"]).is_file() for d in pending)
    assert arrow_coords(read(base)) == expected(T0, 0, 20)
    assert hudi_completed_commits(base) == [t1]
    # markers name the staged files while the instant is pending
    assert len(list((base / ".hoodie" / ".temp" / t2).rglob("*.marker.CREATE"))) == len(pending)
    # roll back as the coordinator does: files first, then the instant files
    orphans = c.orphan_files(f"{t2}-{TAG}")
    assert sorted(orphans) == sorted(c.describe(d)[0] for d in pending)
    assert sorted(c.delete_files(orphans)) == sorted(orphans)
    c.abort(t2)
    assert not [f for f in os.listdir(base / ".hoodie") if f.startswith(t2)]
    assert not (base / ".hoodie" / ".temp" / t2).exists()
    assert arrow_coords(read(base)) == expected(T0, 0, 20)
    # the next commit is unaffected
    commit_range(c, 1, 20, 40)
    assert arrow_coords(read(base)) == expected(T0, 0, 40)
    # a file of a completed commit is never deleted by a rollback
    kept = next(iter(hudi_base_files(base)))
    assert c.delete_files([str(base / kept)]) == []
    assert (base / kept).exists()


def test_old_commits_leave_the_timeline_and_their_ranges_are_carried_forward(
    tmp_path: Path,
) -> None:
    from pipeline.commit.checkpoint import RANGES_BEFORE_KEY
    from pipeline.ops.verify.range_ledger import CommitRanges, plan_partitions, range_issues
    from pipeline.ops.verify.tables import HudiSource

    base = tmp_path / "events"
    c = HudiCommitter(HudiTable(make_spec(base)), max_commits=10, trim_every=5)
    times = [commit_range(c, b, b * 3, b * 3 + 3) for b in range(30)]
    active = hudi_completed_commits(base)  # as hudi-rs sees the timeline
    assert 10 <= len(active) < 10 + 5 and active[-1] == times[-1]
    assert len([n for n in os.listdir(base / ".hoodie") if n[:1].isdigit()]) == 3 * len(active)
    # the data files of trimmed commits stay, and hudi-rs still reads every row once
    assert arrow_coords(read(base)) == expected(T0, 0, 90)
    # the oldest retained commit carries what the trimmed ones recorded
    oldest = c.hudi.extra_metadata(active[0])
    start = int(oldest["ingest.batch-id"]) * 3
    assert oldest[RANGES_BEFORE_KEY] == f'{{"t":{{"0":[[0,{start}]]}}}}'
    assert c.hudi.extra_metadata(times[-1])[RANGES_BEFORE_KEY] == '{"t":{"0":[[0,87]]}}'
    # dedupe and fencing work on the bounded timeline; trimmed files are committed files
    assert c.is_committed(BatchIdentity(PIPE, INC, 29))
    trimmed_file = next(f for f in hudi_base_files(base) if f.split("_")[-1][:17] == times[0])
    assert c.delete_files([str(base / trimmed_file)]) == []
    c.fence(PIPE, 2)
    with pytest.raises(FencedError):
        commit_range(c, 30, 90, 93, epoch=1)
    # the verifier sees every committed offset once: no gap, no overlap
    commits = [
        x for i, m in HudiSource(str(base)).commits() if (x := CommitRanges.from_metadata(i, m))
    ]
    assert range_issues(commits) == []
    assert plan_partitions(commits)[T0].expected == [(0, 90)]


def test_trimming_stops_at_a_pending_instant_and_deletes_debris_first(tmp_path: Path) -> None:
    base = tmp_path / "events"
    c = HudiCommitter(HudiTable(make_spec(base)), max_commits=10, trim_every=5)
    commit_range(c, 0, 0, 3)
    # debris: files staged for an instant that has no instant files (a zombie's staging
    # after its instant was rolled back); invisible while the timeline starts before it
    ghost = next_instant_time(c.hudi.latest_instant_time())
    c.begin(ghost)
    debris = stage(c, f"{ghost}-{TAG}", rows(T0, 500, 503), seed=77)
    for name in os.listdir(base / ".hoodie"):
        if name.startswith(ghost):
            os.unlink(base / ".hoodie" / name)
    assert arrow_coords(read(base)) == expected(T0, 0, 3)
    for b in range(1, 15):
        commit_range(c, b, b * 3, b * 3 + 3)
    # a pending instant with staged files stops trimming at its time
    pending = next_instant_time(c.hudi.latest_instant_time())
    c.begin(pending)
    stage(c, f"{pending}-{TAG}", rows(T0, 45, 48), seed=88)
    for b in range(15, 40):
        commit_range(c, b, b * 3, b * 3 + 3, tp=T1)
    through = c.hudi.trimmed_through()
    assert through is not None and ghost < through < pending  # never past the pending one
    assert len(hudi_completed_commits(base)) == 25  # the 25 commits after it: none could go
    assert {i.state for i in c.hudi.instants() if i.time == pending} == {"requested", "inflight"}
    assert all(not (base / json.loads(d)["path"]).exists() for d in debris)
    got = arrow_coords(read(base))
    assert got == expected(T0, 0, 45) + expected(T1, 45, 120)  # no debris, no pending rows


def test_trimming_takes_hudi_housekeeping_along_and_stops_at_a_pending_one(
    tmp_path: Path,
) -> None:
    """A completed ``clean`` / ``rollback`` run by Hudi's own tools leaves with the trim (as
    Hudi's archiver would move it); a pending one stops the trim, like any pending instant."""
    base = tmp_path / "events"
    meta = base / ".hoodie"
    c = HudiCommitter(HudiTable(make_spec(base)), max_commits=10, trim_every=5)

    def hudi_instant(action: str, *states: str) -> list[str]:
        ts = next_instant_time(c.hudi.latest_instant_time())
        names = [f"{ts}.{action}.{s}" if s else f"{ts}.{action}" for s in states]
        for name in names:
            (meta / name).write_bytes(b"Obj\x01")  # Avro metadata we never read
        return names

    commit_range(c, 0, 0, 3)
    done = hudi_instant("clean", "requested", "inflight", "") + hudi_instant(
        "rollback", "requested", "inflight", ""
    )
    for b in range(1, 25):
        commit_range(c, b, b * 3, b * 3 + 3)
    assert str(c.hudi.trimmed_through()) > done[-1][:17]
    assert not [n for n in done if (meta / n).exists()]  # gone with the commits around them
    pending = hudi_instant("clean", "requested", "inflight")
    for b in range(25, 50):
        commit_range(c, b, b * 3, b * 3 + 3)
    assert str(c.hudi.trimmed_through()) < pending[0][:17]  # never past the pending clean
    assert all((meta / n).exists() for n in pending)
    assert len(hudi_completed_commits(base)) >= 25
    assert arrow_coords(read(base)) == expected(T0, 0, 150)


def test_a_table_given_a_metadata_table_by_hudi_is_refused_naming_the_remedy(
    tmp_path: Path,
) -> None:
    """Hudi's tools run with their defaults add a metadata table, which Java readers would list
    files from (missing ours): the writer refuses the table in one line that says how to
    drop it, and takes it again once it is gone."""
    base = tmp_path / "events"
    c = HudiCommitter(HudiTable(make_spec(base)))
    commit_range(c, 0, 0, 3)
    props = base / ".hoodie" / "hoodie.properties"
    plain = props.read_text()
    props.write_text(plain + "hoodie.table.metadata.partitions=column_stats,files\n")
    with pytest.raises(CommitError) as refused:
        commit_range(c, 1, 3, 6)
    assert "\n" not in str(refused.value) and "hoodie.metadata.enable=false" in str(refused.value)
    props.write_text(plain + "hoodie.table.metadata.partitions=\n")  # as Hudi leaves it
    commit_range(c, 1, 3, 6)
    assert arrow_coords(read(base)) == expected(T0, 0, 6)


def test_failed_first_run_leaves_no_table_and_no_visible_orphans(tmp_path: Path) -> None:
    base = tmp_path / "events"
    c = HudiCommitter(HudiTable(make_spec(base)))
    t1 = next_instant_time(None)
    c.fence(PIPE, 1)
    c.begin(t1)  # no table yet: nothing in .hoodie
    staged = stage(c, f"{t1}-{TAG}", rows(T0, 0, 10), seed=1000)
    # a crash inside the creating commit, after the first instant files were staged
    # in the staging directory and before the rename (same state as a kill there)
    staging = base / ".hoodie.init"
    (staging / "hoodie.properties").write_text("hoodie.table.version=6\n")
    (staging / f"{t1}.commit").write_text("{}")
    assert not (base / ".hoodie").exists()  # no half-initialised table
    with pytest.raises(Exception):  # noqa: B017 - hudi-rs: no table at this path
        read(base)
    assert not c.is_committed(BatchIdentity(PIPE, INC, 0)) and c.committed_offsets(PIPE) is None
    assert c.latest_epoch(PIPE) == 1  # the fence lives in the staging directory
    # the next run rolls t1 back (files first) and commits a new instant
    c.delete_files(c.orphan_files(f"{t1}-{TAG}"))
    c.abort(t1)
    assert not list(staging.glob(f"{t1}.*"))
    t2 = next_instant_time(t1)
    c.begin(t2)
    c.commit(stage(c, f"{t2}-{TAG}", rows(T0, 0, 10), seed=2000), checkpoint(t2, 0, {T0: (0, 10)}))
    assert arrow_coords(read(base)) == expected(T0, 0, 10)  # the t1 orphans (older) are gone
    assert hudi_completed_commits(base) == [t2]
    assert not staging.exists() and (base / ".hoodie" / ".ingest" / "fence" / PIPE).is_file()
    assert all(c.describe(d)[0] not in hudi_base_files(base) for d in staged)


def test_stray_files_of_retried_tasks_are_removed_before_the_commit(tmp_path: Path) -> None:
    base = tmp_path / "events"
    c = HudiCommitter(HudiTable(make_spec(base)))
    t1 = commit_range(c, 0, 0, 10)
    t2 = next_instant_time(t1)
    c.begin(t2)
    # attempt 0 of a task stages the batch then dies; attempt 1 stages it again
    dead_attempt = stage(c, f"{t2}-{TAG}", rows(T0, 10, 40), seed=3000)
    retry = stage(c, f"{t2}-{TAG}", rows(T0, 10, 40), seed=4000)
    # a file of another pipeline that happens to share the instant time is not ours
    foreign = (
        base / "country=us" / f"f0000000-0000-0000-0000-000000000000-0_0-1-1-beef0002_{t2}.parquet"
    )
    (base / "country=us" / dead_attempt_name(dead_attempt, "us")).rename(foreign)
    c.commit(retry, checkpoint(t2, 1, {T0: (10, 40)}))
    files = hudi_base_files(base)
    assert all(json.loads(d)["path"] not in files for d in dead_attempt)
    assert all(json.loads(d)["path"] in files for d in retry)
    assert foreign.exists()
    foreign.unlink()
    assert arrow_coords(read(base)) == expected(T0, 0, 40)  # once, although staged twice


def dead_attempt_name(descriptors: list[bytes], country: str) -> str:
    return next(
        json.loads(d)["fileName"]
        for d in descriptors
        if json.loads(d)["partitionPath"] == f"country={country}"
    )


def test_commit_is_idempotent_per_batch(tmp_path: Path) -> None:
    base = tmp_path / "events"
    c = HudiCommitter(HudiTable(make_spec(base)))
    ts = next_instant_time(None)
    files = stage(c, f"{ts}-{TAG}", rows(T0, 0, 10))
    cp = checkpoint(ts, 0, {T0: (0, 10)})
    c.commit(files, cp)
    c.commit(files, cp)  # a recommit after an unknown outcome: nothing happens
    assert hudi_completed_commits(base) == [ts]
    assert arrow_coords(read(base)) == expected(T0, 0, 10)
    # same batch id, other planned range (a restored older checkpoint): not the same batch
    other = PartitionOffsets({T0: 12})
    assert not c.is_committed(BatchIdentity(PIPE, INC, 0), other) and c.is_committed(
        BatchIdentity(PIPE, INC, 0), cp.batch_end
    )


# -- fencing and the lock ---------------------------------------------------------------------


def test_fence_refuses_commits_of_older_epochs(tmp_path: Path) -> None:
    base = tmp_path / "events"
    new_owner = HudiCommitter(HudiTable(make_spec(base)))
    zombie = HudiCommitter(HudiTable(make_spec(base)))
    # fenced before the table exists: the zombie's table-creating commit is refused and
    # no (empty) table is created by the fence
    new_owner.fence(PIPE, 2)
    assert not (base / ".hoodie").exists()
    tz = next_instant_time(None)
    files = stage(zombie, f"{tz}-{TAG}", rows(T0, 0, 10))
    with pytest.raises(FencedError, match="epoch 2"):
        zombie.commit(files, checkpoint(tz, 0, {T0: (0, 10)}, epoch=1))
    assert not (base / ".hoodie").exists()
    zombie.delete_files(zombie.orphan_files(tz))
    commit_range(new_owner, 0, 0, 10, epoch=2)
    assert new_owner.latest_epoch(PIPE) == 2
    # an older epoch can neither fence nor commit any more; a newer one can
    with pytest.raises(FencedError):
        zombie.fence(PIPE, 1)
    t3 = next_instant_time(new_owner.hudi.latest_instant_time())
    with pytest.raises(FencedError):
        zombie.commit(stage(zombie, t3, rows(T0, 10, 20)), checkpoint(t3, 1, {T0: (10, 20)}, 1))
    new_owner.fence(PIPE, 3)
    assert zombie.latest_epoch(PIPE) == 3
    assert arrow_coords(read(base)) == expected(T0, 0, 10)


_HOLDER = """
import sys, time
from pipeline.formats.hudi.committer import HudiCommitter
from pipeline.formats.hudi.cow_table import HudiTable
from pipeline.formats.hudi.schema import HudiTableSpec
from pipeline.columns import FieldSpec, table_columns
fields = [FieldSpec(*f) for f in {fields!r}]
spec = HudiTableSpec.build({base!r}, "db", "events", table_columns(fields), (), ("country",))
c = HudiCommitter(HudiTable(spec))
with c.hudi.locked():
    print("locked", flush=True)
    time.sleep({hold})
    {action}
print("released", flush=True)
"""


def _hold_lock(base: Path, hold: float, action: str = "pass") -> subprocess.Popen[str]:
    fields = [(f.name, f.type, f.required) for f in FIELDS]
    code = textwrap.dedent(_HOLDER).format(fields=fields, base=str(base), hold=hold, action=action)
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_a_fence_racing_a_commit_is_serialised_by_the_lock(tmp_path: Path) -> None:
    """Another process takes the lock, then fences at epoch 3 while holding it; our commit
    at epoch 2 (files staged, about to commit) waits for the lock and is then refused."""
    base = tmp_path / "events"
    c = HudiCommitter(HudiTable(make_spec(base)))
    commit_range(c, 0, 0, 10, epoch=2)
    ts = next_instant_time(c.hudi.latest_instant_time())
    c.begin(ts)
    files = stage(c, f"{ts}-{TAG}", rows(T0, 10, 20))
    proc = _hold_lock(base, 1.0, "c.fence('p1', 3)")
    started = time.monotonic()
    with pytest.raises(FencedError, match="epoch 3"):
        c.commit(files, checkpoint(ts, 1, {T0: (10, 20)}, epoch=2))
    assert time.monotonic() - started >= 0.8  # it waited for the other holder
    assert proc.wait(30) == 0
    assert arrow_coords(read(base)) == expected(T0, 0, 10)


def test_lock_held_elsewhere_times_out_with_a_clear_error(tmp_path: Path) -> None:
    base = tmp_path / "events"
    commit_range(HudiCommitter(HudiTable(make_spec(base))), 0, 0, 5)
    proc = _hold_lock(base, 3.0)
    impatient = HudiCommitter(HudiTable(make_spec(base), lock_timeout_s=0.3))
    with pytest.raises(CommitError, match="held by another writer"):
        impatient.fence(PIPE, 5)
    proc.kill()  # a killed holder releases the lock with its process
    proc.wait(30)
    impatient.fence(PIPE, 5)
    assert impatient.latest_epoch(PIPE) == 5


# -- the protocol end to end (coordinator + worker loop, no Spark) ----------------------------


def _config(tmp: Path, **hudi_cfg: Any) -> Any:
    return parse_config(
        {
            "id": PIPE,
            "source": {"bootstrapServers": "unused:9092", "topics": ["t"]},
            "decode": {
                "schema": [{"name": f.name, "type": f.type, "required": f.required} for f in FIELDS]
            },
            "sink": {
                "format": "hudi",
                "table": "db.events",
                "hudi": {
                    "basePath": str(tmp / "events"),
                    "partitionFields": ["country"],
                    **hudi_cfg,
                },
            },
            "checkpointLocation": str(tmp / "checkpoint"),
        }
    )


def _bad(tp: TopicPartition, o: int) -> bool:
    return o % 11 == 5 if tp.partition == 0 else o % 9 == 4


def _decoded(tp: TopicPartition, first: int, last: int) -> pa.RecordBatch:
    """What the decode step hands the workers: data + Kafka columns, ``_error`` and the
    raw bytes of undecodable records."""
    batch = rows(tp, first, last)
    bad = [_bad(tp, o) for o in range(first, last)]
    n = batch.num_rows
    cols = {name: batch.column(name) for name in batch.schema.names}
    mask = pa.array(bad)
    for name in ("id", "country", "amount", "day", "score", "ts"):
        cols[name] = pa.compute.if_else(mask, pa.nulls(n, cols[name].type), cols[name])
    cols["_error"] = pa.array(["malformed" if b else None for b in bad], pa.string())
    cols["_raw_key"] = pa.array([b"k" if b else None for b in bad], pa.binary())
    cols["_raw_value"] = pa.array([b"{bad" if b else None for b in bad], pa.binary())
    hdr = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    cols["_raw_headers"] = pa.nulls(n, hdr)
    return pa.record_batch(cols)


class MiniSpark:
    """Spark's part of a run, reduced to what the protocol sees: an offset log (batch ends
    planned), a commit log (batches finished), and workers running ``run_task``."""

    def __init__(self) -> None:
        self.offset_log: list[PartitionOffsets] = []
        self.commit_log: set[int] = set()
        self.produced = PartitionOffsets({T0: 0, T1: 0})

    def produce(self, n0: int, n1: int) -> None:
        self.produced = PartitionOffsets({T0: self.produced[T0] + n0, T1: self.produced[T1] + n1})

    def run(self, sinks: HudiTables, faults: str = "") -> None:
        """One driver run (dies at the armed fault like a killed process would)."""
        c = Coordinator(
            PIPE,
            sinks.commit_tables(),
            timeline=sinks.timeline(PIPE),
            faults=FaultPoints(faults),
        )
        c.acquire_epoch(owner="test")
        for batch_id in range(len(self.offset_log)):
            if batch_id not in self.commit_log:  # replayed: planned, not finished
                self._batch(c, sinks, batch_id)
        if not self.offset_log or self.offset_log[-1] != self.produced:
            self.offset_log.append(self.produced)  # new data: a new batch
            self._batch(c, sinks, len(self.offset_log) - 1)

    def _batch(self, c: Coordinator, sinks: HudiTables, batch_id: int) -> None:
        end = self.offset_log[batch_id]
        start = self.offset_log[batch_id - 1] if batch_id else None
        c.run_batch(INC, batch_id, start, end, self._workers(sinks, start, end))
        self.commit_log.add(batch_id)

    @staticmethod
    def _workers(sinks: HudiTables, start: PartitionOffsets | None, end: PartitionOffsets) -> Any:
        def write(write_id: str, drop_below: PartitionOffsets) -> StagedBatch:
            plan = sinks.task_plan(write_id, drop_below)
            out: list[dict[str, Any]] = []
            for seed, tp in enumerate((T0, T1), start=1):
                first = start[tp] if start is not None else 0
                if end[tp] > first:
                    out += run_task(plan, iter([_decoded(tp, first, end[tp])]), seed)
            return collect_staged(out)

        return write


def _all_coords(tmp: Path) -> Counter[tuple[str, int, int]]:
    return hudi_coords(tmp / "events", tmp / "events_dead_letter")


CHAIN = [
    "after-requested",
    "after-write",
    "during-rollback",  # dies while rolling back the previous run's instant
    "after-precommit",
    "after-dead-letter-commit",
    "after-commit",
    "after-commit-before-checkpoint",
]


def test_every_crash_point_then_restart_gives_each_record_exactly_once(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    spark = MiniSpark()
    for i, point in enumerate(CHAIN):
        spark.produce(40 + i, 25 + i)
        with pytest.raises(FaultInjected):
            spark.run(HudiTables.from_config(cfg), f"{point}:raise")
        if i == 0:  # failed first run: no table anywhere, no visible orphan
            assert not (tmp_path / "events" / ".hoodie").exists()
    spark.run(HudiTables.from_config(cfg))  # recovers, then drains
    spark.produce(30, 30)
    spark.run(HudiTables.from_config(cfg))

    want: Counter[tuple[str, int, int]] = Counter()
    for tp in (T0, T1):
        want += expected(tp, 0, spark.produced[tp])
    assert _all_coords(tmp_path) == want  # every record exactly once, main + dead letters
    sinks = HudiTables.from_config(cfg)
    dlq = read(tmp_path / "events_dead_letter")
    assert dlq.num_rows == sum(_bad(tp, o) for tp in (T0, T1) for o in range(spark.produced[tp]))
    assert set(dlq["error"].to_pylist()) == {"malformed"}
    timeline = sinks.timeline(PIPE)
    assert not timeline.pending()
    states = Counter(i.state for i in timeline.instants())
    assert states[InstantState.ROLLED_BACK] >= 2
    # the journal lives inside .hoodie (hudi-rs read above is undisturbed by it)
    assert list(
        (tmp_path / "events" / ".hoodie" / ".ingest" / "journal" / PIPE).rglob("*.rolled_back")
    )
    # no pending Hudi instant, and every base file on disk is in a completed commit
    for base in (tmp_path / "events", tmp_path / "events_dead_letter"):
        table = HudiTable(sinks.main.spec if base.name == "events" else sinks.dead_letter.spec)  # type: ignore[union-attr]
        assert table.exists() and not table.pending_times()
        listed = {
            s["path"]
            for ts in table.completed_commits()
            for ss in table.commit_metadata(ts)["partitionToWriteStats"].values()
            for s in ss
        }
        assert hudi_base_files(base) == listed
    assert sinks.main.committed_offsets(PIPE) == spark.produced


def test_replayed_batch_is_skipped_and_lost_checkpoint_resumes_from_the_table(
    tmp_path: Path,
) -> None:
    cfg = _config(tmp_path)
    spark = MiniSpark()
    spark.produce(30, 20)
    spark.run(HudiTables.from_config(cfg))
    # Spark's commit log lost the batch: the replay is skipped, nothing twice
    spark.commit_log.clear()
    spark.run(HudiTables.from_config(cfg))
    assert len(hudi_completed_commits(tmp_path / "events")) == 1
    sinks = HudiTables.from_config(cfg)
    assert sinks.main.committed_offsets(PIPE) == PartitionOffsets({T0: 30, T1: 20})


def test_dead_letter_table_keeps_no_pending_instant_of_clean_batches(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    spark = MiniSpark()
    spark.produce(12, 0)  # T0 offset 5 is undecodable: the dead-letter table is created
    spark.run(HudiTables.from_config(cfg))
    spark.produce(4, 0)  # offsets 12-15: all good, the dead-letter table gets nothing
    spark.run(HudiTables.from_config(cfg))
    sinks = HudiTables.from_config(cfg)
    assert sinks.dead_letter is not None
    dlq = sinks.dead_letter.hudi
    assert len(dlq.completed_commits()) == 1 and not dlq.pending_times()
    assert len(sinks.main.hudi.completed_commits()) == 2
    assert _all_coords(tmp_path) == expected(T0, 0, 16)


def test_instant_time_is_reserved_in_the_table(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    spark = MiniSpark()
    spark.produce(10, 10)
    spark.run(HudiTables.from_config(cfg))
    sinks = HudiTables.from_config(cfg)
    timeline = sinks.timeline(PIPE)
    latest = sinks.main.hudi.latest_instant_time()
    assert latest is not None and timeline.mint() > latest
    req = Requested(latest, BatchIdentity(PIPE, INC, 9), 1, PartitionOffsets(), PartitionOffsets())
    with pytest.raises(AlreadyExists):  # not above the table's timeline: mint again
        timeline.request(req)
    fresh = timeline.mint()
    timeline.request(Requested(fresh, req.batch, 1, PartitionOffsets(), PartitionOffsets()))
    assert (tmp_path / "events" / ".hoodie" / f"{fresh}.commit.requested").exists()


def test_config_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown column 'nope'"):
        HudiTables.from_config(_config(tmp_path, partitionFields=["nope"]))
    with pytest.raises(ConfigError, match="must be required"):
        HudiTables.from_config(_config(tmp_path, recordKeyFields=["score"]))
    with pytest.raises(ConfigError, match="allowed: string"):
        HudiTables.from_config(_config(tmp_path, partitionFields=["ts"]))
    with pytest.raises(ConfigError, match="local paths, file:/// and s3://"):
        HudiTables.from_config(_config(tmp_path, basePath="gs://bucket/events"))
    with pytest.raises(ConfigError, match="names no bucket|not an s3://bucket"):
        HudiTables.from_config(_config(tmp_path, basePath="s3:///events"))
    bad = _config(tmp_path).model_dump(by_alias=True)
    bad["sink"].pop("hudi")
    with pytest.raises(ConfigError, match="sink.hudi.basePath is required"):
        HudiTables.from_config(parse_config(bad))
    # a table whose partitioning differs from the configuration is refused
    HudiTables.from_config(_config(tmp_path)).main.hudi  # noqa: B018
    commit_range(HudiCommitter(HudiTable(make_spec(tmp_path / "events"))), 0, 0, 3)
    other = HudiTables.from_config(_config(tmp_path, partitionFields=["id"]))
    with pytest.raises(ConfigError, match="cannot change"):
        other.task_plan(next_instant_time(None))
