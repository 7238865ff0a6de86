"""Failover drills (`ingest drill`): a live 3-node Apache Kafka cluster (real brokers, whose
processes the broker drills SIGKILL and SIGSTOP), rate producer, the pipeline as its own
OS process, injected faults, then an exactly-once count.

Default run (fast subset): a SIGKILL drill with 2 kills on Iceberg and the
checkpoint-deleted drill. ``-m drill``: CI's subset of the full matrix (``CI_FORMAT``
below: a SIGKILL at every named fault point on Iceberg and Hudi, each other scenario on
one format, executor loss on a standalone cluster); the whole matrix is ``ingest drill
--matrix full`` (every scenario on both formats, 20 SIGKILLs, the both format's kill drill),
whose report docs/drills.md commits.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console
from support.kafka_fixtures import KafkaTestBroker
from support.rotation import SHARES, drills_of

from lab.broker import KAFKA_VERSION
from lab.drill.brokers import broker_info, nodes_for
from lab.drill.model import DrillResult, DrillSpec, FaultEvent, Sample
from lab.drill.report import summary_table, write_json, write_timeline
from lab.drill.runner import DrillOptions, run_drills, select
from pipeline.commit.offsets import TopicPartition
from pipeline.errors import ConfigError


def _run(
    tmp_path: Path,
    matrix: str,
    scenarios: list[str],
    kills: int,
    standby_kills: int | None = None,
    executor_kills: int | None = None,
    only: Callable[[DrillSpec], bool] | None = None,
    on_rest: frozenset[str] = frozenset(),
) -> dict:
    """``on_rest``: the scenarios whose Iceberg tables go through a REST catalog."""
    formats = ["iceberg"] if matrix == "fast" else []
    specs = select(matrix, scenarios, formats, kills, 100.0, standby_kills, executor_kills)
    if only is not None:
        specs = [s for s in specs if only(s)]
    specs = [dataclasses.replace(s, catalog="rest") if s.scenario in on_rest else s for s in specs]
    results = run_drills(
        specs, DrillOptions(out=tmp_path, kills=kills, rate=100.0), Console(width=200)
    )
    assert (tmp_path / "report.json").is_file()
    report = json.loads((tmp_path / "report.json").read_text())
    assert len(report["drills"]) == len(results) == len(specs)
    return report


FORMATS = ("iceberg", "hudi")


def test_full_matrix_selection_runs_every_scenario_on_both_formats() -> None:
    specs = select("full", [], [], kills=20, rate=300.0)
    kills = [s for s in specs if s.scenario == "kill"]
    assert {s.table_format for s in kills} == {"iceberg", "hudi", "both"}
    assert all(s.kills == 20 for s in kills)
    per_format = {f: {s.scenario for s in specs if s.table_format == f} for f in FORMATS}
    others = {"task-failure", "broker-outage", "zombie", "standby", "checkpoint-deleted"}
    others |= {"retention", "executor-loss", "schema-change", "avro-schema-change"}
    assert {s.kills for s in select("full", [], [], 20, 1.0, 3) if s.scenario == "standby"} == {3}
    # executor-loss runs on a standalone cluster, with its own kill count
    loss = [s for s in select("full", [], [], 20, 1.0, 3, 2) if s.scenario == "executor-loss"]
    assert [(s.table_format, s.kills, s.cluster) for s in loss] == [
        ("iceberg", 2, True),
        ("hudi", 2, True),
    ]
    assert not any(s.cluster for s in specs if s.scenario != "executor-loss")
    on_cluster = select("full", ["kill"], ["hudi"], 5, 1.0, cluster=True)
    assert [(s.label, s.cluster) for s in on_cluster] == [("kill@cluster", True)]
    # Hudi's kill and zombie drills run with the tables on S3 in the full matrix
    on_s3 = {(s.label, s.table_format) for s in specs if s.storage == "s3"}
    assert on_s3 == {("kill@s3", "hudi"), ("zombie@s3", "hudi")}
    chosen = select("full", ["zombie"], ["iceberg"], 5, 1.0, storage="s3")
    assert [(s.label, s.storage) for s in chosen] == [("zombie@s3", "s3")]
    assert per_format["hudi"] == {"kill", *others}
    routed = {"routed-kill", "routed-route-change", "routed-new-topic"}
    routed |= {"routed-checkpoint-deleted", "routed-zombie"}
    # the catalog outage needs a catalog, the routed drills a routed set (Iceberg's)
    assert per_format["iceberg"] == {"kill", *others, "catalog-outage", *routed}
    assert not [s for s in select("full", [], ["both"], 9, 1.0) if s.routed is not None]
    with pytest.raises(ConfigError, match="needs a routed Iceberg set"):
        select("full", ["routed-kill"], ["hudi"], 20, 1.0)
    twenty = select("full", ["routed-checkpoint-deleted"], [], 9, 1.0)
    assert [(s.label, s.routed and (s.routed.topics, s.routed.partitions)) for s in twenty] == [
        ("routed-checkpoint-deleted", (20, 1))
    ]
    assert [s.scenario for s in specs if s.table_format == "both"] == ["kill"]
    assert [s.kills for s in select("fast", [], [], 20, 300.0)] == [2, 2]
    assert [s.table_format for s in select("full", ["zombie"], ["hudi"], 20, 1.0)] == ["hudi"]
    with pytest.raises(ConfigError, match="needs an Iceberg catalog"):
        select("full", ["catalog-outage"], ["hudi"], 20, 1.0)
    with pytest.raises(ConfigError, match="unknown drill scenario"):
        select("full", ["meteor"], [], 20, 1.0)


def test_report_json_and_png_from_a_result(tmp_path: Path) -> None:
    bad = DrillResult("kill", "hudi", faults=1, restarts=1, produced=10, committed=9, missing=1)
    bad.recover_s = [3.0, 5.0]
    bad.samples = [Sample(0.0, 0, 0), Sample(1.0, 10, 5), Sample(2.0, 10, 9)]
    bad.events = [FaultEvent(0.5, "kill", "after-commit"), FaultEvent(1.0, "recovered", "0.5s")]
    skipped = DrillResult("retention", "iceberg", skipped="needs the drill's own Kafka cluster")
    meta = {"kills": 1, "broker": broker_info(None)}
    data = json.loads(write_json([bad, skipped], meta, tmp_path / "r.json").read_text())
    assert data["ok"] is False
    assert data["broker"]["kafka_version"] == KAFKA_VERSION
    d = data["drills"][0]
    assert (d["verdict"], d["recover_median_s"], d["recover_max_s"]) == ("FAILED", 4.0, 5.0)
    assert data["drills"][1]["verdict"] == "skipped"
    png = write_timeline([bad, skipped], tmp_path / "t.png")
    assert png is not None and png.read_bytes()[:4] == b"\x89PNG"


def test_the_report_states_the_broker() -> None:
    """The drills' own clusters: Kafka version, one broker for driver faults, three
    (replication factor 3, min.insync.replicas 2) for broker faults; an external one is
    "external"; the table says which."""
    own = broker_info(None)
    assert (own["kind"], own["kafka_version"], own["brokers"]) == ("local", KAFKA_VERSION, 1)
    assert (own["broker_fault_brokers"], own["broker_fault_replication_factor"]) == (3, 3)
    assert own["broker_fault_min_insync_replicas"] == 2
    assert own["description"] == (
        f"Apache Kafka {KAFKA_VERSION} (KRaft, local JVMs): 1 broker; broker faults on 3 "
        "brokers, replication factor 3, min.insync.replicas 2"
    )
    assert nodes_for("broker-outage") == 3 and nodes_for("kill") == 1
    ext = broker_info("kafka-1:9092")
    assert ext["kind"] == ext["kafka_version"] == ext["replication_factor"] == "external"
    assert ext["bootstrap_servers"] == "kafka-1:9092"
    console = Console(width=200, record=True)
    console.print(summary_table([DrillResult("kill", "iceberg")], own["description"]))
    assert f"broker: Apache Kafka {KAFKA_VERSION} (KRaft, local JVMs): 1 broker" in (
        console.export_text()
    )


def test_records_acknowledged_without_an_offset_are_counted_per_partition() -> None:
    """librdkafka reports a retried batch the broker already had (DUPLICATE_SEQUENCE_NUMBER,
    seen after every node was SIGKILLed) as delivered with no offset: the producer counts
    such records per partition, and the count places them on the tables' records at
    offsets no acknowledgement named, in that partition only."""
    from lab.drill.count import tally
    from lab.drill.producer import RateProducer

    producer = RateProducer("localhost:9092", "t", 2, 1.0, seed=1)
    for part, off in ((0, 0), (0, None), (0, 2), (1, 0), (1, None)):
        producer.delivered(part, off)
    assert producer.produced == 5
    assert producer.expected() == {TopicPartition("t", 0): [0, 2], TopicPartition("t", 1): [0]}
    assert producer.unplaced_counts() == {TopicPartition("t", 0): 1, TopicPartition("t", 1): 1}
    # partition 1's unplaced record comes after its last known offset: the drain waits for it
    assert producer.ends() == {TopicPartition("t", 0): 3, TopicPartition("t", 1): 2}

    want = {("t", 0, 0), ("t", 0, 2), ("t", 1, 0)}
    seen = {("t", 0, 0): 1, ("t", 0, 1): 1, ("t", 0, 2): 1, ("t", 1, 0): 1}
    c = tally(seen, want, {})
    assert (c.expected, c.present, c.missing, c.unexpected) == (3, 4, 0, 1)
    c = tally(seen, want, {("t", 0): 1})
    assert (c.expected, c.present, c.missing, c.unexpected, c.duplicated) == (4, 4, 0, 0, 0)
    c = tally(seen, want, {("t", 0): 2})  # one of them is not in the tables
    assert (c.missing, c.unexpected) == (1, 0)
    c = tally(seen, want, {("t", 1): 1})  # partition 0's extra record is no match for it
    assert (c.missing, c.unexpected) == (1, 1)
    c = tally({**seen, ("t", 0, 1): 2}, want, {("t", 0): 1})  # a copy twice is a duplicate
    assert (c.missing, c.unexpected, c.duplicated) == (0, 0, 1)
    assert tally(seen, want, {}).unacknowledged == [("t", 0, 1)]


def test_records_at_unacknowledged_offsets_are_looked_up_in_kafka(
    kafka_broker: KafkaTestBroker,
) -> None:
    """Every node SIGKILLed with sends in flight: Kafka can hold a record whose
    acknowledgement the producer never saw (seen in the CI drill matrix: 2 such records,
    each ingested once, failed the broker-outage drill as "not produced"). The verdict
    looks such offsets up in Kafka: held there, a note; not held, the pipeline invented
    them -- a problem."""
    from confluent_kafka import Producer

    from lab.drill.verdict import not_in_kafka
    from pipeline.config import parse_config

    topic = kafka_broker.new_topic("drill-unacked", 1)
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    for i in range(3):
        p.produce(topic, value=b"v%d" % i, partition=0)
    assert p.flush(30) == 0
    cfg = parse_config(
        {
            "id": "unacked",
            "source": {"bootstrapServers": kafka_broker.bootstrap_servers, "topics": [topic]},
            "decode": {"format": "raw"},
            "sink": {"table": "db.events", "catalog": {"warehouse": "/nonexistent/w"}},
            "checkpointLocation": "/nonexistent/c",
        }
    )
    coords = [(topic, 0, 1), (topic, 0, 2), (topic, 0, 3), (topic, 1, 0)]
    assert not_in_kafka(cfg, coords, timeout_s=10) == [(topic, 0, 3), (topic, 1, 0)]
    assert not_in_kafka(cfg, coords[:2], timeout_s=10) == []


def test_drills_run_with_background_compaction_and_orphan_cleanup(tmp_path: Path) -> None:
    from lab.drill.pipeline_config import drill_config
    from lab.drill.scenarios import DUAL_KILL_POINTS, KILL_POINTS
    from pipeline.commit.faults import POINTS
    from pipeline.config import parse_config

    for fmt in ("iceberg", "hudi", "both"):
        for name in ("kill", "zombie", "checkpoint-deleted", "standby"):
            spec = DrillSpec(name, fmt)  # type: ignore[arg-type]
            cfg = parse_config(drill_config(spec, tmp_path, "localhost:9092", "t", None))
            c = cfg.maintenance.compaction
            if name in ("kill", "zombie", "standby"):
                assert (c.enabled, c.interval, c.min_input_files) == (True, 5.0, 4)
                assert c.target_file_size_bytes == 1 << 20
            else:
                assert not c.enabled
            o = cfg.maintenance.orphans  # orphan cleanup beside live ingest, short olderThan
            if name in ("kill", "zombie", "standby"):
                assert (o.enabled, o.older_than, o.interval) == (True, 15.0, 10.0)
                assert cfg.commit.catalog_retry_seconds <= o.older_than
            else:
                assert not o.enabled
    # Hudi's own writer runs Hudi's services: the pipeline's compaction and orphan cleanup
    # are the native writer's, so a drill of it neither runs nor expects them
    spark = DrillSpec("kill", "hudi", hudi_writer="spark")
    cfg = parse_config(drill_config(spark, tmp_path, "localhost:9092", "t", None))
    assert cfg.sink.hudi is not None and cfg.sink.hudi.writer == "spark"
    assert not cfg.maintenance.compaction.enabled and not cfg.maintenance.orphans.enabled
    assert spark.label == "kill@spark-writer"
    from lab.drill.scenarios.driver_kills import kill_points

    # ... and is not armed at the compaction's fault points (a drill waited 360 s for each)
    assert kill_points(spark) == tuple(p for p in KILL_POINTS if "compaction" not in p)
    assert kill_points(DrillSpec("kill", "hudi")) == KILL_POINTS
    assert kill_points(DrillSpec("kill", "both")) == DUAL_KILL_POINTS
    # the compaction points come last, after the ingest chain, in both orders
    tail = ("compaction-after-write", "compaction-after-commit")
    assert KILL_POINTS[-2:] == DUAL_KILL_POINTS[-2:] == tail
    assert [p for p in DUAL_KILL_POINTS if p != "between-table-commits"] == list(KILL_POINTS)
    assert DUAL_KILL_POINTS.index("between-table-commits") == KILL_POINTS.index("after-commit")
    assert set(DUAL_KILL_POINTS) <= set(POINTS)
    assert len(KILL_POINTS) + 1 == len(DUAL_KILL_POINTS) <= 20  # the full matrix hits all


def test_drills_of_hudis_writer_note_the_services_on_its_timeline(tmp_path: Path) -> None:
    """Hudi's own services run inline with its writer: the drill's note counts the completed
    actions on the main table's timeline and the archiver's history files."""
    from lab.drill.pipeline_config import drill_config
    from lab.drill.verdict import hudi_services_outcome
    from pipeline.config import parse_config

    spec = DrillSpec("kill", "hudi", hudi_writer="spark")
    cfg = parse_config(drill_config(spec, tmp_path, "localhost:9092", "t", None))
    assert cfg.sink.hudi is not None
    timeline = Path(cfg.sink.hudi.base_path) / ".hoodie" / "timeline"
    (timeline / "history").mkdir(parents=True)
    for name in (
        "20261129010101000.commit.requested",
        "20261129010101000.inflight",
        "20261129010101000_20261129010102000.commit",
        "20261129010103000_20261129010104000.commit",
        "20261129010105000_20261129010105500.clean",
        "20261129010106000_20261129010106500.rollback",
        "20261129010107000_20261129010107500.commit.2536a413-da26-42c1-aa70-16a4632b2708",
        "history/00000000_00000001_0.parquet",
    ):
        (timeline / name).write_bytes(b"")
    result = DrillResult(spec.label, "hudi")
    hudi_services_outcome(result, cfg)
    assert result.notes == [
        "Hudi's timeline of the main table: completed 1 clean, 2 commit, 1 rollback; "
        "1 archived-history files"
    ]
    native = DrillResult("kill", "hudi")
    native_spec = DrillSpec("kill", "hudi")
    hudi_services_outcome(
        native, parse_config(drill_config(native_spec, tmp_path, "h:1", "t", None))
    )
    assert native.notes == []  # the native writer's drills count compactions instead


def test_compaction_commits_are_named_per_table_and_counted() -> None:
    """The drill names each table's compaction commits (``TableMaintenance
    .compaction_commits``, tested per format in
    tests/integration/formats/*/test_*_maintenance.py) and counts
    them per table in its note."""
    from types import SimpleNamespace

    from lab.drill.compactions import compaction_commits, compaction_note

    def table(name: str, commits: list[str]) -> SimpleNamespace:
        return SimpleNamespace(name=name, compaction_commits=lambda: commits)

    tables = SimpleNamespace(
        maintenance=lambda: [
            table("table db.events", ["2"]),
            table("table db.events_dead_letter", []),
            table("Hudi table db.events", ["t1", "t2"]),
        ]
    )
    seen = compaction_commits(tables)
    assert seen == {"table db.events@2", "Hudi table db.events@t1", "Hudi table db.events@t2"}
    assert compaction_note(seen) == (
        "3 compaction commit(s) during the drill (Hudi table db.events: 2, table db.events: 1)"
    )
    assert compaction_note(set()) == "0 compaction commit(s) during the drill"


def test_file_economy_summary_and_plot(tmp_path: Path) -> None:
    from lab.drill.files import (
        Checkpoint,
        checkpoint_from_report,
        economy,
        table_summary,
    )
    from lab.drill.report import write_files_png

    def samples(curve: list[tuple[int, int]]) -> list[dict]:
        return [
            {"t": 5.0 * i, "produced": 0, "tables": {"main": [f, b], "dl": [0, 0]}}
            for i, (f, b) in enumerate(curve)
        ]

    on = samples([(10, 1000), (2, 2000), (12, 3000), (2, 4000)])
    off = samples([(10, 1000), (20, 2000), (30, 3000), (40, 4000)])
    s_on = table_summary(on, "main")
    assert s_on == {
        "samples": 4,
        "max_files": 12,
        "mean_files": 6.5,
        "final_files": 2,
        "final_bytes": 4000,
        "final_average_bytes": 2000,
        "mean_average_bytes": round((100 + 1000 + 250 + 2000) / 4),
        "last_half_mean_average_bytes": round((250 + 2000) / 2),  # t >= 7.5 s
    }
    assert table_summary(on, "dl") == {"samples": 0}  # no files yet: no average
    s_off = table_summary(off, "main")
    assert s_off["final_average_bytes"] == 100 and s_off["max_files"] == 40
    eco = economy(s_on, s_off)
    assert eco["files_bound"] == 12 and eco["baseline_final_files"] == 40
    assert eco["final_average_ratio"] == 20.0
    assert eco["last_half_mean_average_ratio"] == round(1125 / 100, 1)
    doc = {
        "ok": True,
        "complete": True,
        "reports": [
            {"verdict": "EXACTLY ONCE", "totals": {"expected": 5, "missing": 0, "samples": {}}},
            {"verdict": "EXACTLY ONCE", "totals": {"expected": 3, "missing": 0}},
        ],
    }
    cp = checkpoint_from_report(doc, Checkpoint(t=120.0))
    assert (cp.ok, cp.complete, cp.totals) == (True, True, {"expected": 8, "missing": 0})
    report = {
        "format": "iceberg",
        "rate": 1000.0,
        "minutes": 0.3,
        "economy": eco,
        "runs": {
            label: {
                "samples": smp,
                "tables": {"main": {}, "dl": {}},
                "main_table": "main",
                "checkpoints": [{"t": 10.0, "ok": True, "complete": label == "files"}],
            }
            for label, smp in (("files", on), ("files-baseline", off))
        },
    }
    png = write_files_png(report, tmp_path / "files.png")
    assert png is not None and png.read_bytes()[:4] == b"\x89PNG"
    assert write_files_png({"runs": {}}, tmp_path / "none.png") is None


@pytest.mark.timeout(1200)
def test_fast_drills_kill_and_checkpoint_deleted(tmp_path: Path) -> None:
    report = _run(tmp_path, "fast", [], kills=2)
    assert report["broker"] == broker_info(None)  # the drills' own clusters
    by_name = {d["scenario"]: d for d in report["drills"]}
    kill, ckpt = by_name["kill"], by_name["checkpoint-deleted"]
    for d in (kill, ckpt):
        assert d["verdict"] == "ok", (d["problems"], d["notes"])
        assert d["missing"] == 0 and d["duplicated"] == 0
        assert d["produced"] > 0 and d["committed"] == d["produced"]
        assert d["samples"] and d["events"]
    assert kill["restarts"] == 2  # after each kill, one restart
    assert kill["faults"] == 2
    assert kill["compactions"] >= 1 and ckpt["compactions"] is None  # background compaction
    assert kill["rollbacks"] >= 1  # after-write left an instant that was rolled back
    assert kill["recover_median_s"] is not None and kill["recover_max_s"] > 0
    assert any(e["kind"] == "checkpoint-deleted" for e in ckpt["events"])
    assert ckpt["recover_s"]  # restart → first commit measured
    png = tmp_path / "timeline.png"
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# The CI subset of `ingest drill --matrix full` (whose committed report, docs/drills.md, runs
# every scenario on both formats with 20 SIGKILLs): the SIGKILL drill on Iceberg and Hudi
# with 9 kills (every named fault point), and the other driver, executor and catalog
# scenarios once, on the format given here, alternating so each format meets half of them
# (the 60-minute CI budget; the other half, the both format's kill drill and the broker
# drills are in the committed report; the routed-set drills, routed-*, run in the
# rotation). Broker faults in CI: the slow stage's real-broker tests
# (tests/integration/commit/test_outages.py: leaders SIGKILLed mid-batch and mid-commit,
# a paused leader, every broker down past and within the deadline, an unclean election, retention
# overtaking a stopped driver); CI's slow stage also crashes the both format between its
# two table commits.
CI_KILLS = 9
CI_KILL_FORMATS = ("iceberg", "hudi")
CI_FORMAT = {
    "task-failure": "hudi",
    "executor-loss": "iceberg",
    "zombie": "hudi",  # on S3: Hudi's commit slots fence the zombie
    "standby": "iceberg",
    "checkpoint-deleted": "iceberg",
    "catalog-outage": "iceberg",  # Iceberg only: a Hudi table has no catalog
}
# on the REST catalog, whose outage is a superset of the SQL catalog's: the server killed
# before and after applying a commit and after answering, a 502 for an applied commit,
# its tokens forgotten, then its PostgreSQL stopped
CI_ON_REST = frozenset({"catalog-outage"})


def _in_ci_subset(spec: DrillSpec) -> bool:
    if spec.scenario == "kill":
        return spec.table_format in CI_KILL_FORMATS
    return CI_FORMAT.get(spec.scenario) == spec.table_format


@pytest.mark.drill
@pytest.mark.extended
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("share", range(SHARES))
def test_left_out_drills(share: int, tmp_path: Path) -> None:
    """The drills of the full matrix outside CI's subset, an eighth per CI run
    (tests/support/rotation.py), each ending 0 missing and 0 duplicated."""
    wanted = set(drills_of(share))

    def in_share(spec: DrillSpec) -> bool:
        return not _in_ci_subset(spec) and (spec.label, spec.table_format) in wanted

    out = Path(os.environ.get("INGEST_DRILL_OUT") or tmp_path)
    report = _run(out, "full", [], CI_KILLS, standby_kills=2, executor_kills=2, only=in_share)
    ran = {(d["scenario"], d["table_format"]): d for d in report["drills"]}
    assert set(ran) == wanted, "the rotation names drills the full matrix does not have"
    assert report["ok"], [(d["scenario"], d["problems"]) for d in report["drills"]]
    for d in ran.values():
        assert d["verdict"] != "skipped", (d["scenario"], d["skipped"])
        assert d["missing"] == 0 and d["duplicated"] == 0, d["scenario"]
        assert d["recover_s"], d["scenario"]  # each fault was recovered from, and timed


@pytest.mark.drill
@pytest.mark.timeout(3600)  # ≈ 20 min on a quiet 2-core host, 29 on a busy one
def test_full_drill_matrix(tmp_path: Path) -> None:
    # INGEST_DRILL_OUT keeps report.json and timeline.png
    out = Path(os.environ.get("INGEST_DRILL_OUT") or tmp_path)
    # the standby drill: 2 SIGKILLs of the active and a pause (each kill waits for a new
    # standby to warm up; CI's budget, the committed report has 5); executor-loss: 2
    # worker+executor SIGKILLs (mid-write, then mid-commit)
    report = _run(
        out,
        "full",
        [],
        CI_KILLS,
        standby_kills=2,
        executor_kills=2,
        only=_in_ci_subset,
        on_rest=CI_ON_REST,
    )
    assert report["ok"], [(d["scenario"], d["problems"]) for d in report["drills"]]
    assert report["broker"] == broker_info(None)  # the drills' own clusters
    ran = [d for d in report["drills"] if d["verdict"] != "skipped"]
    for d in ran:
        assert d["missing"] == 0 and d["duplicated"] == 0, d["scenario"]
        d["scenario"] = d["scenario"].removesuffix("@s3")  # Hudi's kill and zombie: on S3
    (outage,) = [d for d in ran if d["scenario"] == "catalog-outage@rest"]
    kinds = [(e["kind"], e["detail"]) for e in outage["events"]]
    for fault in ("halt-before-apply", "halt-after-apply", "halt-after-answer"):
        assert ("catalog-killed", fault) in kinds, kinds
    assert ("catalog-fault", "answer-502-after-apply") in kinds, kinds
    outage["scenario"] = "catalog-outage"
    assert sorted((d["scenario"], d["table_format"]) for d in ran if d["scenario"] != "kill") == (
        sorted(CI_FORMAT.items())
    )
    kills = {d["table_format"]: d for d in ran if d["scenario"] == "kill"}
    assert set(kills) == set(CI_KILL_FORMATS)
    # kill, zombie and standby drills ran with background compaction, and it committed
    assert all(d["compactions"] for d in ran if d["scenario"] in ("kill", "zombie", "standby"))
    for d in kills.values():
        assert d["faults"] >= CI_KILLS and d["restarts"] >= CI_KILLS
        kinds = {e["detail"] for e in d["events"] if e["kind"] == "kill"}
        assert {"compaction-after-write", "compaction-after-commit"} <= kinds, kinds
        assert d["recover_median_s"] is not None
        # after-precommit / after-dead-letter-commit leave instants the next runs finish
        assert d["recommits"] >= 1 and d["rollbacks"] >= 1
    (standby,) = [d for d in ran if d["scenario"] == "standby"]
    # every kill and the pause: a take-over and its first commit
    assert standby["faults"] == 2 + 2 and standby["restarts"] == 3
    assert len(standby["recover_s"]) == 3
    assert any(n.startswith("resumed driver stopped") for n in standby["notes"]), standby["notes"]
    (loss,) = [d for d in ran if d["scenario"] == "executor-loss"]
    assert loss["faults"] == 2 and len(loss["recover_s"]) == 2  # each kill recovered
    assert [e["kind"] for e in loss["events"]].count("start") == 1  # driver never restarted
    # time to recover is reported for every scenario that ran
    assert all(d["recover_s"] for d in ran), [d["scenario"] for d in ran if not d["recover_s"]]


def test_a_routed_set_is_counted_once_over_its_tables_each_record_where_its_route_says(
    tmp_path: Path,
) -> None:
    """A routed set holds each record once over its tables together, each in the table
    its route names: a row elsewhere is misrouted; after a route change the records
    read before it stay where the routes of their time put them (``RouteEpoch``)."""
    import pyarrow as pa

    from lab.drill.count import RouteEpoch, count_against
    from pipeline.config import parse_config
    from pipeline.formats.iceberg.catalog import load_catalog
    from pipeline.formats.iceberg.pipeline_tables import IcebergTables

    def config(routes: dict[str, str]) -> object:
        return parse_config(
            {
                "id": "routed",
                "source": {"bootstrapServers": "h:1", "topics": ["a", "b"]},
                "decode": {"format": "raw"},
                "sink": {
                    "table": "db.events",
                    "catalog": {"warehouse": str(tmp_path / "w")},
                    "routes": {"by": "topic", "tables": routes},
                },
                "checkpointLocation": str(tmp_path / "c"),
            }
        )

    before, after = config({"a": "db.events"}), config({"b": "db.b"})
    schema = IcebergTables.from_config(after).main_schema  # type: ignore[arg-type]
    catalog = load_catalog(
        after.sink.catalog.name,  # type: ignore[attr-defined]
        after.sink.catalog.pyiceberg_properties(),  # type: ignore[attr-defined]
    )
    catalog.create_namespace("db")

    def holds(identifier: str, coords: list[tuple[str, int]]) -> None:
        table = catalog.create_table(identifier, schema)
        rows = [{"_kafka_topic": t, "_kafka_partition": 0, "_kafka_offset": o} for t, o in coords]
        table.append(pa.Table.from_pylist(rows, schema=schema.as_arrow()))

    holds("db.events", [("a", 0), ("a", 1), ("b", 0), ("b", 1)])
    holds("db.b", [("b", 2), ("b", 3)])
    expected = {TopicPartition("a", 0): [0, 1], TopicPartition("b", 0): [0, 1, 2, 3]}
    # b's records 0 and 1 were read before b had a route of its own
    epochs = [RouteEpoch(before), RouteEpoch(after, {TopicPartition("b", 0): 2})]  # type: ignore[arg-type]
    c = count_against(after, expected, epochs=epochs)  # type: ignore[arg-type]
    assert (c.expected, c.present, c.missing, c.duplicated, c.misrouted) == (6, 6, 0, 0, 0)
    # by today's routes alone, b's first two records sit in the wrong table
    c = count_against(after, expected)  # type: ignore[arg-type]
    assert (c.present, c.missing, c.duplicated, c.misrouted) == (6, 0, 0, 2)
    assert c.misrouted_rows == [("db.events", "b", 0, 0), ("db.events", "b", 0, 1)]
    # a copy in a second table is a duplicate and misrouted
    catalog.load_table("db.b").append(
        pa.Table.from_pylist(
            [{"_kafka_topic": "a", "_kafka_partition": 0, "_kafka_offset": 1}],
            schema=schema.as_arrow(),
        )
    )
    c = count_against(after, expected, epochs=epochs)  # type: ignore[arg-type]
    assert (c.missing, c.duplicated, c.misrouted) == (0, 1, 1)


def test_a_routed_drill_reads_its_topics_into_a_table_each(tmp_path: Path) -> None:
    """A routed drill's config routes each topic but the first (``sink.table``'s) to a
    table of its own; its producer writes every topic, a topic added mid-run included."""
    from lab.drill.pipeline_config import drill_config
    from lab.drill.producer import RateProducer
    from pipeline.config import parse_config
    from pipeline.formats.routes import table_routes

    topics = ["a", "b", "c"]
    cfg = parse_config(drill_config(DrillSpec("routed-kill"), tmp_path, "h:1", topics, None))
    routes = table_routes(cfg)
    assert routes is not None and cfg.source.topics == topics
    assert [t.identifier for t in routes.tables] == ["drill.events", "drill.t01", "drill.t02"]
    assert [routes.router.table_of(t) for t in topics] == [0, 1, 2]
    assert cfg.sink.routes is not None and "a" not in cfg.sink.routes.tables
    producer = RateProducer("localhost:9092", topics[:2], 2, 1.0, seed=1)
    producer.delivered(1, 0, "b")
    producer.add_topic("c")
    producer.delivered(0, 0, "c")
    producer.delivered(0, 1, "c")
    assert producer.expected() == {TopicPartition("b", 1): [0], TopicPartition("c", 0): [0, 1]}
    assert producer.ends() == {TopicPartition("b", 1): 1, TopicPartition("c", 0): 2}
