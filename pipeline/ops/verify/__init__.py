"""``ingest verify``: an independent exactly-once check of a pipeline's tables against Kafka.

Reads the tables only through the table formats' own readers (pyiceberg scans, hudi-rs)
and Kafka only through a plain assign-only consumer; none of the pipeline's writer code
is involved. Per (topic, partition) it reports records expected, present, missing,
duplicated, mismatched, unexpected, unverifiable and lost, and the gaps/overlaps of the
committed ranges recorded in the commits (docs/verify.md).

Public API (used by the CLI, the demo and the drill runner)::

    verify_pipeline(cfg, table_format=None, *, payload=True, window=100_000,
                    on_progress=None) -> list[VerifyReport]

plus :func:`compare` / :func:`offsets_by_partition`, the small counting helpers the demo
uses to check tables against the producer's acknowledged offsets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.commit.offsets import TopicPartition
from pipeline.config import PipelineConfig
from pipeline.errors import ConfigError, PipelineError
from pipeline.formats import registry
from pipeline.formats.base import TableSet
from pipeline.formats.hudi.format import hudi_reader
from pipeline.ops.verify.engine import TableCheck
from pipeline.ops.verify.kafka import KafkaWindowReader, verifier_consumer_config
from pipeline.ops.verify.model import PartitionVerdict, RangeIssue, VerifyReport
from pipeline.ops.verify.range_ledger import MetadataError
from pipeline.ops.verify.routed import RoutedCheck, SetSource
from pipeline.ops.verify.tables import COORDS, HudiSource, IcebergSource, TableSource

__all__ = [
    "PartitionCount",
    "PartitionVerdict",
    "RangeIssue",
    "TableMissingError",
    "VerifyReport",
    "compare",
    "offsets_by_partition",
    "recorded_data_loss",
    "verify_pipeline",
]

TableFormat = Literal["iceberg", "hudi"]
PartitionCount = PartitionVerdict  # the name the first version of this module used


class TableMissingError(PipelineError):
    code = "verify"


def _table_sets(cfg: PipelineConfig, table_format: str | None) -> list[TableSet]:
    """The pipeline's table sets; ``table_format``: only those of that format (``iceberg``
    or ``hudi``: its main table), also when the pipeline's own format is another one."""
    own = registry.table_format(cfg)
    if table_format is None or table_format == own.name:
        return own.table_sets(cfg)
    if table_format not in registry.FORMAT_NAMES:
        raise ConfigError(f"--format {table_format!r}: allowed: iceberg, hudi")
    chosen = [s for s in own.table_sets(cfg) if s.main.kind == table_format]
    return chosen or registry.format_named(table_format).table_sets(cfg)


def _iceberg_tables(
    cfg: PipelineConfig, main_id: str | None, dead_id: str
) -> tuple[IcebergSource | None, IcebergSource | None]:
    """The main (``main_id``, TableMissingError when missing; None: not loaded) and the
    dead-letter Iceberg tables."""
    from pyiceberg.exceptions import NoSuchTableError

    from pipeline.formats.iceberg.catalog import load_catalog

    catalog = load_catalog(cfg.sink.catalog.name, cfg.sink.catalog.pyiceberg_properties())

    def load(identifier: str) -> IcebergSource | None:
        try:
            return IcebergSource(catalog.load_table(identifier))
        except NoSuchTableError:
            return None
        except Exception as e:
            raise PipelineError(
                f"cannot load Iceberg table {identifier}: {type(e).__name__}: {e}"
            ) from e

    main = None
    if main_id is not None:
        main = load(main_id)
        if main is None:
            raise TableMissingError(f"Iceberg table {main_id} does not exist")
    return main, load(dead_id)


def _hudi_table(cfg: PipelineConfig, location: str) -> HudiSource | None:
    found = hudi_reader(cfg, location)
    if found is None:
        return None
    try:
        import hudi  # noqa: F401
    except ImportError:
        raise ConfigError("verifying Hudi tables needs the hudi package (hudi-rs)") from None
    return HudiSource(*found)


