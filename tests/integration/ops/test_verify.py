"""``ingest verify`` against real tables: built by the real pipeline (live broker, real
Spark), then tampered with on purpose through the table formats' own means (pyiceberg
appends/deletes/overwrites; Hudi commits written by hand and read back by hudi-rs).
Each tamper is undone after its test (Iceberg: ``main`` set back to the clean snapshot;
Hudi: the files the tamper added are removed).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import yaml
from support.kafka_fixtures import KafkaTestBroker

from lab.generator import GeneratorSpec, ProduceResult, event_schema_fields, produce
from pipeline.app import Pipeline
from pipeline.commit.offsets import TopicPartition
from pipeline.config import PipelineConfig, parse_config
from pipeline.observe.runstate import read_run_state
from pipeline.ops.verify import VerifyReport, compare, verify_pipeline
from pipeline.ops.verify.range_ledger import (
    CommitRanges,
    count_window,
    inside,
    merge,
    plan_partitions,
    range_issues,
    subtract,
    windows,
)

ROOT = Path(__file__).resolve().parents[3]
PARTITIONS = 3
EVENTS = 600

# -- pure logic ----------------------------------------------------------------------------


def tp(p: int) -> TopicPartition:
    return TopicPartition("t", p)


def test_interval_helpers() -> None:
    assert merge([(5, 9), (0, 3), (3, 4), (8, 12), (20, 20)]) == [(0, 4), (5, 12)]
    assert subtract([(0, 10), (20, 30)], [(2, 4), (8, 25)]) == [(0, 2), (4, 8), (25, 30)]
    assert list(windows([(0, 10), (20, 23)], 4)) == [(0, 4), (4, 8), (8, 10), (20, 23)]
    mask = inside(np.array([0, 3, 4, 5, 11, 12], dtype=np.int64), [(0, 4), (5, 12)])
    assert mask.tolist() == [True, True, False, True, True, False]


def test_range_issues_gap_overlap_loss_and_committed_offsets() -> None:
    commits = [  # newest first, as a table's history is walked
        CommitRanges("c4", {tp(0): (30, 40)}, committed={tp(0): 40, tp(1): 10}),
        CommitRanges("c3", {tp(0): (20, 30)}, data_loss={tp(0): (20, 25)}),
        CommitRanges("c2", {tp(0): (8, 15), tp(1): (0, 10)}),
        CommitRanges("c1", {tp(0): (0, 10)}),
    ]
    issues = range_issues(commits)
    kinds = [(i.kind, i.tp.partition, i.start, i.end) for i in issues]
    assert ("overlap", 0, 8, 10) in kinds
    assert ("gap", 0, 15, 20) in kinds  # [20, 25) is recorded loss inside c3: not a gap
    assert len(issues) == 2
    plan = plan_partitions(commits)[tp(0)]
    assert plan.expected == [(0, 15), (25, 40)] and plan.lost == [(20, 25)]

    # loss recorded between two commits explains the gap
    covered = [
        CommitRanges("b", {tp(0): (10, 20)}, data_loss={tp(0): (5, 10)}),
        CommitRanges("a", {tp(0): (0, 5)}),
    ]
    assert range_issues(covered) == []
    ahead = [CommitRanges("a", {tp(0): (0, 5)}, committed={tp(0): 9})]
    assert [i.kind for i in range_issues(ahead)] == ["committed-offsets"]


def test_count_window() -> None:
    expected = np.array([10, 11, 12, 13, 14], dtype=np.int64)
    present = np.array([10, 11, 11, 11, 13, 14, 17, 3], dtype=np.int64)
    v = count_window(expected, present, excused=[(0, 5)])
    assert (v.expected, v.present, v.missing, v.duplicated, v.unexpected) == (5, 8, 1, 2, 1)
    assert v.missing_offsets == [12] and v.duplicated_offsets == [11]
    assert v.unexpected_offsets == [17]  # 3 is below the log start: excused


def test_compare_helper() -> None:
    report = compare({tp(0): pa.array([0, 1, 1, 5], pa.int64())}, {tp(0): range(0, 4)})
    t = report.totals()
    assert (t.expected, t.present, t.missing, t.duplicated, t.unexpected) == (4, 4, 2, 1, 1)
    assert not report.ok


# -- real tables ---------------------------------------------------------------------------


@dataclass
class Lake:
    fmt: str
    data: dict[str, Any]
    cfg: PipelineConfig
    topic: str
    produced: ProduceResult
    root: Path
    broker: KafkaTestBroker
    run_states: list[str | None]  # the run state recorded, seen at each tick of the run

    def expected_per_partition(self) -> dict[int, int]:
        return {p: b - a + 1 for (_, p), (a, b) in self.produced.offsets.items()}

    def config_file(self) -> Path:
        path = self.root / "pipeline.yaml"
        path.write_text(yaml.safe_dump(self.data))
        return path


def _config(root: Path, bootstrap: str, topic: str) -> dict[str, Any]:
    return {
        "id": "verify-both",
        "source": {"bootstrapServers": bootstrap, "topics": [topic], "maxRecordsPerTrigger": 300},
        "decode": {"schema": event_schema_fields()},
        "sink": {  # one query writes both formats (dead letters: the Iceberg table)
            "format": "both",
            "table": "db.events",
            "catalog": {"warehouse": str(root / "warehouse")},
            "hudi": {"basePath": str(root / "hudi" / "events"), "partitionFields": ["country"]},
        },
        "checkpointLocation": str(root / "checkpoint"),
        "trigger": {"mode": "available-now"},
        "metrics": {"enabled": False},
    }


@pytest.fixture(scope="module")
def lakes(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Lake]:
    """One pipeline run (``sink.format: both``, two batches): an Iceberg and a Hudi table."""
    pytest.importorskip("hudi")
    topic = kafka_broker.new_topic("verify", PARTITIONS)
    result = produce(
        kafka_broker.bootstrap_servers,
        topic,
        GeneratorSpec(count=EVENTS, malformed_fraction=0.05, seed=7),
        partitions=PARTITIONS,
    )
    root = tmp_path_factory.mktemp("verify")
    data = _config(root, kafka_broker.bootstrap_servers, topic)
    cfg = parse_config(data)
    states: list[str | None] = []
    stats = Pipeline(cfg, spark).run(tick=lambda _: states.append(read_run_state(cfg).state))
    assert stats.batches == 2 and stats.records + stats.dead_letters == EVENTS
    return {
        fmt: Lake(fmt, data, cfg, topic, result, root, kafka_broker, states)
        for fmt in ("iceberg", "hudi")
    }


def _iceberg_table(lake: Lake) -> Any:
    from pyiceberg.catalog import load_catalog

    c = lake.cfg.sink.catalog
    return load_catalog(c.name, **c.pyiceberg_properties()).load_table(lake.cfg.sink.table)


def _hudi_base(lake: Lake) -> Path:
    return lake.root / "hudi" / "events"


def _files(base: Path) -> set[Path]:
    return {p for p in base.rglob("*") if p.is_file()}


@pytest.fixture(params=["iceberg", "hudi"])
def lake(request: pytest.FixtureRequest, lakes: dict[str, Lake]) -> Iterator[Lake]:
    lk = lakes[request.param]
    if lk.fmt == "iceberg":
        clean = _iceberg_table(lk).current_snapshot().snapshot_id
        yield lk
        table = _iceberg_table(lk)
        if table.current_snapshot().snapshot_id != clean:
            table.manage_snapshots().set_current_snapshot(clean).commit()
    else:
        before = _files(_hudi_base(lk))
        yield lk
        for path in _files(_hudi_base(lk)) - before:
            path.unlink()


def _verify(lake: Lake, **kw: Any) -> VerifyReport:
    reports = verify_pipeline(lake.cfg, lake.fmt, **kw)  # type: ignore[arg-type]
    assert len(reports) == 1 and reports[0].table_format == lake.fmt
    return reports[0]


def _cli(*argv: str) -> int:
    """``ingest ARGV`` in-process (output to the captured stdout); its exit status."""
    from pipeline.cli import main

    try:
        main(list(argv))
    except SystemExit as e:
        return int(e.code or 0)
    return 0


# EXACTLY ONCE that neither says "for <what was checked>" nor is a NOT EXACTLY ONCE
BARE_VERDICT = re.compile(r"(?<!NOT )EXACTLY ONCE(?! for )")


def _main_offsets(lake: Lake, partition: int) -> list[int]:
    """Offsets of main-table rows of one partition (read with the format's reader)."""
    if lake.fmt == "iceberg":
        from pyiceberg.expressions import EqualTo

        t = _iceberg_table(lake).scan(row_filter=EqualTo("_kafka_partition", partition)).to_arrow()
    else:
        import hudi

        batches = hudi.HudiTableBuilder.from_base_uri(str(_hudi_base(lake))).build().read()
        t = pa.Table.from_batches(batches)
        t = t.filter(pc.equal(t["_kafka_partition"], partition))
    return sorted(t["_kafka_offset"].to_pylist())


# -- Hudi tampering by hand: a completed commit that adds or replaces base files -------------


def _new_instant(base: Path) -> str:
    latest = max(p.name.split(".")[0] for p in (base / ".hoodie").glob("*.commit"))
    now = datetime.now(UTC).strftime("%Y%m%d%H%M%S%f")[:17]
    return now if now > latest else str(int(latest) + 1)


def _hudi_commit(
    base: Path, instant: str, stats: list[dict[str, Any]], extra: dict[str, str] | None = None
) -> None:
    meta = base / ".hoodie"
    last = sorted(meta.glob("*.commit"))[-1]
    schema = json.loads(last.read_text())["extraMetadata"]["schema"]
    doc = {
        "partitionToWriteStats": {},
        "compacted": False,
        "extraMetadata": {"schema": schema, **(extra or {})},
        "operationType": "UPSERT",
    }
    for s in stats:
        doc["partitionToWriteStats"].setdefault(s["partitionPath"], []).append(s)
    (meta / f"{instant}.commit.requested").write_bytes(b"")
    (meta / f"{instant}.inflight").write_text("{}")
    (meta / f"{instant}.commit").write_text(json.dumps(doc))


def _hudi_write(
    base: Path, partition_path: str, file_id: str, instant: str, rows: pa.Table, prev: str
) -> dict[str, Any]:
    rel = f"{partition_path}/{file_id}_0-0-0_{instant}.parquet"
    pq.write_table(rows, base / rel)
    size = (base / rel).stat().st_size
    return {
        "fileId": file_id,
        "path": rel,
        "prevCommit": prev,
        "numWrites": rows.num_rows,
        "numDeletes": 0,
        "numUpdateWrites": 0,
        "numInserts": rows.num_rows,
        "totalWriteBytes": size,
        "totalWriteErrors": 0,
        "partitionPath": partition_path,
        "fileSizeInBytes": size,
    }


def _hudi_slice_with(base: Path, partition: int, offset: int) -> tuple[Any, pa.Table]:
    """The latest file slice holding (partition, offset), and its rows."""
    import hudi

    for s in hudi.HudiTableBuilder.from_base_uri(str(base)).build().get_file_slices():
        rows = pq.read_table(base / s.base_file_relative_path())
        hit = pc.and_(
            pc.equal(rows["_kafka_partition"], partition), pc.equal(rows["_kafka_offset"], offset)
        )
        if pc.any(hit).as_py():
            return s, rows
    raise AssertionError(f"no file holds partition {partition} offset {offset}")


def _hudi_replace(lake: Lake, partition: int, offset: int, change: str) -> None:
    """A commit that replaces the slice holding the record: without it or with it changed."""
    base = _hudi_base(lake)
    s, rows = _hudi_slice_with(base, partition, offset)
    hit = pc.and_(
        pc.equal(rows["_kafka_partition"], partition), pc.equal(rows["_kafka_offset"], offset)
    )
    if change == "delete":
        rows = rows.filter(pc.invert(hit))
    else:
        i = rows.schema.get_field_index("page")
        rows = rows.set_column(
            i, rows.schema.field(i), pc.if_else(hit, pa.scalar("/tampered"), rows["page"])
        )
    instant = _new_instant(base)
    stat = _hudi_write(base, s.partition_path, s.file_id, instant, rows, s.creation_instant_time)
    _hudi_commit(base, instant, [stat])


# -- the tampering, per format ----------------------------------------------------------------


def _inject_duplicates(lake: Lake, partition: int, n: int) -> list[int]:
    offsets = _main_offsets(lake, partition)[:n]
    if lake.fmt == "iceberg":
        from pyiceberg.expressions import And, EqualTo, LessThanOrEqual

        table = _iceberg_table(lake)
        rows = table.scan(
            row_filter=And(
                EqualTo("_kafka_partition", partition),
                LessThanOrEqual("_kafka_offset", offsets[-1]),
            )
        ).to_arrow()
        assert rows.num_rows == n
        table.append(rows)
    else:
        base = _hudi_base(lake)
        import hudi

        t = pa.Table.from_batches(hudi.HudiTableBuilder.from_base_uri(str(base)).build().read())
        rows = t.filter(
            pc.and_(
                pc.equal(t["_kafka_partition"], partition),
                pc.is_in(t["_kafka_offset"], pa.array(offsets, pa.int64())),
            )
        )
        country = rows["_hoodie_partition_path"][0].as_py()
        rows = rows.filter(pc.equal(rows["_hoodie_partition_path"], country))
        offsets = sorted(rows["_kafka_offset"].to_pylist())
        instant = _new_instant(base)
        stat = _hudi_write(base, country, f"{uuid.uuid4()}-0", instant, rows, "null")
        _hudi_commit(base, instant, [stat])
    return offsets


def _delete_record(lake: Lake, partition: int, offset: int) -> None:
    if lake.fmt == "iceberg":
        from pyiceberg.expressions import And, EqualTo

        _iceberg_table(lake).delete(
            And(EqualTo("_kafka_partition", partition), EqualTo("_kafka_offset", offset))
        )
    else:
        _hudi_replace(lake, partition, offset, "delete")


def _change_field(lake: Lake, partition: int, offset: int) -> None:
    if lake.fmt == "iceberg":
        from pyiceberg.expressions import And, EqualTo

        table = _iceberg_table(lake)
        where = And(EqualTo("_kafka_partition", partition), EqualTo("_kafka_offset", offset))
        row = table.scan(row_filter=where).to_arrow()
        i = row.schema.get_field_index("page")
        field = row.schema.field(i)
        row = row.set_column(i, field, pa.array(["/tampered"], field.type))
        table.overwrite(row, overwrite_filter=where)
    else:
        _hudi_replace(lake, partition, offset, "change")


def _commit_overlapping_range(lake: Lake, partition: int, start: int, end: int) -> None:
    """A commit whose checkpoint claims offsets earlier commits already hold."""
    committed = {str(p): b + 1 for (_, p), (_, b) in lake.produced.offsets.items()}
    extra = {
        "ingest.pipeline-id": lake.cfg.id,
        "ingest.incarnation": "tampered",
        "ingest.batch-id": "99",
        "ingest.epoch": "1",
        "ingest.ranges": json.dumps({lake.topic: {str(partition): [start, end]}}),
        "ingest.committed-offsets": json.dumps({lake.topic: committed}),
        "ingest.records": "0",
    }
    if lake.fmt == "iceberg":
        table = _iceberg_table(lake)
        with table.transaction() as tx:
            tx.update_snapshot(snapshot_properties=extra).fast_append().commit()
        assert table.refresh().current_snapshot().summary["ingest.batch-id"] == "99"
    else:
        base = _hudi_base(lake)
        _hudi_commit(base, _new_instant(base), [], extra)


# -- the tests ---------------------------------------------------------------------------------


def test_clean_tables_verify_exactly_once(lake: Lake) -> None:
    report = _verify(lake)
    assert report.ok, report.verdict()
    assert report.range_issues == [] and report.commits == 2
    per = {t.partition: v for t, v in report.partitions.items()}
    assert {p: v.expected for p, v in per.items()} == lake.expected_per_partition()
    assert {p: v.present for p, v in per.items()} == lake.expected_per_partition()
    assert report.totals().expected == EVENTS
    assert report.dead_letter_table is not None  # malformed records were checked there too
    doc = report.to_dict()
    assert doc["ok"] is True and doc["totals"]["present"] == EVENTS
    assert report.complete and doc["coverage"]["checked"] == doc["coverage"]["total"] == EVENTS
    assert report.verdict().startswith(f"EXACTLY ONCE for all {EVENTS} committed records checked")


def test_injected_duplicates_are_counted_and_fail_the_cli(lake: Lake) -> None:
    offsets = _inject_duplicates(lake, 0, 5)
    report = _verify(lake)
    v = report.partitions[TopicPartition(lake.topic, 0)]
    assert v.duplicated == len(offsets) > 0
    assert v.duplicated_offsets == offsets and v.missing == 0 and v.unexpected == 0
    assert not report.ok
    assert any("no ingest checkpoint" in n for n in report.notes)

    out = lake.root / "verify.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "verify", "--config", str(lake.config_file()),
         "--format", lake.fmt, "--json", str(out), "--no-payload"],
        capture_output=True, text=True, timeout=180, env=env,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "NOT EXACTLY ONCE" in proc.stdout
    doc = json.loads(out.read_text())
    assert doc["ok"] is False
    assert doc["reports"][0]["totals"]["duplicated"] == len(offsets)


