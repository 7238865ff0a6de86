"""Metrics, health endpoints, alert rules and dashboard.

Unit-level: a real ``PipelineMetrics`` served on 127.0.0.1 (free port), scraped over HTTP.
promtool checks the exposition and the alert rules and unit-tests the alerts.
Integration: a real Prometheus server scrapes a real pipeline (live broker, Spark,
Iceberg) every second; assertions go through the Prometheus HTTP query API.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.kafka_fixtures import KafkaTestBroker, unique_topic

from lab.ports import free_port
from pipeline.commit.offsets import BrokerOffsets, PartitionOffsets, TopicPartition
from pipeline.commit.types import BatchOutcome
from pipeline.errors import ConfigError, FencedError, PipelineError
from pipeline.observe.accounting import OUTCOMES, PHASES, split_by_weight
from pipeline.observe.logs import BATCH_LOGGER, batch_log_line
from pipeline.observe.metrics import PipelineMetrics

ROOT = Path(__file__).resolve().parents[3]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
ALERT_TESTS = ROOT / "deploy" / "prometheus" / "alerts.test.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "ingest-dashboard.json"
PROMETHEUS_PACKAGE = "Debian package prometheus"


def _need(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.skip(f"{binary} not installed ({PROMETHEUS_PACKAGE})")
    return path


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def scrape(m: PipelineMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(sample name, sorted labels): value}`` of one scrape of ``/metrics``."""
    status, text = http_get(f"{m.url}/metrics")
    assert status == 200
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def metrics() -> Iterator[PipelineMetrics]:
    m = PipelineMetrics("p1", table="db.events", host="127.0.0.1", port=0)
    m.start()
    try:
        yield m
    finally:
        m.stop()


def committed_outcome(batch_id: int, **kw: Any) -> BatchOutcome:
    defaults: dict[str, Any] = {
        "instant": f"2026112200000000{batch_id}",
        "records": 95,
        "dead_letter_records": 5,
        "files": 3,
        "ranges": {tp("a", 0): (0, 60), tp("b", 0): (0, 40)},
        "committed": PartitionOffsets({tp("a", 0): 60, tp("b", 0): 40}),
        "timings": {"recovery": 0.2, "write": 1.5, "precommit": 0.01, "commit": 0.3},
    }
    defaults.update(kw)
    return BatchOutcome(batch_id, "committed", **defaults)


# -- unit level ---------------------------------------------------------------------------