def _sources(
    cfg: PipelineConfig, tables: TableSet
) -> tuple[str, TableSource, TableSource | None, str | None]:
    """(report name, main table, dead-letter table, dead-letter name)."""
    main, dead = tables.main, tables.dead_letter
    if main.kind == "iceberg":
        main_i, dead_i = _iceberg_tables(cfg, main.location, dead.location)
        assert main_i is not None  # a missing main table raised TableMissingError
        return main.location, main_i, dead_i, dead.location
    main_h = _hudi_table(cfg, main.location)
    if main_h is None:
        raise TableMissingError(f"Hudi table {main.location} does not exist (no .hoodie)")
    base = main_h.base
    if dead.kind == "iceberg":  # the both format: dead letters in the Iceberg table
        try:
            _, dead_i = _iceberg_tables(cfg, None, dead.location)
        except TableMissingError:
            dead_i = None
        return base, main_h, dead_i, dead.location
    return base, main_h, _hudi_table(cfg, dead.location), dead.location


def _groups(table_sets: list[TableSet]) -> list[list[TableSet]]:
    """One group per check: the table sets of a routed set together (the union holds
    every record once), every other table set alone (it holds every record)."""
    groups: list[list[TableSet]] = []
    for s in table_sets:
        if s.route is not None and groups and groups[-1][0].route is not None:
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def _routed_check(
    cfg: PipelineConfig,
    group: list[TableSet],
    kafka: KafkaWindowReader,
    payload: bool,
    window: int,
    on_progress: Callable[[str, int], None] | None,
) -> TableCheck:
    """The check of a routed set: its main tables read as one, the dead-letter table once."""
    members = []
    dead, dead_name = None, None
    for tables in group:
        assert tables.route is not None
        name, main, dead, dead_name = _sources(cfg, tables)
        members.append((tables.index, name, main))
    router = group[0].route
    assert router is not None
    union = SetSource(members, router)
    report = VerifyReport(
        table_format=group[0].main.kind,
        table=union.name,
        dead_letter_table=dead_name if dead is not None else None,
        payload_checked=payload,
        window=window,
    )
    return RoutedCheck(
        report,
        union,
        dead,
        dead_name,
        cfg,
        kafka,
        payload=payload,
        window=window,
        on_progress=on_progress,
    )


def verify_pipeline(
    cfg: PipelineConfig,
    table_format: TableFormat | None = None,
    *,
    payload: bool = True,
    window: int = 100_000,
    on_progress: Callable[[str, int], None] | None = None,
) -> list[VerifyReport]:
    """One report per verified table (two for the ``both`` format; one for a routed
    set, its tables together, with a verdict per table).

    ``window``: offsets per partition held in memory at a time. ``on_progress(label,
    offsets_checked)`` is called after every window (offsets counted per table).
    Raises PipelineError subclasses for operator errors (bad config, table missing,
    broker unreachable)."""
    if window < 1:
        raise ConfigError("--window must be at least 1")
    if payload and cfg.decode.registry_format:
        # the registry's schema as the pipeline reads it now: each record decoded with its
        # writer's schema resolved to it, so rows of every version compare, with nulls
        # where their version lacked a column
        from pipeline.decode.registry.table_schema import resolve_registry_schema

        cfg = resolve_registry_schema(cfg)
    table_sets = _table_sets(cfg, table_format)
    src = cfg.source
    conf = verifier_consumer_config(src.bootstrap_servers, src.kafka, src.isolation_level)
    reports: list[VerifyReport] = []
    with KafkaWindowReader(conf, stall_timeout_s=float(src.broker_retry_seconds)) as kafka:
        for group in _groups(table_sets):
            if group[0].route is not None:
                check = _routed_check(cfg, group, kafka, payload, window, on_progress)
            else:
                name, main, dead, dead_name = _sources(cfg, group[0])
                report = VerifyReport(
                    table_format=group[0].main.kind,
                    table=name,
                    dead_letter_table=dead_name if dead is not None else None,
                    payload_checked=payload,
                    window=window,
                )
                check = TableCheck(
                    report,
                    main,
                    dead,
                    cfg,
                    kafka,
                    payload=payload,
                    window=window,
                    on_progress=on_progress,
                )
            try:
                reports.append(check.run())
            except MetadataError as e:
                raise PipelineError(f"{check.report.table}: {e}") from e
    return reports