def test_deleted_record_is_missing(lake: Lake) -> None:
    offset = _main_offsets(lake, 1)[7]
    _delete_record(lake, 1, offset)
    report = _verify(lake)
    v = report.partitions[TopicPartition(lake.topic, 1)]
    assert v.missing == 1 and v.missing_offsets == [offset]
    assert report.totals().missing == 1 and report.totals().duplicated == 0
    assert not report.ok


def test_changed_field_is_a_payload_mismatch(lake: Lake) -> None:
    offset = _main_offsets(lake, 2)[3]
    _change_field(lake, 2, offset)
    report = _verify(lake)
    v = report.partitions[TopicPartition(lake.topic, 2)]
    assert v.mismatched == 1 and v.mismatched_offsets == [offset]
    assert v.mismatched_fields == {"page": 1}
    assert v.missing == 0 and v.duplicated == 0 and not report.ok
    # counting only: the same table passes without the payload check
    assert _verify(lake, payload=False).ok


def test_overlapping_range_in_commit_metadata_is_reported(lake: Lake) -> None:
    _commit_overlapping_range(lake, 0, 10, 20)
    report = _verify(lake, payload=False)
    kinds = {(i.kind, i.tp.partition, i.start, i.end) for i in report.range_issues}
    assert ("overlap", 0, 10, 20) in kinds
    assert report.totals().missing == 0 and not report.ok


