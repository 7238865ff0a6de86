"""Journal and warehouse on a real S3-compatible store (SeaweedFS, started per session).

No mocks of the store: every test talks HTTP to ``weed server``. Where a test needs a
failure the store would not produce on demand (a lost response, a 409 conflict), a thin
wrapper around the real boto3 client injects it and still sends the real request.
Everything skips with the reason when SeaweedFS cannot start (see tests/support/s3_fixtures.py).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from support.drivers import coords, iceberg_config, produced
from support.s3_fixtures import S3Server

from lab.generator import GeneratorSpec, produce
from pipeline.app import Pipeline
from pipeline.commit.checkpoint import CommitCheckpoint
from pipeline.commit.instant import (
    BatchIdentity,
    Inflight,
    InstantState,
    Requested,
    StagedFile,
)
from pipeline.commit.journal import (
    AlreadyExists,
    InstantTimeline,
    encode_entry,
)
from pipeline.commit.maintenance import CompactionPolicy
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.errors import ConfigError
from pipeline.formats.iceberg.catalog import load_catalog
from pipeline.formats.iceberg.catalog_table import IcebergTable
from pipeline.formats.iceberg.compaction import IcebergMaintenance
from pipeline.formats.iceberg.pipeline_tables import IcebergCommitter
from pipeline.formats.iceberg.schema import FieldSpec, build_partition_spec, build_schema
from pipeline.formats.iceberg.writer import write_data_files
from pipeline.storage.fs import filesystem_for
from pipeline.storage.journal_stores import journal_store_for
from pipeline.storage.local import LocalJournalStore
from pipeline.storage.s3 import S3JournalStore
from pipeline.storage.s3_errors import JournalStoreError
from pipeline.storage.s3_settings import S3Settings

# ---------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def bucket(s3_server: S3Server) -> str:
    return s3_server.new_bucket("journal")


def make_store(server: S3Server, bucket: str, **kwargs: Any) -> S3JournalStore:
    return S3JournalStore.from_uri(
        f"s3://{bucket}/tables/{uuid.uuid4().hex[:8]}/_ingest/p1", server.properties(), **kwargs
    )


class FlakyClient:
    """The real boto3 client, with failures injected around ``put_object``.

    ``lose_response``: that many PUTs are sent for real, then their response is "lost"
    (ReadTimeoutError). ``drop_connection``: that many PUTs fail with a closed connection
    before reaching the server (the client cannot tell). ``conflicts``: that many PUTs are
    refused with a 409 ConditionalRequestConflict. ``drop_if_none_match``: the header is
    stripped (a store that ignores it).
    """

    def __init__(
        self,
        real: Any,
        *,
        lose_response: int = 0,
        drop_connection: int = 0,
        conflicts: int = 0,
        drop_if_none_match: bool = False,
    ) -> None:
        self._real = real
        self.lose_response = lose_response
        self.drop_connection = drop_connection
        self.conflicts = conflicts
        self.drop_if_none_match = drop_if_none_match
        self.puts = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def put_object(self, **kwargs: Any) -> Any:
        from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError

        if ".probe-" in kwargs["Key"]:
            if self.drop_if_none_match:
                kwargs.pop("IfNoneMatch", None)
            return self._real.put_object(**kwargs)
        self.puts += 1
        if self.conflicts > 0:
            self.conflicts -= 1
            raise ClientError(
                {
                    "Error": {"Code": "ConditionalRequestConflict", "Message": "in progress"},
                    "ResponseMetadata": {"HTTPStatusCode": 409},
                },
                "PutObject",
            )
        if self.drop_connection > 0:
            self.drop_connection -= 1
            raise ConnectionClosedError(endpoint_url="http://closed-connection")
        if self.drop_if_none_match:
            kwargs.pop("IfNoneMatch", None)
        response = self._real.put_object(**kwargs)
        if self.lose_response > 0:
            self.lose_response -= 1
            raise ReadTimeoutError(endpoint_url="http://lost-response")
        return response


def fast(store: S3JournalStore) -> S3JournalStore:
    store.max_wait = 0.05
    return store


# ---------------------------------------------------------------------------------------
# S3JournalStore
# ---------------------------------------------------------------------------------------


def test_create_if_absent_race_exactly_one_wins(s3_server: S3Server, bucket: str) -> None:
    store = make_store(s3_server, bucket)
    threads = 16
    for round_ in range(3):
        name = f"epochs/{round_ + 1}"
        barrier = threading.Barrier(threads)

        def create(i: int, name: str = name, barrier: threading.Barrier = barrier) -> str:
            barrier.wait()
            try:
                store.create(name, f"writer-{i}".encode())
                return f"won:{i}"
            except AlreadyExists:
                return "lost"

        with ThreadPoolExecutor(threads) as pool:
            results = list(pool.map(create, range(threads)))
        winners = [r for r in results if r.startswith("won:")]
        assert len(winners) == 1, results
        assert results.count("lost") == threads - 1
        assert store.read(name) == f"writer-{winners[0][4:]}".encode()


def test_standby_lease_on_s3_racing_standbys_one_wins(s3_server: S3Server, bucket: str) -> None:
    """The warm-standby lease (commit/lease.py) on a real S3 store: eight standbys race for
    a dead holder's generation at once; exactly one becomes active, the old owner steps
    down at its next renewal, renewals are trimmed and the winner's claim (its liveness
    address) survives them."""
    from pipeline.commit.lease import Lease, Role
    from pipeline.errors import LeaseLostError

    store = make_store(s3_server, bucket)
    old = Lease(store, "old", clock=time.monotonic, endpoint="10.0.0.1:4050")
    assert old.try_acquire() and old.generation == 1
    standbys = [
        Lease(store, f"s{i}", clock=time.monotonic, endpoint=f"10.0.0.{i + 2}:4050")
        for i in range(8)
    ]
    latest = standbys[0].peek()
    barrier = threading.Barrier(len(standbys))

    def race(lease: Lease) -> bool:
        barrier.wait()
        return lease.try_acquire(holder_gone=True, latest=latest)

    with ThreadPoolExecutor(len(standbys)) as pool:
        won = [s for s, ok in zip(standbys, pool.map(race, standbys), strict=True) if ok]
    assert len(won) == 1 and won[0].generation == 2
    with pytest.raises(LeaseLostError):
        old.renew()
    assert old.role is Role.STOPPED
    for _ in range(4):
        won[0].renew()
    assert len(store.list("ha")) <= 4  # claims of both generations may stay, beats trimmed
    assert won[0].store.claim(2) == won[0].published


def test_read_list_delete(s3_server: S3Server, bucket: str) -> None:
    store = make_store(s3_server, bucket)
    assert store.list("instants") == []
    assert store.read("instants/nope.requested") is None
    store.create("instants/20240101000000000.requested", b"a")
    store.create("instants/20240101000000000.inflight", b"b")
    store.create("instants/nested/deeper.requested", b"c")  # not a direct child
    store.create("instants/.tmp-hidden", b"d")  # dot-names are skipped, as locally
    store.create("instantsX/other", b"e")  # a sibling prefix, not under instants/
    assert store.list("instants") == [
        "instants/20240101000000000.inflight",
        "instants/20240101000000000.requested",
    ]
    assert store.read("instants/20240101000000000.inflight") == b"b"
    with pytest.raises(AlreadyExists):
        store.create("instants/20240101000000000.inflight", b"other")
    assert store.read("instants/20240101000000000.inflight") == b"b"  # not overwritten
    store.delete("instants/20240101000000000.inflight")
    store.delete("instants/20240101000000000.inflight")  # absent: no error
    assert store.read("instants/20240101000000000.inflight") is None
    assert store.list("instants") == ["instants/20240101000000000.requested"]
    # a deleted name can be created again (purge, then reuse is never done, but allowed)
    store.create("instants/20240101000000000.inflight", b"b2")
    assert store.read("instants/20240101000000000.inflight") == b"b2"


def test_list_pages_through_many_entries(s3_server: S3Server, bucket: str) -> None:
    store = make_store(s3_server, bucket)
    names = [f"epochs/{i}" for i in range(1, 1101)]  # > 1000: more than one listing page
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda n: store.create(n, b"x"), names))
    assert store.list("epochs") == sorted(names)


def test_lost_response_of_a_create_that_landed_is_not_already_exists(
    s3_server: S3Server, bucket: str
) -> None:
    store = fast(make_store(s3_server, bucket))
    flaky = FlakyClient(store._client, lose_response=1)
    store._client = flaky
    store.create("epochs/1", b"mine")  # landed, response lost, retry sees 412: it is ours
    assert flaky.puts == 2
    assert store.read("epochs/1") == b"mine"
    # someone else's object stays someone else's, also after an unknown outcome
    other = make_store(s3_server, bucket)
    other.prefix = store.prefix
    other.create("epochs/2", b"theirs")
    flaky.drop_connection = 1  # unknown outcome, then 412: the token says it is not ours
    with pytest.raises(AlreadyExists):
        store.create("epochs/2", b"mine")
    assert store.read("epochs/2") == b"theirs"
    flaky.drop_connection = 2  # unknown outcomes that did not land: the retry creates it
    store.create("epochs/3", b"mine")
    assert store.read("epochs/3") == b"mine"


def test_conditional_request_conflict_is_retried_to_a_clear_outcome(
    s3_server: S3Server, bucket: str
) -> None:
    store = fast(make_store(s3_server, bucket, max_attempts=4))
    flaky = FlakyClient(store._client, conflicts=2)
    store._client = flaky
    store.create("epochs/1", b"after-conflicts")  # two 409s, then the real PUT
    assert flaky.puts == 3 and store.read("epochs/1") == b"after-conflicts"

    # the conflict never clears and another writer's object is there: AlreadyExists
    other = make_store(s3_server, bucket)
    other.prefix = store.prefix
    other.create("epochs/2", b"theirs")
    flaky.conflicts = 100
    with pytest.raises(AlreadyExists):
        store.create("epochs/2", b"mine")
    # ... and nothing is there: a clear error, not a guess
    with pytest.raises(JournalStoreError, match=r"after 4 attempts.*ConditionalRequestConflict"):
        store.create("epochs/3", b"mine")
    assert store.read("epochs/3") is None


def test_store_that_ignores_if_none_match_is_refused(s3_server: S3Server) -> None:
    fresh = s3_server.new_bucket("noifnm")  # the probe runs once per (endpoint, bucket)
    store = S3JournalStore.from_uri(f"s3://{fresh}/j", s3_server.properties())
    store._client = FlakyClient(store._client, drop_if_none_match=True)
    with pytest.raises(ConfigError, match="ignored If-None-Match"):
        store.create("epochs/1", b"x")
    assert store.list("") == []  # the probe cleaned up after itself
    store.verify_conditional_writes = False
    store.create("top", b"x")
    assert store.list("") == ["top"]


def test_errors_name_the_object_and_the_cause(s3_server: S3Server) -> None:
    store = S3JournalStore.from_uri(
        f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/j", s3_server.properties()
    )
    with pytest.raises(JournalStoreError, match=r"no-such-bucket-.*NoSuchBucket"):
        store.read("epochs/1")
    bad = S3JournalStore.from_uri(
        f"s3://{s3_server.new_bucket('auth')}/j",
        {**s3_server.properties(), "s3.secret-access-key": "wrong"},
    )
    with pytest.raises(JournalStoreError, match=r"SignatureDoesNotMatch|AccessDenied|403"):
        bad.list("epochs")


# ---------------------------------------------------------------------------------------
# InstantTimeline on S3
# ---------------------------------------------------------------------------------------

TP = TopicPartition("orders", 0)


def requested(time: str, batch_id: int, epoch: int = 1) -> Requested:
    return Requested(
        time=time,
        batch=BatchIdentity("p1", "inc-a", batch_id),
        epoch=epoch,
        start=PartitionOffsets({TP: batch_id * 10}),
        end=PartitionOffsets({TP: batch_id * 10 + 10}),
    )


def inflight(time: str, batch_id: int, epoch: int = 1) -> Inflight:
    return Inflight(
        time=time,
        batch=BatchIdentity("p1", "inc-a", batch_id),
        epoch=epoch,
        files=(
            StagedFile("main", f"s3://b/wh/data/{time}-0.parquet", 1234, 10, b"\x00descriptor"),
        ),
        ranges={TP: (batch_id * 10, batch_id * 10 + 10)},
        committed=PartitionOffsets({TP: batch_id * 10 + 10}),
        records=10,
        end=PartitionOffsets({TP: batch_id * 10 + 10}),
    )


def test_timeline_lifecycle_on_s3(s3_server: S3Server, bucket: str) -> None:
    tl = InstantTimeline(make_store(s3_server, bucket))
    assert tl.pending() == [] and tl.latest_time() is None
    t1 = tl.mint()
    tl.request(requested(t1, 0))
    tl.precommit(inflight(t1, 0))
    t2 = tl.mint()
    assert t2 > t1
    tl.request(requested(t2, 1))
    [p1, p2] = tl.pending()
    assert (p1.time, p1.state) == (t1, InstantState.INFLIGHT)
    assert p1.inflight == inflight(t1, 0) and p1.requested == requested(t1, 0)
    assert (p2.time, p2.state, p2.inflight) == (t2, InstantState.REQUESTED, None)

    tl.complete(t1, snapshot="123")
    tl.complete(t1, snapshot="123")  # recovery and the original run may both mark it
    tl.roll_back(t2, deleted=["s3://b/wh/data/x.parquet"])
    tl.roll_back(t2, deleted=[])
    assert tl.pending() == []
    states = {i.time: i.state for i in tl.instants()}
    assert states == {t1: InstantState.COMPLETED, t2: InstantState.ROLLED_BACK}
    with pytest.raises(AlreadyExists):
        tl.request(requested(t1, 0))  # a state file is written once, never replaced
    assert tl.latest_time() == t2 and tl.mint() > t2

    t3 = tl.mint()
    tl.request(requested(t3, 2))
    assert tl.purge_finished(keep=0) == 2
    assert [i.time for i in tl.instants()] == [t3]
    assert [i.time for i in tl.pending()] == [t3]


def test_acquire_epoch_unique_under_threads(s3_server: S3Server, bucket: str) -> None:
    store = make_store(s3_server, bucket)
    threads = 12
    barrier = threading.Barrier(threads)

    def acquire(i: int) -> int:
        tl = InstantTimeline(store)
        barrier.wait()
        return tl.acquire_epoch(owner=f"driver-{i}")

    with ThreadPoolExecutor(threads) as pool:
        epochs = list(pool.map(acquire, range(threads)))
    assert sorted(epochs) == list(range(1, threads + 1))  # unique, no gaps
    tl = InstantTimeline(store)
    assert tl.epochs() == sorted(epochs)
    assert tl.acquire_epoch(at_least=50) == 50
    assert tl.acquire_epoch() == 51


def test_corrupt_or_partial_state_files_are_treated_as_not_written(
    s3_server: S3Server, bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = make_store(s3_server, bucket)
    tl = InstantTimeline(store)
    client = s3_server.client()
    key = store._key

    # t1: valid REQUESTED, INFLIGHT is garbage -> still only requested, not a precommit
    t1 = tl.mint()
    tl.request(requested(t1, 0))
    client.put_object(Bucket=bucket, Key=key(f"instants/{t1}.inflight"), Body=b"\x00garbage{")
    # t2: REQUESTED cut short (a half-written upload by a foreign tool)
    t2 = tl.mint()
    whole = encode_entry(requested(t2, 1).to_json())
    client.put_object(Bucket=bucket, Key=key(f"instants/{t2}.requested"), Body=whole[:-25])
    # t3: INFLIGHT whose payload was altered after the checksum was taken
    t3 = tl.mint()
    tl.request(requested(t3, 2))
    good = encode_entry(inflight(t3, 2).to_json())
    client.put_object(
        Bucket=bucket,
        Key=key(f"instants/{t3}.inflight"),
        Body=good.replace(b'"records": 10', b'"records": 99'),
    )
    assert good != good.replace(b'"records": 10', b'"records": 99')

    with caplog.at_level(logging.WARNING, logger="pipeline.commit.journal"):
        pending = {i.time: i for i in tl.pending()}
    assert pending[t1].state is InstantState.REQUESTED and pending[t1].inflight is None
    assert pending[t1].requested == requested(t1, 0)
    assert pending[t2].state is InstantState.REQUESTED and pending[t2].requested is None
    assert pending[t3].state is InstantState.REQUESTED and pending[t3].inflight is None
    corrupt = [r.getMessage() for r in caplog.records if "corrupt" in r.getMessage()]
    assert any(f"{t1}.inflight" in m for m in corrupt)
    assert any(f"{t2}.requested" in m for m in corrupt)
    assert any(f"{t3}.inflight" in m and "checksum" in m for m in corrupt)
    # the corrupt file occupies its name: nobody can later "precommit" over it silently
    with pytest.raises(AlreadyExists):
        tl.precommit(inflight(t1, 0))
    tl.roll_back(t1, deleted=[])
    assert t1 not in {i.time for i in tl.pending()}


# ---------------------------------------------------------------------------------------
# Factory and settings
# ---------------------------------------------------------------------------------------


def test_journal_store_for_picks_the_store(tmp_path: Path) -> None:
    local = journal_store_for((tmp_path / "j").as_uri(), {})
    assert isinstance(local, LocalJournalStore) and local.root == str(tmp_path / "j")
    assert isinstance(journal_store_for(str(tmp_path / "k")), LocalJournalStore)
    props = {
        "s3.endpoint": "http://127.0.0.1:9",
        "s3.access-key-id": "a",
        "s3.secret-access-key": "s",
        "s3.region": "eu-west-1",
    }
    for scheme in ("s3", "s3a"):
        store = journal_store_for(f"{scheme}://bkt/wh/db/t/_ingest/p1", props)
        assert isinstance(store, S3JournalStore)
        assert (store.bucket, store.prefix) == ("bkt", "wh/db/t/_ingest/p1")
        assert store.endpoint == "http://127.0.0.1:9"
    with pytest.raises(ConfigError, match="gs:// is not supported"):
        journal_store_for("gs://bkt/wh", props)
    with pytest.raises(ConfigError, match="together"):
        journal_store_for("s3://bkt/wh", {"s3.access-key-id": "a"})


def test_s3_settings_from_pyiceberg_properties() -> None:
    s = S3Settings.from_properties(
        {
            "s3.endpoint": "minio:9000",
            "client.access-key-id": "a",
            "client.secret-access-key": "s",
            "client.region": "r",
            "s3.path-style-access": "false",
            "s3.request-timeout": "7.5",
        }
    )
    assert s.endpoint == "https://minio:9000" and s.endpoint_parts() == ("minio:9000", "https")
    assert (s.access_key, s.secret_key, s.region) == ("a", "s", "r")
    assert s.virtual_addressing is True and s.request_timeout == 7.5
    assert S3Settings.from_properties({"s3.endpoint": "http://h:1/"}).endpoint_parts() == (
        "h:1",
        "http",
    )
    with pytest.raises(ConfigError, match="s3.connect-timeout"):
        S3Settings.from_properties({"s3.connect-timeout": "soon"})


# ---------------------------------------------------------------------------------------
# Warehouse on S3
# ---------------------------------------------------------------------------------------

FIELDS = [FieldSpec("event_id", "string", required=True), FieldSpec("ts", "timestamptz")]


def rows(start: int, n: int) -> pa.RecordBatch:
    base = dt.datetime(2024, 3, 1, 22, 0, tzinfo=dt.UTC)
    return pa.record_batch(
        {
            "event_id": pa.array([f"e{i}" for i in range(start, start + n)]),
            "ts": pa.array(
                [base + dt.timedelta(hours=i % 30) for i in range(start, start + n)],
                pa.timestamp("us", tz="UTC"),
            ),
            "_kafka_topic": pa.array(["orders"] * n),
            "_kafka_partition": pa.array([0] * n, pa.int32()),
            "_kafka_offset": pa.array(range(start, start + n), pa.int64()),
            "_kafka_timestamp": pa.array([base] * n, pa.timestamp("us", tz="UTC")),
        }
    )


def test_warehouse_on_s3_write_commit_and_file_operations(
    s3_server: S3Server, tmp_path: Path
) -> None:
    wh_bucket = s3_server.new_bucket("wh")
    props = {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/catalog.db",  # the catalog database stays local
        "warehouse": f"s3://{wh_bucket}/wh",
        **s3_server.properties(),
    }
    catalog = load_catalog(f"s3cat{uuid.uuid4().hex[:6]}", props)
    schema = build_schema(FIELDS)
    sink = IcebergTable(catalog, "db.events", schema, build_partition_spec(schema, ["day(ts)"]))
    committer = IcebergCommitter(sink)  # file operations configured from the catalog
    location = sink.table_location()
    assert location.startswith(f"s3://{wh_bucket}/wh/")

    def checkpoint(batch_id: int, start: int, end: int) -> CommitCheckpoint:
        return CommitCheckpoint(
            pipeline_id="p1",
            incarnation="inc-a",
            batch_id=batch_id,
            epoch=1,
            ranges={TP: (start, end)},
            committed_offsets={TP: end},
            records=end - start,
        )

    # first commit creates the table (atomically) with files staged on S3
    files = write_data_files(sink.write_context("w0"), [rows(0, 500)], task_id=0)
    assert files
    sink.commit(files, checkpoint(0, 0, 500))
    paths = [committer.describe(f) for f in files]
    for path, size, _records in paths:
        assert path.startswith(f"s3://{wh_bucket}/wh/")
        assert committer.file_size(path) == size
    assert sum(r for _, _, r in paths) == 500

    # a second batch: staged, then "crashed" before its commit -> orphans
    staged = write_data_files(sink.write_context("20240301000000123"), [rows(500, 300)], 1)
    staged_paths = sorted(committer.describe(f)[0] for f in staged)
    assert sorted(committer.orphan_files("20240301000000123")) == staged_paths
    assert sorted(committer.orphan_files("w0")) == sorted(p for p, _, _ in paths)
    assert committer.delete_files([*staged_paths, staged_paths[0]]) == staged_paths
    assert committer.orphan_files("20240301000000123") == []
    assert all(committer.file_size(p) is None for p in staged_paths)
    assert committer.file_size(f"{location}/data/nope.parquet") is None

    # readers see exactly the committed batch, read back through S3
    table = committer.table()
    assert table is not None
    got = table.scan().to_arrow()
    assert sorted(got["_kafka_offset"].to_pylist()) == list(range(500))
    cp = sink.latest_checkpoint("p1")
    assert cp is not None and cp.committed_offsets == {TP: 500}

    # filesystem_for on the same URIs, directly
    fs, path = filesystem_for(paths[0][0], props)
    assert path == paths[0][0][len("s3://") :]
    assert fs.get_file_info(path).size == paths[0][1]
    fs2, _ = filesystem_for(paths[0][0], props)
    assert fs2 is fs  # one S3FileSystem per distinct settings

    # compaction and orphan cleanup with the files on S3 (pipeline/formats/iceberg/compaction)
    sink.commit(
        write_data_files(sink.write_context("w1"), [rows(500, 300)], 0), checkpoint(1, 500, 800)
    )
    maintenance = IcebergMaintenance(sink, committer.properties)
    before = sorted(table_rows(committer))
    compacted = maintenance.compact(CompactionPolicy(min_input_files=2))
    assert compacted.commit is not None and compacted.rewritten_files >= 2
    assert sorted(table_rows(committer)) == before == list(range(800))
    zombie = [
        committer.describe(f)[0]
        for f in write_data_files(sink.write_context("z"), [rows(900, 5)], 0)
    ]
    pending = [
        committer.describe(f)[0]
        for f in write_data_files(sink.write_context("p"), [rows(950, 5)], 0)
    ]
    young = maintenance.remove_orphans(3600, pending)
    assert young.removed == () and young.too_young == len(zombie)
    gone = maintenance.remove_orphans(0, pending)  # no safety interval: every orphan goes
    assert sorted(gone.removed) == sorted(zombie)
    assert all(committer.file_size(p) is None for p in zombie)
    assert all(committer.file_size(p) is not None for p in pending)
    assert sorted(table_rows(committer)) == before  # nothing referenced was deleted


def table_rows(committer: IcebergCommitter) -> list[int]:
    table = committer.table()
    assert table is not None
    return table.scan().to_arrow()["_kafka_offset"].to_pylist()  # type: ignore[no-any-return]


def test_sinks_timeline_lives_beside_the_table_on_s3(s3_server: S3Server, tmp_path: Path) -> None:
    from lab.generator import event_schema_fields
    from pipeline.config import parse_config
    from pipeline.formats.iceberg.pipeline_tables import IcebergTables

    wh_bucket = s3_server.new_bucket("sinks")
    cfg = parse_config(
        {
            "id": "p-s3",
            "source": {"bootstrapServers": "127.0.0.1:1", "topics": ["t"]},
            "decode": {"schema": event_schema_fields()},
            "sink": {
                "catalog": {
                    "name": f"c{uuid.uuid4().hex[:6]}",
                    "uri": f"sqlite:///{tmp_path}/catalog.db",
                    "warehouse": f"s3://{wh_bucket}/wh",
                    "properties": s3_server.properties(),
                },
                "table": "db.events",
            },
            "checkpointLocation": str(tmp_path / "checkpoint"),
        }
    )
    sinks = IcebergTables.from_config(cfg)
    tl = sinks.timeline(cfg.id)
    assert isinstance(tl.store, S3JournalStore)
    assert tl.store.bucket == wh_bucket
    assert tl.store.prefix.startswith("wh/") and tl.store.prefix.endswith("/_ingest/p-s3")
    assert tl.acquire_epoch(owner="me") == 1
    listed = s3_server.client().list_objects_v2(Bucket=wh_bucket, Prefix=tl.store.prefix)
    assert [o["Key"] for o in listed["Contents"]] == [f"{tl.store.prefix}/epochs/1"]


# ---------------------------------------------------------------------------------------
# The whole pipeline with its warehouse on S3
# ---------------------------------------------------------------------------------------


def s3_pipeline_config(
    server: S3Server, tmp: Path, bootstrap: str, topic: str, **source: Any
) -> Any:
    catalog = {
        "name": f"s3_{uuid.uuid4().hex[:6]}",
        "uri": f"sqlite:///{tmp}/catalog.db",  # the catalog database stays local
        "warehouse": f"s3://{server.new_bucket('pipe')}/wh",
        "properties": server.properties(),
    }
    # Spark's own checkpoint stays local (under tmp): on S3 it would need hadoop-aws
    return iceberg_config(tmp, bootstrap, topic, catalog=catalog, **source)


def with_faults(cfg: Any, faults: str) -> Any:
    return cfg.model_copy(update={"commit": cfg.commit.model_copy(update={"faults": faults})})


def s3_data_files(p: Any) -> set[str]:
    """Every Parquet file under the main and dead-letter tables' data/ on S3."""
    import pyarrow.fs as pafs

    out: set[str] = set()
    for committer in (p.tables.main, p.tables.dead_letter):
        location = committer.iceberg.table_location()
        fs, root = filesystem_for(f"{location}/data", committer.properties)
        selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
        out |= {
            f"s3://{i.path}"
            for i in fs.get_file_info(selector)
            if i.type == pafs.FileType.File and i.path.endswith(".parquet")
        }
    return out


