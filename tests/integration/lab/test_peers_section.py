"""``ingest bench --peers`` in small, so the harness cannot rot: systems move one small
data set, each measured in its own cgroup and counted by the one checker; one fault
(SIGKILLs under a live producer) runs against this pipeline; the goals, console tables and
chart are made from the result. Every CI run moves the data set through this pipeline, one
peer and the raw consumer; the fault, and every system (this pipeline on both source
readers and both formats, Spark's Kafka source into Iceberg's and Hudi's streaming sinks,
Iceberg's Kafka Connect sink, the raw consumer), run in shares of the rotation
(tests/support/rotation.py). The full section is a command whose committed report is
refreshed (docs/bench.md)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console
from support.kafka_fixtures import KafkaTestBroker

from lab.bench.dataset import BenchBroker
from lab.peers.report import print_peers, write_chart
from lab.peers.section import QUICK_PLAN, run_peers, systems

pytestmark = pytest.mark.slow

PLAN = replace(
    QUICK_PLAN,
    records=3_000,
    partitions=2,
    batch=1_000,
    sizes=("~270 B",),
    freshness_seconds=0,
    faults=(),
    timeout_s=240.0,
)


# every run: ours, the peer needing no other PySpark, the floor (all nine: 530 s on a slow
# host, most of it building the PySpark 4.1 and 3.5 environments of a fresh checkout)
EVERY_RUN = ("ingest-iceberg", "iceberg-kafka-connect", "raw-consumer")


@pytest.mark.timeout(1500)
@pytest.mark.parametrize(
    "names",
    [
        pytest.param(EVERY_RUN, id="ours-a-peer-and-the-floor"),
        pytest.param((), id="every-system", marks=pytest.mark.extended),
    ],
)
def test_systems_move_the_data_set_once_and_are_measured(
    names: tuple[str, ...], kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    broker = BenchBroker(kafka_broker.bootstrap_servers)
    report = run_peers(broker, replace(PLAN, systems=names), tmp_path, lambda _: None)
    rows = {r["system"]: r for r in report["throughput"]}
    assert set(rows) == set(names or systems())
    for name, r in rows.items():
        assert r["tally"]["exactly_once"], (name, r["tally"])
        assert r["tally"]["present"] == PLAN.records, name
        assert r["records"] == PLAN.records and r["cpu_s"] > 0, name
        assert r["peak_rss_bytes"] > 50 * 2**20, name  # the cgroup saw its processes
        assert r["exit"] != "killed after SIGTERM timed out", name
    # the JVM systems cost whole CPU-seconds: the cgroup counts every process of the tree
    assert rows["iceberg-kafka-connect"]["cpu_s"] > rows["raw-consumer"]["cpu_s"]
    cost = [g for g in report["goals"] if g["goal"].startswith("records per CPU-second")]
    assert [g["goal"].rsplit(", ", 1)[1] for g in cost] == ["whole run", "steady state"]
    whole = cost[0]
    assert whole["ours"] and whole["best_peer"] and whole["met"] in (True, False)
    console = Console(record=True, width=200)
    print_peers(report, console)
    shown = console.export_text()
    assert all(name in shown for name in rows), shown
    chart = write_chart(report, tmp_path)
    assert chart is not None and chart.stat().st_size > 10_000


@pytest.mark.extended  # CI's budget: in the rotation (the drills SIGKILL ours every run)
def test_sigkills_under_a_live_producer_are_counted_exactly_once(
    kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    broker = BenchBroker(kafka_broker.bootstrap_servers)
    plan = replace(PLAN, systems=("ingest-iceberg",), faults=("kills",), kills=2)
    report = run_peers(broker, plan, tmp_path, lambda _: None)
    (row,) = report["correctness"]
    assert row["injected"] == 2
    assert row["outcome"] == "exactly once", row
    assert row["tally"]["expected"] > plan.fault_records  # the live producer added records