def test_tiny_window_gives_the_same_verdict(lake: Lake) -> None:
    dups = _inject_duplicates(lake, 0, 3)
    big = _verify(lake).to_dict()
    small = _verify(lake, window=7).to_dict()
    for doc in (big, small):
        doc.pop("seconds")
        doc.pop("window")
    assert small == big
    assert big["totals"]["duplicated"] == len(dups) > 0 and big["totals"]["expected"] == EVENTS


def test_retention_after_commit_is_unverifiable_not_missing(
    lake: Lake, capsys: pytest.CaptureFixture[str]
) -> None:
    # last in the module: deleting records cannot be undone (same cut in both formats)
    cut = 25
    lake.broker.own().delete_records(lake.topic, 0, cut)
    report = _verify(lake)
    v = report.partitions[TopicPartition(lake.topic, 0)]
    assert v.unverifiable == cut and v.missing == 0 and v.unexpected == 0
    assert v.expected == lake.expected_per_partition()[0] - cut
    assert report.ok and not report.complete, report.verdict()

    # the CLI: the verdict states its coverage, never a bare EXACTLY ONCE; exit 0 by
    # default, 1 with --require-full; the JSON report carries the coverage
    config = str(lake.config_file())
    args = ("verify", "--config", config, "--format", lake.fmt, "--no-payload")
    assert _cli(*args) == 0
    text = capsys.readouterr().out
    assert BARE_VERDICT.search(text) is None, text
    assert (
        f"EXACTLY ONCE for the {EVENTS - cut:,} of {EVENTS:,} committed records checked; "
        f"{cut} unverifiable (below the log start: deleted by retention" in text
    ), text
    assert "unverifiable/lost" in text and f"│ {lake.topic} " in text  # not cut (no tty)
    out = lake.root / f"coverage-{lake.fmt}.json"
    assert _cli(*args, "--require-full", "--json", str(out)) == 1
    text = capsys.readouterr().out
    assert BARE_VERDICT.search(text) is None and "--require-full:" in text, text
    doc = json.loads(out.read_text())
    assert doc["ok"] is True and doc["complete"] is False
    cov = doc["reports"][0]["coverage"]
    assert (cov["checked"], cov["unverifiable"], cov["total"]) == (EVENTS - cut, cut, EVENTS)
    assert list(cov["unverifiable_reasons"].values()) == [cut]
    assert "retention" in next(iter(cov["unverifiable_reasons"]))