def live_files(p: Any) -> set[str]:
    """The data files the tables' current snapshots reference."""
    out: set[str] = set()
    for committer in (p.tables.main, p.tables.dead_letter):
        table = committer.table()
        if table is not None and table.current_snapshot() is not None:
            out |= {task.file.file_path for task in table.scan().plan_files()}
    return out


def test_pipeline_exactly_once_with_warehouse_on_s3(
    spark: Any, kafka_broker: Any, s3_server: S3Server, tmp_path: Path
) -> None:
    topic = kafka_broker.new_topic("s3", 3)
    bootstrap = kafka_broker.bootstrap_servers
    r1 = produce(bootstrap, topic, GeneratorSpec(count=2000, malformed_fraction=0.05, seed=21))
    cfg = s3_pipeline_config(s3_server, tmp_path, bootstrap, topic, maxRecordsPerTrigger=800)

    p1 = Pipeline(cfg, spark)
    stats = p1.run()
    assert stats.batches == 3
    assert coords(p1) == produced(r1)
    assert p1.timeline is not None and isinstance(p1.timeline.store, S3JournalStore)
    assert p1.timeline.pending() == []
    assert {i.state for i in p1.timeline.instants()} == {InstantState.COMPLETED}
    first_epoch = max(p1.timeline.epochs())
    assert s3_data_files(p1) == live_files(p1)

    # lose the checkpoint: the table on S3 is authoritative, nothing lost, nothing twice
    import shutil

    shutil.rmtree(tmp_path / "checkpoint")
    r2 = produce(bootstrap, topic, GeneratorSpec(count=700, seed=22))
    p2 = Pipeline(cfg, spark)
    p2.run()
    assert coords(p2) == produced(r1, r2)
    assert p2.timeline is not None and max(p2.timeline.epochs()) > first_epoch
    assert p2.timeline.pending() == []


