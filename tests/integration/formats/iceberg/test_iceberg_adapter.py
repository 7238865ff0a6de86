"""pipeline.formats.iceberg against real pyiceberg catalogs: SQLite (always) and PostgreSQL
(when up).

No mocks: files are written with pyiceberg's writer into a warehouse under tmp_path and
committed through a real catalog. Concurrent writers are real second IcebergTable
instances on their own catalog connections, interleaved through the commit precondition.
"""

from __future__ import annotations

import datetime as dt
import itertools
import pickle
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import (
    BinaryType,
    DateType,
    DecimalType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)
from support.pg_fixtures import require_postgres_uri

from pipeline.columns import spark_ddl, table_columns
from pipeline.columns.evolution import describe
from pipeline.commit.checkpoint import COMMITTED_OFFSETS_KEY, PIPELINE_ID_KEY, CommitCheckpoint
from pipeline.commit.offsets import TopicPartition
from pipeline.errors import (
    CommitError,
    ConfigError,
    FencedError,
    SchemaChangeRefused,
    find_pipeline_error,
)
from pipeline.formats.iceberg.catalog import load_catalog
from pipeline.formats.iceberg.catalog_table import IcebergTable
from pipeline.formats.iceberg.data_file_codec import deserialize_data_file, serialize_data_file
from pipeline.formats.iceberg.partition_values import DataFileWriteError, transform_array
from pipeline.formats.iceberg.schema import (
    KAFKA_COLUMNS,
    FieldSpec,
    arrow_schema,
    build_partition_spec,
    build_schema,
    dead_letter_schema,
    parse_type,
)
from pipeline.formats.iceberg.write_context import WriteContext
from pipeline.formats.iceberg.writer import write_data_files

UTC = dt.UTC
FIELDS = [
    FieldSpec("event_id", "string", required=True),
    FieldSpec("amount", "double"),
    FieldSpec("ts", "timestamptz"),
    FieldSpec("country", "string"),
]


# ---------------------------------------------------------------------------------------
# Catalog fixtures
# ---------------------------------------------------------------------------------------


CatalogFactory = Callable[[], Catalog]


@pytest.fixture(params=["sqlite", "postgres"])
def new_catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CatalogFactory]:
    """A factory of catalog connections (same backend, same catalog name) for one test."""
    warehouse = tmp_path / "warehouse"
    name = f"t{uuid.uuid4().hex[:12]}"
    if request.param == "sqlite":
        uri = f"sqlite:///{tmp_path}/catalog.db"
    else:
        uri = require_postgres_uri()
    props = {"type": "sql", "uri": uri, "warehouse": warehouse.as_uri()}
    made: list[Catalog] = []

    def factory() -> Catalog:
        catalog = load_catalog(name, props)
        made.append(catalog)
        return catalog

    yield factory
    if made:  # leave nothing behind in the shared PostgreSQL database
        catalog = made[0]
        for namespace in catalog.list_namespaces():
            for table in catalog.list_tables(namespace):
                catalog.drop_table(table)
            catalog.drop_namespace(namespace)
    for catalog in made:
        engine = getattr(catalog, "engine", None)
        if engine is not None:
            engine.dispose()


@pytest.fixture
def catalog(new_catalog: CatalogFactory) -> Catalog:
    return new_catalog()


def events_schema() -> Schema:
    return build_schema(FIELDS)


def events_spec(schema: Schema) -> PartitionSpec:
    return build_partition_spec(schema, ["day(ts)", "country"])


def make_sink(catalog: Catalog, name: str = "db.events", **kwargs: Any) -> IcebergTable:
    schema = events_schema()
    props = kwargs.pop("properties", {})
    return IcebergTable(catalog, name, schema, events_spec(schema), props, **kwargs)