def test_outcomes_counters_and_phases(metrics: PipelineMetrics) -> None:
    s = scrape(metrics)
    for outcome in OUTCOMES:  # pre-created, so increase() sees the first event
        assert value(s, "ingest_commits_total", outcome=outcome) == 0
    for phase in PHASES:
        assert value(s, "ingest_phase_duration_seconds_count", phase=phase) == 0
    assert value(s, "ingest_last_batch_id") == -1

    metrics.observe_outcome(committed_outcome(0, bytes=1000))
    # later batches: recovery did not run; its zero timing must not land in the histogram
    metrics.observe_outcome(
        committed_outcome(
            1,
            records=10,
            dead_letter_records=0,
            ranges={tp("a", 0): (60, 70)},
            committed=PartitionOffsets({tp("a", 0): 70, tp("b", 0): 40}),
            timings={"recovery": 0.0, "write": 0.5, "precommit": 0.01, "commit": 0.2},
            overlap_dropped=3,
            bytes=100,
        ),
    )
    metrics.observe_outcome(BatchOutcome(1, "replay_skipped"))
    recommit = committed_outcome(
        2,
        records=5,
        dead_letter_records=0,
        ranges={tp("b", 0): (40, 45)},
        committed=PartitionOffsets({tp("a", 0): 70, tp("b", 0): 45}),
        timings={"commit": 0.1, "recovery": 0.4},
        recovered=[("t1", "rolled_back"), ("t2", "completed"), ("t3", "recommitted")],
    )
    recommit.outcome = "recommitted"
    metrics.observe_outcome(recommit)
    metrics.observe_phase("dedupe", 1.0)  # unknown phase: dropped, no new label value
    metrics.record_data_loss("a", 7)
    metrics.set_pending_instants(2)
    metrics.set_writer_epoch(4)

    s = scrape(metrics)
    # 95 records over ranges of 60 (a) and 40 (b): split by range size, exact total
    assert value(s, "ingest_records_total", topic="a") == 57 + 10
    assert value(s, "ingest_records_total", topic="b") == 38 + 5
    assert value(s, "ingest_bytes_total", topic="a") + value(
        s, "ingest_bytes_total", topic="b"
    ) == (1100)
    assert value(s, "ingest_dead_letter_records_total") == 5
    assert value(s, "ingest_overlap_dropped_records_total") == 3
    assert value(s, "ingest_data_loss_records_total", topic="a") == 7
    assert value(s, "ingest_data_loss_records_total", topic="b") == 0
    assert value(s, "ingest_batches_total") == 4
    assert value(s, "ingest_commits_total", outcome="committed") == 2
    assert value(s, "ingest_commits_total", outcome="replay_skipped") == 1
    assert value(s, "ingest_commits_total", outcome="recommitted") == 1
    assert value(s, "ingest_commits_total", outcome="rolled_back") == 1
    assert value(s, "ingest_commits_total", outcome="failed") == 0
    assert value(s, "ingest_phase_duration_seconds_count", phase="write") == 2
    assert value(s, "ingest_phase_duration_seconds_count", phase="commit") == 3
    assert value(s, "ingest_phase_duration_seconds_count", phase="recovery") == 2
    assert value(s, "ingest_phase_duration_seconds_sum", phase="recovery") == pytest.approx(0.6)
    assert value(s, "ingest_phase_duration_seconds_bucket", phase="write", le="1.0") == 1
    assert not any(k[0].startswith("ingest_phase") and ("phase", "dedupe") in k[1] for k in s)
    assert value(s, "ingest_pending_instants") == 2
    assert value(s, "ingest_writer_epoch") == 4
    assert value(s, "ingest_last_batch_id") == 2
    assert time.time() - value(s, "ingest_last_commit_timestamp_seconds") < 60
    assert value(s, "ingest_last_commit_age_seconds") < 60
    assert value(s, "ingest_pipeline_info", pipeline_id="p1", table="db.events", format="iceberg")
    assert not any(name.endswith("_created") for name, _ in s)
    build = [labels for name, labels in s if name == "ingest_build_info"]
    assert len(build) == 1 and dict(build[0])["version"]


def test_health_and_readiness_transitions(metrics: PipelineMetrics) -> None:
    assert http_get(f"{metrics.url}/healthz") == (200, "ok\n")
    assert http_get(f"{metrics.url}/nope")[0] == 404

    def ready() -> tuple[int, str, float]:
        status, body = http_get(f"{metrics.url}/readyz")
        return status, body, value(scrape(metrics), "ingest_ready")

    assert ready() == (503, "not ready: query not started\n", 0)
    metrics.set_query_active(True)
    assert ready() == (200, "ready\n", 1)

    try:
        raise PipelineError("cannot list offsets on broker:9092: timed out")
    except PipelineError as e:
        metrics.mark_failed(e, batch_id=7)
        metrics.mark_failed(e, batch_id=7)  # the same failure reported twice counts once
    status, body, ready_gauge = ready()
    assert (status, ready_gauge) == (503, 0)
    assert body == "not ready: batch 7 failed: cannot list offsets on broker:9092: timed out\n"
    assert value(scrape(metrics), "ingest_commits_total", outcome="failed") == 1

    metrics.observe_outcome(committed_outcome(8))  # a successful batch clears the failure
    assert ready()[:2] == (200, "ready\n")

    metrics.set_query_active(False, "query stopped")
    assert ready()[:2] == (503, "not ready: query stopped\n")
    metrics.set_query_active(True)

    metrics.mark_failed(FencedError("writer epoch 3 was superseded by epoch 4"))
    metrics.mark_fenced("again")  # fencing is counted once
    metrics.observe_outcome(committed_outcome(9))  # fencing is final
    status, body, ready_gauge = ready()
    assert (status, ready_gauge) == (503, 0)
    assert body == "not ready: writer fenced: writer epoch 3 was superseded by epoch 4\n"
    s = scrape(metrics)
    assert value(s, "ingest_writer_fenced") == 1
    assert value(s, "ingest_commits_total", outcome="fenced") == 1
    assert value(s, "ingest_commits_total", outcome="failed") == 1