def test_status_after_a_data_loss_stop(
    lakes: dict[str, Lake], spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ingest status`` on ``sink.format: both``: stopped, the stop's error line (kept
    next to the checkpoint by ``Pipeline.run``), the journal from the Hudi timeline (where
    ``both`` journals), and per partition the records already below the log start."""
    from pipeline.errors import find_pipeline_error
    from pipeline.formats.both import DualTables

    lake = lakes["iceberg"]
    assert "running" in lake.run_states  # recorded once the fixture's query had started
    assert read_run_state(lake.cfg).state == "stopped"  # then a clean stop
    # retention deletes records the pipeline has not read yet: partition 1 loses them
    more = produce(
        lake.broker.bootstrap_servers, lake.topic, GeneratorSpec(count=30, seed=8), partitions=3
    )
    committed = lake.expected_per_partition()[1] + min(lake.produced.offsets[(lake.topic, 1)])
    head = more.offsets[(lake.topic, 1)][1] + 1
    lake.broker.own().delete_records(lake.topic, 1, head)
    with pytest.raises(Exception) as failed:
        Pipeline(lake.cfg, spark).run(timeout_s=120)
    line = find_pipeline_error(failed.value)
    assert line is not None and "retention" in line, failed.value
    state = read_run_state(lake.cfg)
    assert (state.state, state.error) == ("stopped", line)

    assert _cli("status", "--config", str(lake.config_file())) == 0
    text = capsys.readouterr().out
    assert f"pipeline {lake.cfg.id}: STOPPED" in text, text
    assert f"last error: {line}" in text
    epochs = DualTables.from_config(lake.cfg).timeline(lake.cfg.id).epochs()
    assert epochs and f"writer epoch: {epochs[-1]}" in text  # the Hudi-side journal
    assert "table db.events:" in text and "Hudi table" in text
    # each table's live data files and their average size (small files: ingest compact)
    assert re.search(r"^table db\.events: [\d,]+ live data files, average ", text, re.M), text
    assert re.search(r"^Hudi table \S+: [\d,]+ live data files, average ", text, re.M), text
    for header in ("log start", "high watermark", "committed", "lag", "below log start"):
        assert header in text
    # topic, partition, log start, high watermark, committed, lag, below log start
    cells = rf"{lake.topic} +│ +1 +│ +{head} +│ +{head} +│ +{committed} +│ +(\d+) +│ +(\d+) +│"
    row = re.search(cells, text)
    assert row is not None, text
    assert int(row.group(1)) == int(row.group(2)) == head - committed > 0
    assert f"{head - committed} records in 1 partition(s) were deleted by retention" in text


def test_value_decoder_bisects_to_the_undecodable_records() -> None:
    from pipeline.config import DecodeConfig
    from pipeline.ops.verify.payload import ValueDecoder

    decoder = ValueDecoder(
        DecodeConfig.model_validate(
            {
                "schema": [
                    {"name": "id", "type": "long"},
                    {"name": "ts", "type": "timestamptz"},
                    {"name": "price", "type": "decimal(10,2)"},
                    {"name": "day", "type": "date"},
                ]
            }
        )
    )
    values = [
        b'{"id": 1, "ts": "2024-06-01T02:00:00+02:00", "price": 12.345, "day": "2024-06-01"}',
        b"not json",
        b'{"id": 3,\n "ts": "2024-06-01T00:00:01Z"}',  # a raw newline as whitespace
        b'{"id": "four"}',
        b'{"id": 5, "ts": "2024-06-01 00:00:02"}',  # no zone: UTC (the session time zone)
    ]
    table, ok = decoder.decode(pa.array(values, pa.large_binary()))  # as the Kafka reader
    assert decoder.decode(pa.array(values, pa.binary()))[0].equals(table)
    assert ok.tolist() == [True, False, True, False, True]
    rows = table.to_pylist()
    assert [r["id"] for r in rows] == [1, None, 3, None, 5]
    assert [r["ts"].isoformat() if r["ts"] else None for r in rows] == [
        "2024-06-01T00:00:00+00:00",
        None,
        "2024-06-01T00:00:01+00:00",
        None,
        "2024-06-01T00:00:02+00:00",
    ]
    assert str(rows[0]["price"]) == "12.35" and str(rows[0]["day"]) == "2024-06-01"


def test_cli_missing_table_is_an_operator_error(tmp_path: Path) -> None:
    data = _config(tmp_path, "127.0.0.1:9", "nothing")
    data["sink"]["format"] = "iceberg"
    # a warehouse without the table (no warehouse at all: tests/integration/ops/test_cli_errors.py)
    Path(data["sink"]["catalog"]["warehouse"]).mkdir(parents=True)
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(data))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline", "verify", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Iceberg table db.events does not exist" in proc.stderr