def commit_epochs(cfg: PipelineConfig) -> list[int]:
    """Writer epochs of the pipeline's commits to its main table, oldest first, read
    independently (pyiceberg / hudi-rs). A superseded writer's commit would show as an
    epoch lower than one before it; recommits carry the recovering writer's epoch."""
    from pipeline.commit.checkpoint import EPOCH_KEY, PIPELINE_ID_KEY

    _, main, _, _ = _sources(cfg, _table_sets(cfg, None)[0])
    epochs = [
        int(meta[EPOCH_KEY])
        for _, meta in main.commits()
        if meta.get(PIPELINE_ID_KEY) == cfg.id and str(meta.get(EPOCH_KEY, "")).isdigit()
    ]
    return epochs[::-1]


def recorded_data_loss(
    cfg: PipelineConfig, table_format: TableFormat | None = None
) -> dict[TopicPartition, list[tuple[int, int]]]:
    """Data loss the main table's commits record (``failOnDataLoss: false``), merged per
    partition, across its whole history (expired snapshots / trimmed instants included)."""
    from pipeline.ops.verify.range_ledger import CommitRanges, plan_partitions

    _, main, _, _ = _sources(cfg, _table_sets(cfg, table_format)[0])
    commits = [c for cid, meta in main.commits() if (c := CommitRanges.from_metadata(cid, meta))]
    return {tp: plan.lost for tp, plan in plan_partitions(commits).items() if plan.lost}


# -- small counting helpers (the demo checks tables against producer acknowledgements) ----


def offsets_by_partition(batches: Iterable[pa.RecordBatch]) -> dict[TopicPartition, pa.Array]:
    """(topic, partition) -> every ``_kafka_offset`` in ``batches`` (one int64 per row)."""
    parts: dict[TopicPartition, list[pa.Array]] = {}
    for b in batches:
        if b.num_rows == 0:
            continue
        t = pa.Table.from_batches([b.select(list(COORDS))])
        for key in t.group_by(["_kafka_topic", "_kafka_partition"]).aggregate([]).to_pylist():
            mask = pc.and_(
                pc.equal(t["_kafka_topic"], key["_kafka_topic"]),
                pc.equal(t["_kafka_partition"], key["_kafka_partition"]),
            )
            tp = TopicPartition(key["_kafka_topic"], key["_kafka_partition"])
            parts.setdefault(tp, []).append(t.filter(mask)["_kafka_offset"].combine_chunks())
    return {tp: pa.concat_arrays(arrs) for tp, arrs in parts.items()}


def compare(
    present: Mapping[TopicPartition, pa.Array],
    expected: Mapping[TopicPartition, Iterable[int]],
) -> VerifyReport:
    """Counts of ``present`` offsets against an explicit expected set per partition."""
    import numpy as np

    from pipeline.ops.verify.range_ledger import count_window

    report = VerifyReport(table_format="count", table="", payload_checked=False)
    for tp in sorted(set(present) | set(expected)):
        want = np.unique(np.fromiter(expected.get(tp, ()), dtype=np.int64))
        got = present.get(tp, pa.array([], pa.int64()))
        report.partitions[tp] = count_window(want, np.asarray(got.to_numpy(), dtype=np.int64))
    return report