def test_lag_per_partition_and_cardinality_caps() -> None:
    m = PipelineMetrics("p", host="127.0.0.1", port=0, max_topics=2, max_lag_series=3)
    m.update_broker_offsets(
        {
            tp("a", 0): BrokerOffsets(0, 100),
            tp("a", 1): BrokerOffsets(20, 50),  # nothing committed yet: end - log start
            tp("b", 0): BrokerOffsets(0, 10),
        }
    )
    m.update_committed_offsets(PartitionOffsets({tp("a", 0): 60, tp("b", 0): 10}))
    m.update_committed_offsets(PartitionOffsets({tp("a", 0): 30}))  # never backwards
    assert m.lag() == {tp("a", 0): 40, tp("a", 1): 30, tp("b", 0): 0}

    def lag_series() -> dict[tuple[str, str], float]:
        return {
            (s.labels["topic"], s.labels["partition"]): s.value
            for f in text_string_to_metric_families(m.exposition().decode())
            if f.name == "ingest_consumer_lag_records"
            for s in f.samples
        }

    assert lag_series() == {("a", "0"): 40, ("a", "1"): 30, ("b", "0"): 0}
    # a third topic is beyond max_topics, a fourth series beyond max_lag_series
    m.update_broker_offsets(
        {
            tp("a", 0): BrokerOffsets(0, 100),
            tp("a", 2): BrokerOffsets(0, 5),
            tp("b", 0): BrokerOffsets(0, 12),
            tp("c", 0): BrokerOffsets(0, 7),
            tp("c", 1): BrokerOffsets(0, 8),
        }
    )
    # a[1] left the assignment and is no longer exported
    assert lag_series() == {("a", "0"): 40, ("a", "2"): 5, ("b", "0"): 2, ("_other", "_other"): 15}


def test_lag_refresh_thread_runs_without_batches() -> None:
    calls: list[float] = []
    fail = threading.Event()

    def fetch() -> dict[TopicPartition, BrokerOffsets]:
        calls.append(time.monotonic())
        if fail.is_set():
            raise PipelineError("broker unreachable")
        return {tp("a", 0): BrokerOffsets(0, 10 * len(calls))}

    with PipelineMetrics("p", host="127.0.0.1", port=0) as m:
        m.start_lag_refresh(fetch, 0.05)
        deadline = time.monotonic() + 10
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(calls) >= 3 and m.lag()[tp("a", 0)] >= 30
        fail.set()
        n = len(calls)
        while len(calls) < n + 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        errors = {f.name: f for f in text_string_to_metric_families(m.exposition().decode())}
        assert errors["ingest_lag_refresh_errors"].samples[0].value >= 1
        assert m.lag()[tp("a", 0)] >= 30  # the last good values stay
    stopped = len(calls)
    time.sleep(0.2)
    assert len(calls) == stopped  # stop() ended the thread


def test_port_in_use_is_one_clear_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        m = PipelineMetrics("p", host="127.0.0.1", port=port)
        with pytest.raises(ConfigError, match=rf"cannot listen on 127.0.0.1:{port}.*metrics.port"):
            m.start()


def test_split_by_weight_is_exact() -> None:
    assert split_by_weight(10, {"a": 1, "b": 1, "c": 1}) in (
        {"a": 4, "b": 3, "c": 3},
        {"a": 3, "b": 4, "c": 3},
        {"a": 3, "b": 3, "c": 4},
    )
    assert sum(split_by_weight(1001, {"x": 7, "y": 13, "z": 0}).values()) == 1001
    assert split_by_weight(5, {"only": 0}) == {"only": 5}
    assert split_by_weight(0, {"a": 1}) == {}