def test_pipeline_recovery_on_s3_rolls_back_and_recommits(
    spark: Any, kafka_broker: Any, s3_server: S3Server, tmp_path: Path
) -> None:
    topic = kafka_broker.new_topic("s3rec", 2)
    bootstrap = kafka_broker.bootstrap_servers
    cfg = s3_pipeline_config(s3_server, tmp_path, bootstrap, topic)

    # files staged on S3, crash before the precommit: the restart rolls the instant back,
    # deleting the staged (orphan) objects, and recomputes the batch
    r1 = produce(bootstrap, topic, GeneratorSpec(count=600, malformed_fraction=0.05, seed=41))
    with pytest.raises(Exception, match="fault-injected"):
        Pipeline(with_faults(cfg, "after-write:raise"), spark).run()
    crashed = Pipeline(cfg, spark)
    staged = s3_data_files(crashed)
    assert staged and live_files(crashed) == set()
    p = Pipeline(cfg, spark)
    p.run()
    assert coords(p) == produced(r1)
    assert not staged & s3_data_files(p)  # the rolled-back instant's objects are gone
    assert s3_data_files(p) == live_files(p)
    assert p.timeline is not None
    states = Counter(i.state for i in p.timeline.instants())
    assert states == {InstantState.ROLLED_BACK: 1, InstantState.COMPLETED: 1}

    # precommitted on S3, crash before the table commit: recommitted without recomputing
    r2 = produce(bootstrap, topic, GeneratorSpec(count=500, seed=42))
    with pytest.raises(Exception, match="fault-injected"):
        Pipeline(with_faults(cfg, "after-precommit:raise"), spark).run()
    crashed = Pipeline(cfg, spark)
    assert crashed.timeline is not None
    (pending,) = crashed.timeline.pending()
    assert pending.state is InstantState.INFLIGHT
    before = s3_data_files(crashed)
    p = Pipeline(cfg, spark)
    stats = p.run()
    assert stats.recommitted == 1
    assert s3_data_files(p) == before == live_files(p)  # no new files: not recomputed
    assert coords(p) == produced(r1, r2)