def events_batch(start: int, n: int, topic: str = "orders", partition: int = 0) -> pa.RecordBatch:
    """Rows shaped like Spark hands them over (int32 partition, plain strings, Paris tz)."""
    base = dt.datetime(2024, 3, 1, 22, 0, tzinfo=UTC)
    return pa.record_batch(
        {
            "event_id": pa.array([f"e{i}" for i in range(start, start + n)], pa.string()),
            "amount": pa.array([i * 0.5 for i in range(start, start + n)], pa.float64()),
            "ts": pa.array(
                [base + dt.timedelta(hours=i % 5) for i in range(start, start + n)],
                pa.timestamp("us", tz="Europe/Paris"),
            ),
            "country": pa.array([("de", "fr", "nl")[i % 3] for i in range(start, start + n)]),
            "_kafka_topic": pa.array([topic] * n, pa.string()),
            "_kafka_partition": pa.array([partition] * n, pa.int32()),
            "_kafka_offset": pa.array(range(start, start + n), pa.int64()),
            "_kafka_timestamp": pa.array(
                [base + dt.timedelta(seconds=i) for i in range(start, start + n)],
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )


def checkpoint(
    batch_id: int,
    start: int,
    end: int,
    *,
    pipeline_id: str = "p1",
    incarnation: str = "inc-a",
    epoch: int = 1,
    topic: str = "orders",
) -> CommitCheckpoint:
    return CommitCheckpoint(
        pipeline_id=pipeline_id,
        incarnation=incarnation,
        batch_id=batch_id,
        epoch=epoch,
        ranges={TopicPartition(topic, 0): (start, end)} if end > start else {},
        committed_offsets={TopicPartition(topic, 0): end},
        records=end - start,
    )


def write_and_commit(sink: IcebergTable, batch_id: int, start: int, n: int, **kw: Any) -> int:
    ctx = sink.write_context(f"w{batch_id}-{uuid.uuid4().hex[:6]}")
    files = write_data_files(ctx, [events_batch(start, n)] if n else [], task_id=0)
    return sink.commit(files, checkpoint(batch_id, start, start + n, **kw))


def head(table: Table | None) -> Snapshot:
    assert table is not None
    snapshot = table.current_snapshot()
    assert snapshot is not None
    return snapshot


def rows(table: Table) -> pa.Table:
    return table.scan().to_arrow().sort_by("_kafka_offset")


def local_path(uri: str) -> Path:
    assert uri.startswith("file://")
    return Path(uri[len("file://") :])


# ---------------------------------------------------------------------------------------
# Schema
# ---------------------------------------------------------------------------------------


def test_parse_type_names_field_and_allowed_types() -> None:
    assert parse_type("long") == LongType()
    assert parse_type(" Decimal(10, 2) ") == DecimalType(10, 2)
    assert parse_type("uuid") == StringType()
    with pytest.raises(ConfigError) as err:
        parse_type("varchar", "customer")
    assert "'customer'" in str(err.value)
    assert "timestamptz" in str(err.value) and "decimal(p,s)" in str(err.value)
    with pytest.raises(ConfigError, match="not a valid decimal"):
        parse_type("decimal(50, 2)", "price")
    with pytest.raises(ConfigError, match="field 'x'"):
        build_schema([FieldSpec("x", "int64")])


def test_build_schema_appends_kafka_columns_with_ids() -> None:
    schema = build_schema(FIELDS)
    names = [f.name for f in schema.fields]
    assert names == [f.name for f in FIELDS] + [k.name for k in KAFKA_COLUMNS]
    assert [f.field_id for f in schema.fields] == list(range(1, len(names) + 1))
    assert schema.find_field("event_id").required
    assert schema.find_field("_kafka_topic").required
    assert schema.find_field("_kafka_partition").field_type == IntegerType()
    assert schema.find_field("_kafka_offset").field_type == LongType()
    ts = schema.find_field("_kafka_timestamp")
    assert ts.field_type == TimestamptzType() and not ts.required

    with pytest.raises(ConfigError, match="reserved"):
        build_schema([FieldSpec("_kafka_offset", "long")])
    with pytest.raises(ConfigError, match="twice"):
        build_schema([FieldSpec("a", "long"), FieldSpec("A", "string")])
    with pytest.raises(ConfigError, match="no fields"):
        build_schema([])


def test_raw_and_dead_letter_schemas() -> None:
    raw = build_schema([], raw=True)
    assert [f.name for f in raw.fields][:3] == ["key", "value", "headers"]
    headers = raw.find_field("headers").field_type
    assert isinstance(headers, ListType)
    element = headers.element_type
    assert isinstance(element, StructType)
    assert [(f.name, f.field_type, f.required) for f in element.fields] == [
        ("key", StringType(), True),
        ("value", BinaryType(), False),
    ]
    assert [f.field_id for f in raw.fields] == list(range(1, len(raw.fields) + 1))
    with pytest.raises(ConfigError):
        build_schema(FIELDS, raw=True)

    dlq = dead_letter_schema()
    names = [f.name for f in dlq.fields]
    assert names == ["key", "value", "headers", "error", *[k.name for k in KAFKA_COLUMNS]]
    assert dlq.find_field("error").required


def test_partition_specs() -> None:
    schema = build_schema(
        [*FIELDS, FieldSpec("user_id", "long"), FieldSpec("page", "string"), FieldSpec("d", "date")]
    )
    spec = build_partition_spec(schema, ["day(ts)", "identity(country)"])
    assert [(f.name, str(f.transform)) for f in spec.fields] == [
        ("ts_day", "day"),
        ("country", "identity"),
    ]
    assert spec.fields[0].source_id == schema.find_field("ts").field_id
    assert spec.fields[0].field_id == 1000
    spec = build_partition_spec(
        schema, ["country", "hour(ts)", "bucket(16, user_id)", "truncate(4, page)", "month(d)"]
    )
    assert [f.name for f in spec.fields] == [
        "country",
        "ts_hour",
        "user_id_bucket_16",
        "page_trunc_4",
        "d_month",
    ]
    assert isinstance(spec.fields[2].transform, BucketTransform)
    assert build_partition_spec(schema, ["year(ts)"]).fields[0].name == "ts_year"
    assert build_partition_spec(schema, []).is_unpartitioned()

    with pytest.raises(ConfigError, match="unknown column 'nope'"):
        build_partition_spec(schema, ["day(nope)"])
    with pytest.raises(ConfigError, match="not one of"):
        build_partition_spec(schema, ["week(ts)"])
    with pytest.raises(ConfigError, match="cannot be applied"):
        build_partition_spec(schema, ["hour(country)"])
    with pytest.raises(ConfigError, match="integer"):
        build_partition_spec(schema, ["bucket(x, user_id)"])
    with pytest.raises(ConfigError, match="repeats"):
        build_partition_spec(schema, ["country", "identity(country)"])


def test_arrow_schema_and_spark_ddl() -> None:
    schema = build_schema([*FIELDS, FieldSpec("n", "long"), FieldSpec("local", "timestamp")])
    arrow = arrow_schema(schema)
    assert arrow.field("ts").type == pa.timestamp("us", tz="UTC")
    assert arrow.field("local").type == pa.timestamp("us")
    assert arrow.field("_kafka_partition").type == pa.int32()
    assert not arrow.field("event_id").nullable
    assert arrow.field("event_id").metadata[b"PARQUET:field_id"] == b"1"
    assert spark_ddl(
        table_columns([*FIELDS, FieldSpec("n", "long"), FieldSpec("local", "timestamp")])
    ) == (
        "`event_id` STRING, `amount` DOUBLE, `ts` TIMESTAMP, `country` STRING, `n` BIGINT, "
        "`local` TIMESTAMP_NTZ, `_kafka_topic` STRING, `_kafka_partition` INT, "
        "`_kafka_offset` BIGINT, `_kafka_timestamp` TIMESTAMP"
    )
    raw = spark_ddl(table_columns([], raw=True))
    assert raw.startswith(
        "`key` BINARY, `value` BINARY, `headers` ARRAY<STRUCT<`key`: STRING, `value`: BINARY>>"
    )
    assert "DECIMAL(12,3)" in spark_ddl(table_columns([FieldSpec("p", "decimal(12,3)")]))


# ---------------------------------------------------------------------------------------
# Partition transforms (pure pyarrow) agree with pyiceberg's reference implementation
# ---------------------------------------------------------------------------------------


def test_vectorized_transforms_match_pyiceberg() -> None:
    micros = [
        -86_400_000_001,
        -3_600_000_000,
        -1,
        0,
        1,
        3_599_999_999,
        1_709_330_400_000_000,
        4_102_444_800_000_000,
    ]
    ts = pa.array(micros, pa.timestamp("us", tz="UTC"))
    ntz = pa.array(micros, pa.timestamp("us"))
    days = pa.array([-400, -1, 0, 1, 19_723, 60_000], pa.date32())
    time_transforms: list[Transform[Any, Any]] = [
        YearTransform(),
        MonthTransform(),
        DayTransform(),
        HourTransform(),
    ]
    sources: list[tuple[pa.Array, IcebergType]] = [(ts, TimestamptzType()), (ntz, TimestampType())]
    for transform in time_transforms:
        for arr, source in sources:
            expected = [transform.transform(source)(v) for v in micros]
            assert transform_array(transform, source, arr).to_pylist() == expected, transform
    for transform in time_transforms[:3]:
        expected = [transform.transform(DateType())(v) for v in days.cast(pa.int32()).to_pylist()]
        assert transform_array(transform, DateType(), days).to_pylist() == expected, transform

    strings = pa.array(["alpha", "beta", None, "alpha", "gämma"], pa.large_string())
    longs = pa.array([1, -5, 34, None, 2**40], pa.int64())
    cases: list[tuple[Transform[Any, Any], pa.Array, IcebergType]] = [
        (BucketTransform(16), strings, StringType()),
        (BucketTransform(7), longs, LongType()),
        (TruncateTransform(3), strings, StringType()),
        (TruncateTransform(10), longs, LongType()),
    ]
    for transform, arr, source in cases:
        expected = [
            transform.transform(source)(v) if v is not None else None for v in arr.to_pylist()
        ]
        assert transform_array(transform, source, arr).to_pylist() == expected, transform


# ---------------------------------------------------------------------------------------
# DataFile serialization
# ---------------------------------------------------------------------------------------


def test_data_file_round_trip_keeps_partition_and_statistics(tmp_path: Path) -> None:
    catalog = load_catalog(
        "ser",
        {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": tmp_path.as_uri()},
    )
    schema = build_schema([*FIELDS, FieldSpec("price", "decimal(9,2)")])
    spec = build_partition_spec(schema, ["day(ts)", "country", "price"])
    sink = IcebergTable(catalog, "db.ser", schema, spec, {})
    batch = events_batch(0, 12)
    batch = batch.append_column("price", pa.array([Decimal("1.25")] * 12, pa.decimal128(9, 2)))
    blobs = write_data_files(sink.write_context("ser"), [batch], task_id=7)
    assert len(blobs) == 6  # 2 days x 3 countries
    for blob in blobs:
        data_file = deserialize_data_file(blob)
        assert serialize_data_file(data_file) == blob
        assert data_file.spec_id == 0
        assert data_file.partition[2] == Decimal("1.25")
        assert isinstance(data_file.partition[0], int)
        assert data_file.partition[1] in ("de", "fr", "nl")
        assert data_file.record_count == 2
        assert set(data_file.lower_bounds) >= {1, 2, 3, 4}
        assert data_file.file_size_in_bytes == local_path(data_file.file_path).stat().st_size
        assert f"country={data_file.partition[1]}" in data_file.file_path
    with pytest.raises(ValueError):
        deserialize_data_file(b"garbage")
    evil = b"ingest-datafile:1\n" + pickle.dumps(Path("/etc/passwd"))
    with pytest.raises(pickle.UnpicklingError):
        deserialize_data_file(evil)


# ---------------------------------------------------------------------------------------
# Writing and committing
# ---------------------------------------------------------------------------------------


def test_write_then_commit_creates_table_atomically(catalog: Catalog) -> None:
    sink = make_sink(catalog)
    assert not sink.exists() and sink.load() is None
    assert sink.latest_checkpoint("p1") is None and sink.committed_offsets("p1") == {}
    assert not sink.is_committed("p1", "inc-a", 0)

    ctx = sink.write_context("batch-0")
    assert ctx.table_location == sink.table_location()
    blobs = write_data_files(ctx, [events_batch(0, 60), events_batch(60, 40)], task_id=1)
    paths = [deserialize_data_file(b).file_path for b in blobs]
    assert paths and all(p.startswith(ctx.table_location + "/data/") for p in paths)
    assert all(local_path(p).exists() for p in paths)
    # Staged files only: a write without a commit leaves no table behind.
    assert not sink.exists()
    assert not catalog.table_exists("db.events")

    snapshot_id = sink.commit(blobs, checkpoint(0, 0, 100))
    table = sink.load()
    assert table is not None
    assert table.location() == ctx.table_location
    assert head(table).snapshot_id == snapshot_id
    assert len(table.snapshots()) == 1  # created and committed in one operation
    assert table.properties["commit.retry.num-retries"] == "0"
    assert table.properties["commit.manifest-merge.enabled"] == "true"
    data = rows(table)
    assert data.num_rows == 100
    assert data.column("_kafka_offset").to_pylist() == list(range(100))
    assert data.column("event_id").to_pylist() == [f"e{i}" for i in range(100)]
    assert data.column("ts").type == pa.timestamp("us", tz="UTC")
    expected_ts = events_batch(0, 100).column("ts").cast(pa.timestamp("us", tz="UTC"))
    assert data.column("ts").to_pylist() == expected_ts.to_pylist()
    # Partition pruning works off the partition values the workers computed.
    march2 = table.scan(row_filter="ts >= '2024-03-02T00:00:00+00:00'").plan_files()
    assert all(task.file.partition[0] == 19784 for task in march2)
    assert table.scan(row_filter="country == 'fr'").to_arrow().num_rows == 33


def test_files_visible_only_after_commit(catalog: Catalog) -> None:
    sink = make_sink(catalog)
    write_and_commit(sink, 0, 0, 10)
    blobs = write_data_files(sink.write_context("b1"), [events_batch(10, 25)], task_id=0)
    table = sink.load()
    assert table is not None
    assert rows(table).num_rows == 10
    assert all(local_path(deserialize_data_file(b).file_path).exists() for b in blobs)
    sink.commit(blobs, checkpoint(1, 10, 35))
    assert rows(table.refresh()).column("_kafka_offset").to_pylist() == list(range(35))


def test_checkpoint_summary_round_trip_and_latest(catalog: Catalog) -> None:
    cp = CommitCheckpoint(
        pipeline_id="p1",
        incarnation="inc-a",
        batch_id=7,
        epoch=3,
        ranges={
            TopicPartition("orders", 0): (10, 20),
            TopicPartition("orders", 11): (5, 6),
            TopicPartition("users", 2): (0, 1),
        },
        committed_offsets={
            TopicPartition("orders", 0): 20,
            TopicPartition("orders", 11): 6,
            TopicPartition("users", 2): 1,
        },
        records=12,
        data_loss={TopicPartition("orders", 0): (8, 10)},
        dead_letter_records=2,
    )
    summary = cp.to_summary()
    assert summary[PIPELINE_ID_KEY] == "p1"
    assert summary["ingest.batch-id"] == "7" and summary["ingest.epoch"] == "3"
    assert summary["ingest.ranges"] == '{"orders":{"0":[10,20],"11":[5,6]},"users":{"2":[0,1]}}'
    assert summary[COMMITTED_OFFSETS_KEY] == '{"orders":{"0":20,"11":6},"users":{"2":1}}'
    assert summary["ingest.data-loss"] == '{"orders":{"0":[8,10]}}'
    assert CommitCheckpoint.from_summary(summary) == cp
    assert CommitCheckpoint.from_summary({"operation": "append"}) is None
    plain = checkpoint(0, 0, 5)
    assert "ingest.data-loss" not in plain.to_summary()
    assert CommitCheckpoint.from_summary(plain.to_summary()) == plain
    with pytest.raises(CommitError, match="malformed"):
        CommitCheckpoint.from_summary({**summary, "ingest.ranges": "[1, 2]"})

    sink = make_sink(catalog)
    write_and_commit(sink, 0, 0, 5, pipeline_id="p1")
    write_and_commit(sink, 0, 100, 3, pipeline_id="p2")
    write_and_commit(sink, 1, 5, 5, pipeline_id="p1")
    write_and_commit(sink, 1, 103, 2, pipeline_id="p2")
    table = sink.load()
    head_summary = head(table).summary
    assert head_summary is not None
    newest = CommitCheckpoint.from_summary(head_summary.additional_properties)
    assert newest is not None and newest.pipeline_id == "p2"
    latest = sink.latest_checkpoint("p1")
    assert latest is not None and latest.batch_id == 1
    assert latest.ranges == {("orders", 0): (5, 10)}
    assert sink.committed_offsets("p1") == {("orders", 0): 10}
    assert sink.committed_offsets("p2") == {("orders", 0): 105}
    assert sink.latest_checkpoint("p3") is None


def test_is_committed_dedupes_replayed_batch(catalog: Catalog) -> None:
    sink = make_sink(catalog)
    first = write_and_commit(sink, 0, 0, 10)
    ctx = sink.write_context("batch-1")
    blobs = write_data_files(ctx, [events_batch(10, 10)], task_id=0)
    second = sink.commit(blobs, checkpoint(1, 10, 20))
    assert sink.is_committed("p1", "inc-a", 0) and sink.is_committed("p1", "inc-a", 1)
    assert not sink.is_committed("p1", "inc-a", 2)
    assert not sink.is_committed("p1", "inc-b", 1)
    assert not sink.is_committed("p2", "inc-a", 1)
    # The same batch committed again (a replay, or a retry after an unknown outcome).
    again = sink.commit(blobs, checkpoint(1, 10, 20))
    assert again == second != first
    retried = write_data_files(ctx, [events_batch(10, 10)], task_id=0)  # a re-run task
    assert {deserialize_data_file(b).file_path for b in retried}.isdisjoint(
        deserialize_data_file(b).file_path for b in blobs
    )
    assert sink.commit(retried, checkpoint(1, 10, 20)) == second
    table = sink.load()
    assert table is not None
    assert len(table.snapshots()) == 2
    assert rows(table).column("_kafka_offset").to_pylist() == list(range(20))
    # A new incarnation starts its batch ids again: not confused with the old one.
    write_and_commit(sink, 0, 20, 5, incarnation="inc-b")
    assert sink.is_committed("p1", "inc-b", 0) and sink.is_committed("p1", "inc-a", 1)


def test_empty_commit_advances_offsets(catalog: Catalog) -> None:
    sink = make_sink(catalog)
    assert write_data_files(sink.write_context("empty"), [], task_id=0) == []
    assert write_data_files(sink.write_context("empty"), [events_batch(0, 0)], task_id=0) == []
    # First commit of a table may be empty too: the table is created with the checkpoint.
    first = sink.commit([], checkpoint(0, 0, 0))
    table = sink.load()
    assert head(table).snapshot_id == first
    write_and_commit(sink, 1, 0, 10)
    # A batch where every record was filtered/skipped: offsets move, no data.
    empty = sink.commit([], checkpoint(2, 10, 42))
    table = sink.load()
    assert head(table).snapshot_id == empty
    assert sink.committed_offsets("p1") == {("orders", 0): 42}
    assert table is not None and rows(table).num_rows == 10
    assert sink.is_committed("p1", "inc-a", 2)


def test_manifest_count_stays_bounded(catalog: Catalog) -> None:
    sink = make_sink(catalog, properties={"commit.manifest.min-count-to-merge": "8"})
    counts: list[int] = []
    latencies: list[float] = []
    for batch_id in range(30):
        ctx = sink.write_context(f"b{batch_id}")
        blobs = write_data_files(ctx, [events_batch(batch_id * 4, 4)], task_id=0)
        started = time.perf_counter()
        sink.commit(blobs, checkpoint(batch_id, batch_id * 4, batch_id * 4 + 4))
        latencies.append(time.perf_counter() - started)
        table = sink.load()
        assert table is not None
        counts.append(len(head(table).manifests(table.io)))
    assert max(counts) <= 8, counts
    assert counts[-1] < 8
    table = sink.load()
    assert table is not None
    assert rows(table).num_rows == 120
    # Commits run on a trimmed local view of the metadata; the catalog's history is whole.
    history = table.snapshots()
    assert len(history) == len(table.metadata.snapshot_log) == 30
    assert [s.sequence_number for s in history] == list(range(1, 31))
    for parent, child in itertools.pairwise(history):
        assert child.parent_snapshot_id == parent.snapshot_id
    assert table.current_snapshot() == history[-1]
    summary = history[-1].summary
    assert summary is not None and summary["total-records"] == "120"
    print(
        f"\ncommit latency over 30 commits ({catalog.name}): "
        f"median {statistics.median(latencies) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms, "
        f"manifests per snapshot {counts}"
    )
    assert statistics.median(latencies) < 2.0


def test_write_context_is_small_and_picklable(catalog: Catalog) -> None:
    sink = make_sink(catalog)
    for batch_id in range(5):
        write_and_commit(sink, batch_id, batch_id * 2, 2)
    ctx = sink.write_context("ctx")
    clone = pickle.loads(pickle.dumps(ctx))
    assert clone == ctx
    assert '"snapshots":[]' in ctx.table_metadata_json.replace(" ", "")
    assert "uri" not in ctx.io_properties
    assert len(pickle.dumps(ctx)) < 8_000
    assert ctx.metadata().schema() == events_schema()


def test_new_table_context_matches_create_table_transaction(
    catalog: Catalog, tmp_path: Path
) -> None:
    schema = build_schema([FieldSpec("b", "string"), FieldSpec("a", "long")], raw=False)
    spec = build_partition_spec(schema, ["bucket(4, a)"])
    ctx = WriteContext.for_new_table(catalog, "ns.fresh", schema, spec, {"format-version": "2"})
    assert ctx.table_location == (tmp_path / "warehouse" / "ns" / "fresh").as_uri()
    assert not catalog.table_exists("ns.fresh")
    txn = catalog.create_table_transaction(
        "ns.fresh", schema, location=ctx.table_location, partition_spec=spec
    )
    table = txn.commit_transaction()
    assert table.location() == ctx.table_location
    assert table.schema() == ctx.metadata().schema()
    assert table.spec() == ctx.metadata().spec()
    existing = WriteContext.for_table(table, "w")
    assert existing.table_location == ctx.table_location
    assert existing.metadata().schema() == table.schema()


def test_input_is_cast_and_validated(catalog: Catalog) -> None:
    sink = make_sink(catalog)
    ctx = sink.write_context("cast")
    batch = events_batch(0, 6)
    # Column order does not matter, optional columns may be missing, large/small types mix.
    reordered = batch.select(["_kafka_offset", "country", "event_id", "ts", "_kafka_topic"])
    reordered = reordered.append_column("_kafka_partition", pa.array([3] * 6, pa.int64()))
    blobs = write_data_files(ctx, [reordered], task_id=0)
    sink.commit(blobs, checkpoint(0, 0, 6))
    table = sink.load()
    assert table is not None
    data = rows(table)
    assert data.column("amount").null_count == 6
    assert data.column("_kafka_partition").to_pylist() == [3] * 6

    extra = batch.append_column("surprise", pa.array([1] * 6))
    with pytest.raises(DataFileWriteError, match="surprise"):
        write_data_files(ctx, [extra], task_id=0)
    nulls = batch.set_column(0, "event_id", pa.array([None] * 6, pa.string()))
    with pytest.raises(DataFileWriteError, match="event_id") as err:
        write_data_files(ctx, [nulls], task_id=0)
    assert find_pipeline_error(err.value) is not None
    text = batch.set_column(1, "amount", pa.array(["x"] * 6))
    with pytest.raises(DataFileWriteError, match="amount"):
        write_data_files(ctx, [text], task_id=0)


def test_streaming_write_rolls_files_at_target_size(catalog: Catalog, tmp_path: Path) -> None:
    schema = events_schema()
    sink = IcebergTable(
        catalog,
        "db.rolled",
        schema,
        build_partition_spec(schema, ["country"]),
        {"write.target-file-size-bytes": str(64 * 1024)},
    )
    ctx = sink.write_context("roll")
    assert ctx.target_file_size_bytes == 64 * 1024
    batches = (events_batch(i * 500, 500) for i in range(40))  # ~20k rows, lazily produced
    blobs = write_data_files(ctx, batches, task_id=2)
    files = [deserialize_data_file(b) for b in blobs]
    per_country: dict[str, int] = {}
    for f in files:
        per_country[f.partition[0]] = per_country.get(f.partition[0], 0) + 1
    assert set(per_country) == {"de", "fr", "nl"}
    assert all(count > 3 for count in per_country.values()), per_country
    assert sum(f.record_count for f in files) == 20_000
    assert len({f.file_path for f in files}) == len(files)
    sink.commit(blobs, checkpoint(0, 0, 20_000))
    table = sink.load()
    assert table is not None
    offsets = rows(table).column("_kafka_offset")
    assert offsets.to_pylist() == list(range(20_000))


def test_many_partitions_with_bounded_open_files(catalog: Catalog) -> None:
    schema = events_schema()
    sink = IcebergTable(
        catalog,
        "db.wide",
        schema,
        build_partition_spec(schema, ["bucket(100, event_id)"]),
        {"write.target-file-size-bytes": str(32 * 1024)},
    )
    blobs = write_data_files(
        sink.write_context("wide"), (events_batch(i * 1000, 1000) for i in range(8)), 0
    )
    files = [deserialize_data_file(b) for b in blobs]
    assert len({f.partition[0] for f in files}) == 100
    assert sum(f.record_count for f in files) == 8_000
    sink.commit(blobs, checkpoint(0, 0, 8_000))
    table = sink.load()
    assert table is not None
    bucket = BucketTransform(100).transform(StringType())
    for task in table.scan().plan_files():
        ids = pq.read_table(local_path(task.file.file_path)).column("event_id").to_pylist()
        assert {bucket(i) for i in ids} == {task.file.partition[0]}
    assert rows(table).column("_kafka_offset").to_pylist() == list(range(8_000))


def test_failed_write_removes_its_files(catalog: Catalog) -> None:
    schema = events_schema()
    sink = IcebergTable(
        catalog, "db.failing", schema, PartitionSpec(), {"write.target-file-size-bytes": "4096"}
    )
    ctx = sink.write_context("doomed")

    def batches() -> Iterator[pa.RecordBatch]:
        for i in range(5):
            yield events_batch(i * 200, 200)
        raise RuntimeError("executor lost its input")

    with pytest.raises(RuntimeError, match="executor lost"):
        write_data_files(ctx, batches(), task_id=0)
    data_dir = local_path(ctx.table_location) / "data"
    assert not data_dir.exists() or not list(data_dir.rglob("*.parquet"))


def test_raw_and_dead_letter_rows_round_trip(catalog: Catalog) -> None:
    headers_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    base = {
        "key": pa.array([b"k1", None], pa.binary()),
        "value": pa.array([b"\x00\x01", b"{bad json"], pa.binary()),
        "headers": pa.array([[{"key": "h", "value": b"v"}], None], headers_type),
        "_kafka_topic": pa.array(["raw", "raw"]),
        "_kafka_partition": pa.array([0, 0], pa.int32()),
        "_kafka_offset": pa.array([5, 6], pa.int64()),
        "_kafka_timestamp": pa.array([None, None], pa.timestamp("us", tz="UTC")),
    }
    for name, schema, extra in (
        ("db.raw", build_schema([], raw=True), {}),
        ("db.dlq", dead_letter_schema(), {"error": pa.array(["e1", "e2"])}),
    ):
        sink = IcebergTable(catalog, name, schema, PartitionSpec(), {})
        blobs = write_data_files(
            sink.write_context("raw"), [pa.record_batch({**base, **extra})], task_id=0
        )
        sink.commit(blobs, checkpoint(0, 5, 7, topic="raw"))
        table = sink.load()
        assert table is not None
        data = rows(table)
        assert data.column("key").to_pylist() == [b"k1", None]
        assert data.column("headers")[0].as_py() == [{"key": "h", "value": b"v"}]
        # pyiceberg 0.12's reader turns a null list of structs into [] (its projection
        # rebuilds such lists from offsets only); the file itself keeps the null.
        (blob,) = blobs
        stored = pq.read_table(local_path(deserialize_data_file(blob).file_path))
        assert stored.column("headers").to_pylist() == [[{"key": "h", "value": b"v"}], None]
    bad_headers = pa.array([[{"key": None, "value": b"v"}], None], headers_type)
    sink = IcebergTable(catalog, "db.raw", build_schema([], raw=True), PartitionSpec(), {})
    with pytest.raises(DataFileWriteError, match="headers"):
        write_data_files(
            sink.write_context("bad"), [pa.record_batch({**base, "headers": bad_headers})], 0
        )


def test_hour_bucket_truncate_partitions_scan_back(catalog: Catalog) -> None:
    schema = build_schema([*FIELDS, FieldSpec("user_id", "long"), FieldSpec("page", "string")])
    spec = build_partition_spec(schema, ["hour(ts)", "bucket(4, user_id)", "truncate(2, page)"])
    sink = IcebergTable(catalog, "db.clicks", schema, spec, {}, location=None)
    n = 300
    batch = events_batch(0, n)
    batch = batch.append_column("user_id", pa.array([i % 11 for i in range(n)], pa.int64()))
    batch = batch.append_column("page", pa.array([f"/p{i % 7}/x" for i in range(n)]))
    blobs = write_data_files(sink.write_context("clicks"), [batch], task_id=0)
    files = [deserialize_data_file(b) for b in blobs]
    bucket = BucketTransform(4).transform(LongType())
    for f in files:
        assert 0 <= f.partition[1] < 4 and f.partition[2] == "/p"
    sink.commit(blobs, checkpoint(0, 0, n))
    table = sink.load()
    assert table is not None
    assert rows(table).num_rows == n
    hits = table.scan(row_filter="user_id == 5").to_arrow()
    assert sorted(hits.column("_kafka_offset").to_pylist()) == [i for i in range(n) if i % 11 == 5]
    pruned = table.scan(row_filter="user_id == 5").plan_files()
    assert {t.file.partition[1] for t in pruned} == {bucket(5)}
    late = table.scan(row_filter="ts >= '2024-03-02T01:00:00+00:00'").to_arrow()
    assert late.num_rows == sum(1 for i in range(n) if i % 5 >= 3)


def test_awkward_column_names_and_unpartitioned_tasks(catalog: Catalog) -> None:
    schema = build_schema([FieldSpec("user-id", "long", required=True), FieldSpec("1st", "date")])
    sink = IcebergTable(catalog, "db.awkward", schema, PartitionSpec(), {})
    ctx = sink.write_context("awk")
    blobs: list[bytes] = []
    for task in range(3):
        batch = pa.record_batch(
            {
                "user-id": pa.array([task * 10 + i for i in range(4)], pa.int64()),
                "1st": pa.array([dt.date(2024, 1, 1 + i) for i in range(4)], pa.date32()),
                "_kafka_topic": pa.array(["t"] * 4),
                "_kafka_partition": pa.array([task] * 4, pa.int32()),
                "_kafka_offset": pa.array(range(4), pa.int64()),
            }
        )
        blobs += write_data_files(ctx, [batch], task_id=task)
    assert len(blobs) == 3
    sink.commit(blobs, checkpoint(0, 0, 12))
    table = sink.load()
    assert table is not None
    data = table.scan().to_arrow().sort_by("user-id")
    assert data.column("user-id").to_pylist() == [t * 10 + i for t in range(3) for i in range(4)]
    assert data.column("1st").to_pylist()[:2] == [dt.date(2024, 1, 1), dt.date(2024, 1, 2)]
    assert table.scan(row_filter='"user-id" >= 20').to_arrow().num_rows == 4


def test_columns_not_evolved_at_start_are_refused_at_write_then_evolved(catalog: Catalog) -> None:
    """A write never adds a column on its own: the schema changes only at a start
    (``evolve_schema``, docs/design.md invariant 13); a narrowing is refused outright."""
    write_and_commit(make_sink(catalog), 0, 0, 3)
    schema = build_schema([*FIELDS, FieldSpec("new_col", "long")])
    sink = IcebergTable(catalog, "db.events", schema, events_spec(schema), {})
    with pytest.raises(CommitError, match=r"add new_col \(long\)"):
        sink.write_context("x")
    assert [describe(c) for c in sink.evolve_schema()] == ["add new_col (long)"]
    sink.write_context("y")  # evolved: the write goes on
    assert sink.evolve_schema() == []  # nothing left to do on the next start
    narrowed = [FieldSpec(f.name, "float") if f.type == "double" else f for f in FIELDS]
    narrow = build_schema([*narrowed, FieldSpec("new_col", "long")])
    with pytest.raises(SchemaChangeRefused, match="double -> float is not a widening"):
        IcebergTable(catalog, "db.events", narrow, events_spec(narrow), {}).schema_changes()


# ---------------------------------------------------------------------------------------
# Concurrency: a second writer on the same table
# ---------------------------------------------------------------------------------------


def test_retry_after_concurrent_commit(new_catalog: CatalogFactory) -> None:
    ours = make_sink(new_catalog())
    theirs = make_sink(new_catalog())
    write_and_commit(ours, 0, 0, 10)
    blobs = write_data_files(ours.write_context("ours-1"), [events_batch(10, 10)], 0)
    their_blobs = write_data_files(theirs.write_context("theirs"), [events_batch(500, 7)], 0)
    calls: list[CommitCheckpoint | None] = []

    def interleave(latest: CommitCheckpoint | None) -> None:
        calls.append(latest)
        if len(calls) == 1:  # another writer commits between our read and our commit
            theirs.commit(their_blobs, checkpoint(0, 500, 507, pipeline_id="other"))

    snapshot_id = ours.commit(blobs, checkpoint(1, 10, 20), precondition=interleave)
    assert len(calls) == 2  # first attempt lost the race, second one committed
    assert calls[0] is not None and calls[0].batch_id == 0
    table = ours.load()
    assert table is not None
    assert head(table).snapshot_id == snapshot_id
    parent = table.snapshot_by_id(head(table).parent_snapshot_id or -1)
    assert parent is not None and parent.summary is not None
    assert parent.summary[PIPELINE_ID_KEY] == "other"
    offsets = rows(table).column("_kafka_offset").to_pylist()
    assert offsets == [*range(20), *range(500, 507)]
    assert ours.committed_offsets("p1") == {("orders", 0): 20}


def test_concurrent_commit_of_same_batch_appends_once(new_catalog: CatalogFactory) -> None:
    ours = make_sink(new_catalog())
    theirs = make_sink(new_catalog())
    write_and_commit(ours, 0, 0, 10)
    blobs = write_data_files(ours.write_context("b1"), [events_batch(10, 10)], 0)
    landed: list[int] = []

    def interleave(latest: CommitCheckpoint | None) -> None:
        if not landed:  # e.g. our earlier attempt whose response was lost
            landed.append(theirs.commit(blobs, checkpoint(1, 10, 20)))

    assert ours.commit(blobs, checkpoint(1, 10, 20), precondition=interleave) == landed[0]
    table = ours.load()
    assert table is not None
    assert len(table.snapshots()) == 2
    assert rows(table).num_rows == 20


def test_persistent_conflicts_exhaust_attempts(new_catalog: CatalogFactory) -> None:
    ours = make_sink(new_catalog(), max_commit_attempts=3)
    theirs = make_sink(new_catalog())
    write_and_commit(ours, 0, 0, 1)
    attempts: list[int] = []

    def always_lose(latest: CommitCheckpoint | None) -> None:
        attempts.append(1)
        theirs.commit([], checkpoint(len(attempts), 0, 0, pipeline_id="noisy"))

    with pytest.raises(CommitError, match="CommitFailedException") as err:
        ours.commit([], checkpoint(1, 1, 2), precondition=always_lose)
    assert len(attempts) == 3
    assert "\n" not in str(err.value)
    assert not ours.is_committed("p1", "inc-a", 1)


def test_zombie_writer_is_fenced(new_catalog: CatalogFactory) -> None:
    zombie = make_sink(new_catalog())
    owner = make_sink(new_catalog())
    write_and_commit(zombie, 0, 0, 10, epoch=1)
    blobs = write_data_files(zombie.write_context("z"), [events_batch(10, 10)], 0)

    def fence(latest: CommitCheckpoint | None) -> None:
        if latest is not None and latest.epoch == 1:  # the new owner fences while we commit
            owner.commit([], checkpoint(1, 10, 10, epoch=2, incarnation="inc-new"))

    with pytest.raises(FencedError, match="epoch 2") as err:
        zombie.commit(blobs, checkpoint(1, 10, 20, epoch=1), precondition=fence)
    assert find_pipeline_error(err.value) is not None
    assert "[ingest:fenced]" in str(err.value)
    table = owner.load()
    assert table is not None
    assert rows(table).num_rows == 10  # the zombie's append did not land
    # Once fenced, every later attempt of the old epoch fails before touching the table.
    with pytest.raises(FencedError):
        zombie.commit(blobs, checkpoint(2, 10, 20, epoch=1))


def test_fence_stops_an_in_flight_zombie(new_catalog: CatalogFactory) -> None:
    zombie = make_sink(new_catalog())
    owner = make_sink(new_catalog())
    assert owner.fence("p1", 2) is None  # no table yet: nothing to fence
    write_and_commit(zombie, 0, 0, 10, epoch=1)
    write_and_commit(zombie, 1, 10, 5, epoch=1)
    blobs = write_data_files(zombie.write_context("z"), [events_batch(15, 5)], 0)
    fences: list[int | None] = []

    def owner_takes_over(latest: CommitCheckpoint | None) -> None:
        if not fences:
            fences.append(owner.fence("p1", 2))

    with pytest.raises(FencedError):
        zombie.commit(blobs, checkpoint(2, 15, 20, epoch=1), precondition=owner_takes_over)
    assert fences[0] is not None
    latest = owner.latest_checkpoint("p1")
    assert latest is not None and latest.epoch == 2 and latest.records == 0
    assert latest.committed_offsets == {("orders", 0): 15} and latest.ranges == {}
    assert owner.fence("p1", 2) is None  # already at this epoch
    with pytest.raises(FencedError):
        zombie.fence("p1", 1)
    # The fence is no batch: batch 1 is still found, batch 2 is not committed.
    assert owner.is_committed("p1", "inc-a", 1) and not owner.is_committed("p1", "inc-a", 2)
    # The new owner replays batch 2 (same checkpoint incarnation) and commits it.
    write_and_commit(owner, 2, 15, 5, epoch=2)
    table = owner.load()
    assert table is not None
    assert rows(table).column("_kafka_offset").to_pylist() == list(range(20))


def test_pyiceberg_retry_disabled_on_foreign_tables(new_catalog: CatalogFactory) -> None:
    """A table created elsewhere keeps pyiceberg's default of 4 internal retries.

    pyiceberg would rebase our append onto the fence and commit it; the sink must not.
    """
    creator = new_catalog()
    schema = events_schema()
    creator.create_namespace("db")
    table = creator.create_table("db.events", schema, partition_spec=events_spec(schema))
    assert "commit.retry.num-retries" not in table.properties
    zombie = make_sink(new_catalog())
    owner = make_sink(new_catalog())
    write_and_commit(zombie, 0, 0, 5, epoch=1)
    blobs = write_data_files(zombie.write_context("z"), [events_batch(5, 5)], 0)
    fenced: list[bool] = []

    def fence(latest: CommitCheckpoint | None) -> None:
        if not fenced:
            fenced.append(True)
            owner.commit([], checkpoint(1, 5, 5, epoch=2, incarnation="inc-new"))

    with pytest.raises(FencedError):
        zombie.commit(blobs, checkpoint(1, 5, 10, epoch=1), precondition=fence)
    table = creator.load_table("db.events")
    assert "commit.retry.num-retries" not in table.properties  # never persisted
    assert rows(table).num_rows == 5


def test_two_sinks_racing_commit_everything_once(new_catalog: CatalogFactory) -> None:
    import threading

    sinks = [make_sink(new_catalog()), make_sink(new_catalog())]
    write_and_commit(sinks[0], 0, 0, 1, pipeline_id="seed")
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            sink = sinks[index]
            for batch_id in range(6):
                start = 1000 * (index + 1) + batch_id * 3
                ctx = sink.write_context(f"r{index}-{batch_id}")
                blobs = write_data_files(ctx, [events_batch(start, 3)], 0)
                sink.commit(
                    blobs, checkpoint(batch_id, start, start + 3, pipeline_id=f"race{index}")
                )
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    table = sinks[0].load()
    assert table is not None
    assert len(table.snapshots()) == 13
    offsets = pc.unique(rows(table).column("_kafka_offset")).to_pylist()
    assert len(offsets) == rows(table).num_rows == 1 + 2 * 6 * 3
    for index in range(2):
        latest = sinks[0].latest_checkpoint(f"race{index}")
        assert latest is not None and latest.batch_id == 5


# ---------------------------------------------------------------------------------------
# Catalog loading
# ---------------------------------------------------------------------------------------


def test_load_catalog_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_catalog("bad", {"type": "nosuch", "uri": "x"})
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError):
        load_catalog("bad", {"type": "sql"})
    with pytest.raises(CommitError) as err2:
        load_catalog(
            "down",
            {
                "type": "sql",
                "uri": "postgresql+psycopg2://user:secret@127.0.0.1:1/db?connect_timeout=2",
                "warehouse": tmp_path.as_uri(),
            },
        )
    message = str(err2.value)
    assert "\n" not in message and "secret" not in message and "***" in message
    # The embedded SQLite catalog creates its directory.
    catalog = load_catalog(
        "embedded",
        {
            "type": "sql",
            "uri": f"sqlite:///{tmp_path}/deep/dir/catalog.db",
            "warehouse": tmp_path.as_uri(),
        },
    )
    assert (tmp_path / "deep" / "dir" / "catalog.db").exists()
    assert catalog.list_namespaces() == []


# ---------------------------------------------------------------------------------------
# Bounded snapshot history
# ---------------------------------------------------------------------------------------


def test_old_snapshots_expire_and_their_ranges_are_carried_forward(catalog: Catalog) -> None:
    from pipeline.commit.checkpoint import RANGES_BEFORE_KEY
    from pipeline.ops.verify.range_ledger import CommitRanges, plan_partitions, range_issues
    from pipeline.ops.verify.tables import IcebergSource

    sink = make_sink(catalog, max_snapshots=10, expire_every=5)
    ids = [write_and_commit(sink, b, b * 3, 3) for b in range(30)]
    table = sink.load()
    assert table is not None
    history = table.snapshots()
    assert 10 <= len(history) < 10 + 5  # bounded: expired every 5 commits beyond 10
    assert len(table.metadata.snapshot_log) == len(history)
    assert head(table).snapshot_id == ids[-1]
    # metadata only: every row of every batch is still in the table
    assert rows(table)["_kafka_offset"].to_pylist() == list(range(90))
    # the oldest retained commit carries what the expired ones recorded
    oldest = history[0]
    assert oldest.summary is not None
    start = int(oldest.summary["ingest.batch-id"]) * 3
    assert oldest.summary[RANGES_BEFORE_KEY] == f'{{"orders":{{"0":[[0,{start}]]}}}}'
    assert head(table).summary[RANGES_BEFORE_KEY] == '{"orders":{"0":[[0,87]]}}'  # type: ignore[index]
    # dedupe and fencing still work on the bounded history
    assert sink.is_committed("p1", "inc-a", 29)
    assert write_and_commit(sink, 29, 87, 3) == ids[-1]
    assert sink.fence("p1", 2) is not None
    with pytest.raises(FencedError):
        write_and_commit(sink, 30, 90, 3)
    # the verifier sees every committed offset once: no gap, no overlap
    source = IcebergSource(sink.load())
    commits = [c for i, m in source.commits() if (c := CommitRanges.from_metadata(i, m))]
    live = [c for c in commits if not c.fence]
    assert range_issues(live) == []
    assert plan_partitions(live)[TopicPartition("orders", 0)].expected == [(0, 90)]