def test_batch_log_line_is_one_json_object() -> None:
    line = batch_log_line(committed_outcome(3, bytes=4096), pipeline_id="p1")
    assert "\n" not in line
    doc = json.loads(line)
    assert doc["event"] == "batch" and doc["pipeline_id"] == "p1"
    assert doc["batch_id"] == 3 and doc["instant"] == "20261122000000003"
    assert (doc["outcome"], doc["records"], doc["dead_letter_records"]) == ("committed", 95, 5)
    assert (doc["bytes"], doc["files"], doc["partitions"]) == (4096, 3, 2)
    assert doc["phases_seconds"] == {
        "recovery": 0.2,
        "write": 1.5,
        "precommit": 0.01,
        "commit": 0.3,
    }
    assert doc["duration_seconds"] == pytest.approx(2.01)
    assert doc["ts"].endswith("Z")
    # an outcome that commits no data files logs no bytes
    assert json.loads(batch_log_line(BatchOutcome(4, "replay_skipped")))["bytes"] is None


def test_promtool_check_metrics(metrics: PipelineMetrics) -> None:
    promtool = _need("promtool")
    metrics.observe_outcome(committed_outcome(0, bytes=10))
    metrics.update_broker_offsets({tp("a", 0): BrokerOffsets(0, 100)})
    _, text = http_get(f"{metrics.url}/metrics")
    r = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_alert_rules_check_and_unit_tests() -> None:
    promtool = _need("promtool")
    r = subprocess.run(
        [promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(
        [promtool, "test", "rules", ALERT_TESTS.name],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ALERT_TESTS.parent,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    tested = set(re.findall(r"alertname:\s*(\w+)", ALERT_TESTS.read_text()))
    assert {"IngestConsumerLagGrowing", "IngestCommitStalled"} <= tested


# PromQL: strings, label matchers, ranges, grouping label lists, variables and keywords
# are removed; every identifier left that is not a function call is a metric name.
_PROMQL_STRIP = [
    re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\''),
    re.compile(r"\{[^}]*\}"),
    re.compile(r"\[[^\]]*\]"),
    re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)"),
    re.compile(r"\$\{?\w+\}?"),
]
_PROMQL_KEYWORDS = {
    *("and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"),
    *("group_left", "group_right", "inf", "nan"),
}
_IDENT = re.compile(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?")


def promql_metric_names(expr: str) -> set[str]:
    m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", expr, re.S)
    if m:  # Grafana template query
        expr = m.group(1)
    for rx in _PROMQL_STRIP:
        expr = rx.sub(" ", expr)
    names = set()
    for ident, call in _IDENT.findall(expr):
        if not call and ident not in _PROMQL_KEYWORDS and not re.fullmatch(r"[\d.e+-]+", ident):
            names.add(ident)
    return names


def dashboard_expressions(doc: Any) -> Iterator[str]:
    if isinstance(doc, dict):
        for k, v in doc.items():
            if isinstance(v, str) and (
                k in ("expr", "definition") or (k == "query" and v != "prometheus")
            ):
                yield v
            else:
                yield from dashboard_expressions(v)
    elif isinstance(doc, list):
        for item in doc:
            yield from dashboard_expressions(item)


def test_promql_metric_name_extraction() -> None:
    expr = (
        "histogram_quantile(0.95, sum by (phase, le) (rate(ingest_phase_duration_seconds_bucket"
        '{job=~"$job"}[$__rate_interval]))) / on (job) group_left max(up{x="a b"}) and time() '
        "- ingest_last_commit_timestamp_seconds offset 5m > 0.5"
    )
    assert promql_metric_names(expr) == {
        "ingest_phase_duration_seconds_bucket",
        "up",
        "ingest_last_commit_timestamp_seconds",
    }
    assert promql_metric_names('label_values(ingest_build_info{job=~"$job"}, instance)') == {
        "ingest_build_info"
    }


def test_dashboard_references_only_exported_metrics() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["title"] and doc["panels"]
    exprs = list(dashboard_expressions(doc))
    assert len(exprs) >= 15
    exported = PipelineMetrics("p", host="127.0.0.1", port=0).exported_names()
    used = set().union(*(promql_metric_names(e) for e in exprs))
    assert used, exprs
    assert used <= exported, f"not exported: {sorted(used - exported)}"
    # every metric an operator watches is on the dashboard
    for name in (
        "ingest_records_total",
        "ingest_bytes_total",
        "ingest_batches_total",
        "ingest_commits_total",
        "ingest_phase_duration_seconds_bucket",
        "ingest_consumer_lag_records",
        "ingest_last_commit_age_seconds",
        "ingest_pending_instants",
        "ingest_dead_letter_records_total",
        "ingest_data_loss_records_total",
        "ingest_writer_epoch",
        "ingest_build_info",
        "ingest_ready",
    ):
        assert name in used, name


def test_alert_rules_reference_only_exported_metrics() -> None:
    import yaml

    rules = yaml.safe_load(ALERTS.read_text())
    exported = PipelineMetrics("p", host="127.0.0.1", port=0).exported_names()
    for group in rules["groups"]:
        for rule in group["rules"]:
            assert promql_metric_names(rule["expr"]) <= exported, rule["alert"]


# -- integration: real Prometheus scraping a running pipeline --------------------------


class PrometheusServer:
    def __init__(self, binary: str, workdir: Path, target_port: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"rule_files: ['{ALERTS}']\n"
            "scrape_configs:\n"
            "  - job_name: ingest\n"
            "    scrape_interval: 1s\n"
            f"    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]\n"
        )
        self.log = (workdir / "prometheus.log").open("w")
        self.proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while http_get_quiet(f"{self.url}/-/ready") != 200:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"prometheus did not start: {(workdir / 'prometheus.log').read_text()}"
                )
            time.sleep(0.05)

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        status, body = http_get(url)
        doc = json.loads(body)
        assert status == 200 and doc["status"] == "success", body
        return list(doc["data"]["result"])

    def scalar(self, promql: str) -> float | None:
        result = self.query(promql)
        return float(result[0]["value"][1]) if result else None

    def wait_for(
        self, promql: str, check: Callable[[float | None], bool], timeout: float = 30
    ) -> float | None:
        deadline = time.monotonic() + timeout
        while True:
            got = self.scalar(promql)
            if check(got):
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"{promql} = {got} after {timeout:.0f}s")
            time.sleep(0.25)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def http_get_quiet(url: str) -> int:
    try:
        return http_get(url, timeout=1)[0]
    except OSError:
        return 0


def test_prometheus_scrapes_a_running_pipeline(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    binary = _need("prometheus")
    from lab.generator import GeneratorSpec, ProduceResult, event_schema_fields, produce
    from pipeline.app import Pipeline
    from pipeline.config import parse_config

    # Prometheus first: its ≈5 s target sync overlaps with producing and set-up.
    exporter_port = free_port()
    prom = PrometheusServer(binary, tmp_path, exporter_port)
    metrics: PipelineMetrics | None = None
    try:
        topic = unique_topic("metrics")
        kafka_broker.create_topic(topic, 3)
        first = produce(
            kafka_broker.bootstrap_servers,
            topic,
            GeneratorSpec(count=2000, malformed_fraction=0.02, seed=61),
        )
        cfg = parse_config(
            {
                "id": f"p-{topic}",
                "source": {"bootstrapServers": kafka_broker.bootstrap_servers, "topics": [topic]},
                "decode": {"schema": event_schema_fields()},
                "sink": {
                    "catalog": {"warehouse": str(tmp_path / "warehouse")},
                    "table": "db.events",
                },
                "checkpointLocation": str(tmp_path / "checkpoint"),
                "trigger": {"mode": "processing-time", "interval": "1 second"},
                "metrics": {"host": "127.0.0.1", "port": exporter_port, "lagRefreshSeconds": 0.5},
            }
        )
        pipeline = Pipeline(cfg, spark)
        metrics = pipeline.attach_metrics()
        assert metrics.port == exporter_port
        results: list[ProduceResult] = [first]
        producing: list[threading.Thread] = []
        produced = threading.Event()
        ready_seen: list[int] = []

        # The lag thread reports the backlog before any batch ran.
        prom.wait_for("sum(ingest_consumer_lag_records)", lambda v: v == 2000, timeout=30)
        assert prom.scalar('ingest_commits_total{outcome="committed"}') == 0
        assert prom.scalar("up") == 1

        def producer() -> None:
            spec = GeneratorSpec(count=3000, malformed_fraction=0.02, seed=62)
            results.append(produce(kafka_broker.bootstrap_servers, topic, spec))
            produced.set()

        def until(stats: Any) -> bool:
            if not ready_seen or ready_seen[-1] != 200:
                ready_seen.append(http_get(f"http://127.0.0.1:{exporter_port}/readyz")[0])
            if stats.batches >= 1 and not producing:  # more records once the backlog is in
                producing.append(threading.Thread(target=producer, daemon=True))
                producing[0].start()
            if not produced.is_set():
                return False
            ends: dict[tuple[str, int], int] = {}
            for r in results:
                for key, (_, last) in r.offsets.items():
                    ends[key] = max(ends.get(key, 0), last + 1)
            return all(stats.committed.get(TopicPartition(*k), 0) >= e for k, e in ends.items())

        with caplog.at_level(logging.INFO, logger=BATCH_LOGGER):
            stats = pipeline.run(until=until, timeout_s=90)
        assert produced.is_set() and until(stats), stats
        assert 200 in ready_seen

        main = pipeline.tables.main.table()
        assert main is not None
        rows = len(main.scan(selected_fields=("_kafka_offset",)).to_arrow())
        malformed = sum(r.malformed for r in results)
        assert rows == 5000 - malformed

        # Producer stopped, everything committed: Prometheus sees the totals and lag 0.
        prom.wait_for("sum(ingest_records_total)", lambda v: v == rows)
        prom.wait_for("sum(ingest_consumer_lag_records)", lambda v: v == 0)
        assert prom.scalar("sum(max_over_time(ingest_consumer_lag_records[5m]))") >= 2000  # type: ignore[operator]
        prom.wait_for("ingest_dead_letter_records_total", lambda v: v == malformed)
        committed = prom.wait_for(
            'ingest_commits_total{outcome="committed"}', lambda v: v is not None and v >= 2
        )
        assert prom.scalar("ingest_batches_total") == committed
        assert prom.scalar("sum(ingest_bytes_total)") > 0  # type: ignore[operator]
        assert prom.scalar('ingest_phase_duration_seconds_count{phase="write"}') == committed
        assert prom.scalar("ingest_pending_instants") == 0
        assert prom.scalar("ingest_writer_epoch") == pipeline.coordinator.epoch >= 1
        assert prom.scalar("ingest_last_commit_age_seconds") < 30  # type: ignore[operator]
        assert prom.query(f'ingest_pipeline_info{{pipeline_id="p-{topic}"}}')

        # the query stopped: not ready any more, with the reason
        status, body = http_get(f"{metrics.url}/readyz")
        assert (status, body) == (503, "not ready: query terminated\n")

        lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == BATCH_LOGGER]
        assert len(lines) == committed
        assert sum(d["records"] for d in lines) == rows
        assert all(d["instant"] and d["bytes"] and "write" in d["phases_seconds"] for d in lines)
        assert {d["epoch"] for d in lines} == {pipeline.coordinator.epoch}
    finally:
        if metrics is not None:
            metrics.stop()
        prom.stop()


def test_records_committed_per_table_of_a_routed_set(metrics: PipelineMetrics) -> None:
    metrics.declare_tables({"main": "db.other", "db.a": "db.a", "db.b": "db.b"})
    before = scrape(metrics)
    for table in ("db.other", "db.a", "db.b"):  # every table of the set, from the start
        assert value(before, "ingest_table_records_total", table=table) == 0
    metrics.observe_outcome(committed_outcome(1, records=12, table_records={"main": 5, "db.a": 7}))
    after = scrape(metrics)
    assert value(after, "ingest_table_records_total", table="db.other") == 5
    assert value(after, "ingest_table_records_total", table="db.a") == 7
    assert value(after, "ingest_table_records_total", table="db.b") == 0  # idle this batch


def test_per_table_alerts_name_the_table_in_their_summary() -> None:
    import yaml

    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    per_table = [r for r in rules if "ingest_table_" in r["expr"]]
    assert per_table  # the small-files alert at least
    for rule in per_table:
        assert "{{ $labels.table }}" in rule["annotations"]["summary"], rule["alert"]
