"""``ingest bench --quick``: the benchmark harness end to end (its own Apache Kafka node,
real Spark driver processes, real Iceberg/Hudi commits), plus its pure arithmetic.

The quick preset's numbers are meaningless on a shared 2-core host; what is checked is
that every section is measured, positive and consistent, that the raw ceiling counted
exactly what was produced, and that the charts are real PNG files.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from support.kafka_fixtures import KafkaTestBroker

from lab.bench import stats
from lab.bench.decode_cost import decode_cost
from lab.bench.driver import BatchLine
from lab.bench.fixed import fit, partition_scaling, steady_window
from lab.bench.presets import QUICK
from lab.bench.report import CHARTS
from lab.broker import KAFKA_VERSION
from pipeline.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SECTIONS = (
    "raw_ceiling",
    "throughput",
    "exactly_once_overhead",
    "commit_latency",
    "recovery",
    "commit_growth",
    "memory",
    "freshness",
    "cpu_per_record",
    "fixed_cost",
    "decode_cost",
)


def _line(batch_id: int, records: int, ts: float, outcome: str = "committed") -> BatchLine:
    return BatchLine(batch_id, outcome, records, 0, ts, {"precommit": 0.01, "commit": 0.1})


def test_a_batch_line_carries_the_files_its_batch_committed() -> None:
    line = BatchLine.parse(
        '{"ts": "2026-11-29T01:02:03.456Z", "batch_id": 4, "outcome": "committed", '
        '"records": 10, "bytes": 99, "files": 3, "phases_seconds": {"commit": 0.1}}'
    )
    assert (line.batch_id, line.records, line.files, line.phases) == (4, 10, 3, {"commit": 0.1})
    assert (
        BatchLine.parse('{"ts": "2026-11-29T01:02:03Z", "batch_id": 5, "outcome": "empty"}').files
        == 0
    )


def test_the_hudi_writers_preset_runs_each_writer_and_operation_twice(tmp_path: Path) -> None:
    from lab.bench.presets import HUDI_WRITERS, HUDI_WRITERS_1K
    from lab.bench.runs import RunSpec, pipeline_config

    systems = [s.system for s in HUDI_WRITERS.matrix]
    assert systems == [
        "hudi",
        "hudi (spark writer)",
        "hudi (spark writer, bulk_insert)",
        "hudi (spark writer, bulk_insert)",
        "hudi (spark writer)",
        "hudi",
    ]  # A B C C B A: load that drifts hits each alike
    assert (HUDI_WRITERS.payload_bytes, HUDI_WRITERS_1K.payload_bytes) == (0, 940)
    bulk = RunSpec(format="hudi", hudi_writer="spark", hudi_operation="bulk_insert")
    assert bulk.label == "hudi-spark-writer-bulk-insert-eo-2c"
    hudi = pipeline_config(bulk, "r", tmp_path, "b:9092", "t")["sink"]["hudi"]
    assert (hudi["writer"], hudi["operation"]) == ("spark", "bulk_insert")
    assert (
        "writer"
        not in pipeline_config(RunSpec(format="hudi"), "r", tmp_path, "b", "t")["sink"]["hudi"]
    )


def test_percentile_and_windows() -> None:
    assert stats.percentile([3, 1, 2, 4], 50) == 2.5
    assert stats.percentile([5.0], 99) == 5.0
    assert math.isnan(stats.percentile([], 50))
    values = [float(i) for i in range(1, 101)]
    assert stats.window_median(values, 1, 10) == 5.5  # items 1..10, both ends included
    assert stats.window_median(values, 91, 100) == 95.5
    assert stats.growth_ratio(2.0, 3.0) == 1.5


def test_steady_throughput_skips_the_first_batch() -> None:
    batches = [
        _line(0, 1000, 100.0),  # cold: its duration is not counted
        _line(1, 500, 101.0),
        _line(2, 500, 102.0),
        _line(3, 999, 102.5, outcome="replay_skipped"),  # commits nothing
    ]
    rate, records, seconds = stats.steady_throughput(batches)
    assert (records, seconds) == (1000, 2.0)
    assert rate == 500.0
    with pytest.raises(ValueError):
        stats.steady_throughput(batches[:1])


def test_linear_fit_recovers_intercept_and_slope() -> None:
    xs = [2_000.0, 20_000.0, 200_000.0] * 3
    ys = [0.1 + 12e-6 * x for x in xs]  # 0.1 s fixed + 12 s per million records
    intercept, slope, r2 = stats.linear_fit(xs, ys)
    assert intercept == pytest.approx(0.1) and slope == pytest.approx(12e-6) and r2 == 1.0
    noisy = [y + (0.01 if i % 2 else -0.01) for i, y in enumerate(ys)]
    intercept, slope, r2 = stats.linear_fit(xs, noisy)
    assert intercept == pytest.approx(0.1, abs=0.02) and 0.99 < r2 < 1.0
    assert all(math.isnan(v) for v in stats.linear_fit([5.0, 5.0], [1.0, 2.0]))  # one size
    assert math.isnan(stats.linear_fit([1.0, 2.0], [3.0, 3.0])[2])  # constant y: no r²
    points = [{"records": x, "cpu_s": 0.2 + 10e-6 * x, "wall_s": 0.05 + 5e-6 * x} for x in xs]
    f = fit(points)
    assert f["points"] == 9 and f["batch_sizes"] == [2_000, 20_000, 200_000]
    assert f["intercept_cpu_s"] == pytest.approx(0.2) and f["slope_cpu_s_per_million"] == 10.0
    assert f["intercept_wall_s"] == pytest.approx(0.05) and f["slope_wall_s_per_million"] == 5.0


def test_partition_scaling_fits_the_fixed_cost_per_partition() -> None:
    cells = [
        {
            "payload_bytes": 940,
            "partitions": n,
            "bytes_per_record": 1_210.0,
            # 0.1 s + 1 ms per partition of CPU, 0.2 s + 0.5 ms of wall, per batch
            "fit": {
                "intercept_cpu_s": 0.1 + 0.001 * n,
                "intercept_wall_s": 0.2 + 0.0005 * n,
                "slope_cpu_s_per_million": 20.0,
            },
            "marginal_ratio": 1.2,
        }
        for n in (128, 8, 32)
    ]
    sc = partition_scaling(cells)
    assert sc["label"] == "~1.2 KB" and sc["partitions"] == [8, 32, 128]
    assert sc["cpu_s_per_partition"] == pytest.approx(0.001)
    assert sc["cpu_s_at_zero_partitions"] == pytest.approx(0.1)
    assert sc["wall_s_per_partition"] == pytest.approx(0.0005)
    assert sc["wall_s_at_zero_partitions"] == pytest.approx(0.2)
    one = partition_scaling(cells[:1])  # one partition count: nothing to fit
    assert one["cpu_s_per_partition"] is None and one["partitions"] == [128]


def test_steady_window_skips_the_warm_up() -> None:
    done = [_line(i, 100, 100.0 + i) for i in range(12)]  # one commit a second
    start, window = steady_window(done, warmup_s=2.0, steady_s=5.0) or (None, [])
    assert start is not None and start.batch_id == 2  # first commit ≥ 2 s after the first
    assert [b.batch_id for b in window] == [3, 4, 5, 6, 7]  # up to 5 s after the start
    start, window = steady_window(done[:5], 2.0, 5.0) or (None, [])
    assert [b.batch_id for b in window] == [3, 4]  # drained early: the shorter window
    assert steady_window(done[:3], 2.0, 5.0) is None  # nothing after the warm-up
    assert steady_window([], 2.0, 5.0) is None


def test_a_run_drained_within_its_warm_up_is_measured_after_its_first_batch() -> None:
    """A fast run (the real broker, large batches) can drain its data set before the warm-up
    ends: its window then starts at the second commit (the first batch pays the cold
    workers), rather than failing the bench."""
    from lab.bench.fixed import measured_window

    done = [_line(i, 200_000, 100.0 + 2 * i) for i in range(8)]  # drained in 14 s
    start, window, short = measured_window(done, warmup_s=20.0, steady_s=60.0) or (None, [], 0)
    assert start is not None and start.batch_id == 1 and short
    assert [b.batch_id for b in window] == [2, 3, 4, 5, 6, 7]
    steady = [_line(i, 100, 100.0 + i) for i in range(30)]
    start, window, short = measured_window(steady, 2.0, 5.0) or (None, [], 0)
    assert start is not None and start.batch_id == 2 and not short  # the warm-up as usual
    assert measured_window(done[:2], 20.0, 60.0) is None  # two batches: nothing to measure


def test_payload_events_are_about_1_2_kb_and_keep_the_other_fields() -> None:
    import json

    from lab.generator import GeneratorSpec, event_schema_fields, generate_events

    plain = list(generate_events(GeneratorSpec(count=2_000, seed=7)))
    big = list(generate_events(GeneratorSpec(count=2_000, seed=7, payload_bytes=940)))
    assert big == list(generate_events(GeneratorSpec(count=2_000, seed=7, payload_bytes=940)))
    assert 1_100 < sum(len(k) + len(v) for k, v in big) / len(big) < 1_350
    assert 250 < sum(len(k) + len(v) for k, v in plain) / len(plain) < 300
    for (_, a), (_, b) in zip(plain, big, strict=True):
        assert {**json.loads(b), "payload": None} == {**json.loads(a), "payload": None}
    assert "payload" not in [f["name"] for f in event_schema_fields()]
    assert event_schema_fields(payload=True)[-1] == {
        "name": "payload",
        "type": "string",
        "required": False,
    }


def _positive(x: object) -> bool:
    return isinstance(x, int | float) and x > 0 and math.isfinite(x)


def _check_fixed_cost(fixed: dict[str, Any]) -> None:
    """The quick preset's ``fixed_cost`` section: every run measured and counted, the fit
    finite (its values on a shared host are noise; their presence and consistency are not)."""
    assert fixed["batch_sizes"] == list(QUICK.fixed.batches)
    assert fixed["partitions"] == list(QUICK.fixed.partitions)
    assert [(s["payload_bytes"], s["partitions"]) for s in fixed["sizes"]] == [
        (pb, n) for pb in QUICK.fixed.payload_bytes for n in QUICK.fixed.partitions
    ]
    for size in fixed["sizes"]:
        assert size["dataset"]["partitions"] == size["partitions"]
        assert size["raw_ceiling"]["records"] == size["dataset"]["records"]
        assert _positive(size["raw_ceiling"]["cpu_seconds_per_million"])
        assert len(size["runs"]) == len(QUICK.fixed.batches)
        for r in size["runs"]:
            assert r["batches"] >= 1 and _positive(r["steady_seconds"])
            # what the batch log says was committed is what the table holds
            assert r["records_in_table"] == r["records_committed_by_log"] >= r["records"]
            mine = [p for p in size["points"] if p["run"] == r["name"]]
            assert len(mine) == r["batches"] and sum(p["records"] for p in mine) == r["records"]
            assert all(p["records"] <= r["max_records_per_trigger"] for p in mine)
            for k in ("records_per_s", "mb_per_s", "cpu_seconds_per_million", "records_per_cpu_s"):
                assert _positive(r[k]), (k, r)
            assert set(r["cpu_seconds_per_million_by_role"]) >= {"driver", "jvm"}
            assert r["broker_cpu_seconds"] >= 0  # the bench's own Kafka node: measured
        # the host's bound: all cores busy at the measured CPU per record, broker included
        b = size["cpu_bound"]
        steady = max(size["runs"], key=lambda r: r["max_records_per_trigger"])
        assert b["pipeline_cpu_s_per_million_with_broker"] >= steady["cpu_seconds_per_million"]
        raw_rate = size["raw_ceiling"]["records_per_s"]
        assert b["max_ratio_to_raw"] == pytest.approx(
            b["pipeline_records_per_s_all_cores"] / raw_rate, rel=0.01
        )
        assert size["steady_ratio_to_raw"] == pytest.approx(
            steady["records_per_s"] / raw_rate, rel=0.01
        )
        assert size["raw_ceiling"]["broker_cpu_seconds_per_million"] > 0
        assert b["broker_measured"]
        f = size["fit"]
        assert f["points"] == len(size["points"]) and len(f["batch_sizes"]) >= 2
        for k in ("intercept_cpu_s", "slope_cpu_s_per_million"):
            assert isinstance(f[k], float) and math.isfinite(f[k]), (k, f)
        for k in ("intercept_wall_s", "slope_wall_s_per_million"):
            assert isinstance(f[k], float) and math.isfinite(f[k]), (k, f)
        assert math.isfinite(size["marginal_ratio"])
        assert set(size["within_target"]) >= {"intercept_cpu_s", "marginal_ratio"}
    (scaling,) = fixed["partition_scaling"]  # one record size in the quick preset
    assert scaling["partitions"] == list(QUICK.fixed.partitions)
    assert scaling["intercept_cpu_s"] == [s["fit"]["intercept_cpu_s"] for s in fixed["sizes"]]
    for k in ("cpu_s_per_partition", "wall_s_per_partition", "cpu_s_at_zero_partitions"):
        assert isinstance(scaling[k], float) and math.isfinite(scaling[k]), (k, scaling)


def test_decode_section_compares_the_pipeline_decoder_with_the_raw_decode() -> None:
    """The ``decode`` section on a few records: every data set decodes without a dead
    letter, the nested ones are ~1.2 KB, the map set is the per-record Python path."""
    report = decode_cost(400)
    sets = {d["data_set"]: d for d in report["sets"]}
    assert list(sets) == ["flat ~270 B", "flat ~1.2 KB", "nested ~1.2 KB", "nested + map"]
    assert 1000 <= sets["nested ~1.2 KB"]["mean_bytes"] <= 1500
    assert [d["vectorised"] for d in sets.values()] == [True, True, True, False]
    for d in sets.values():
        assert d["records"] == 400
        assert _positive(d["pipeline_cpu_s_per_million"]) and _positive(d["ratio"])


# The whole quick benchmark end to end: ~5 min on a quiet 2-core host (a host shared with
# other Spark jobs can take 20+ min). Not in CI (its 60-minute budget): `pytest -m bench`
# runs it; each section's own logic is tested above in the default suite.
@pytest.mark.bench
@pytest.mark.timeout(2700)
def test_quick_bench_writes_every_section(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    main(["bench", "--quick", "--out", str(out), "--work", str(tmp_path / "work")])
    report = json.loads((out / "report.json").read_text())
    missing = [s for s in SECTIONS if s not in report]
    assert not missing, missing
    assert report["meta"]["preset"] == "quick"
    assert report["meta"]["host"]["logical_cores"] >= 1
    broker = report["meta"]["broker"]
    assert broker["kind"] == "apache" and broker["kafka_version"] == KAFKA_VERSION
    assert broker["brokers"] == 1 and broker["replication_factor"] == 1
    assert report["meta"]["dataset"]["partitions"] == QUICK.partitions

    raw = report["raw_ceiling"]
    assert raw["records"] == raw["produced"] == QUICK.records  # every record, exactly once
    assert all(_positive(raw[k]) for k in ("records_per_s", "mb_per_s", "cpu_seconds_per_million"))

    runs = report["throughput"]["runs"]
    assert {(r["format"], r["mode"]) for r in runs} == {
        ("iceberg", "exactly-once"),
        ("iceberg", "at-least-once"),
    }
    assert report["meta"]["dataset"]["payload_bytes"] == QUICK.payload_bytes == 0
    for r in runs:
        assert r["records"] == QUICK.records
        assert r["batches"] >= 2
        assert r["files_per_commit_median"] >= 1  # every batch of the data set wrote files
        for k in (
            "records_per_s",
            "mb_per_s",
            "ratio_to_raw",
            "cpu_seconds_per_million",
            "peak_rss_bytes",
        ):
            assert _positive(r[k]), (k, r)
    assert report["throughput"]["bound"]

    (ov,) = report["exactly_once_overhead"]["by_format"]
    assert _positive(ov["eo_median"]) and _positive(ov["alo_median"])
    assert ov["overhead"] == pytest.approx(1 - ov["eo_median"] / ov["alo_median"], abs=1e-3)
    att = ov["attributed"]  # the protocol's own steps, timed inside the EO run
    assert _positive(att["request_s"]) and _positive(att["precommit_s"])
    assert _positive(att["batch_s"]) and 0 < att["overhead"] < 1
    assert att["protocol_s_per_batch"] == pytest.approx(
        att["request_s"] + att["precommit_s"] + att["extra_commit_s"], abs=1e-3
    )

    lat = report["commit_latency"]["iceberg"]
    for phase in ("precommit", "commit"):
        assert _positive(lat[phase]["p50_s"]) and lat[phase]["p99_s"] >= lat[phase]["p50_s"]

    rec = report["recovery"]
    assert _positive(rec["restart_to_first_commit_s"])
    assert rec["kill_to_first_commit_s"] >= rec["restart_to_first_commit_s"]

    catalogs = report["catalogs"]
    assert [r["catalog"] for r in catalogs["rows"]] == [
        "sql (PostgreSQL)",
        "rest (over PostgreSQL)",
    ]
    for r in catalogs["rows"]:
        assert r["commits"] == QUICK.commits and 0 < r["commit_p50_ms"] <= r["commit_p99_ms"]

    growth = {s["format"]: s for s in report["commit_growth"]["series"]}
    assert set(growth) == {"iceberg", "hudi"}
    for s in growth.values():
        assert s["commits"] == QUICK.commits == len(s["per_commit_s"])
        assert s["early_window"] == [1, 10] and s["late_window"] == [91, 100]
        assert _positive(s["protocol"]["early_median_s"])
        assert _positive(s["protocol"]["late_median_s"])
        assert _positive(s["protocol"]["ratio"])

    assert all(_positive(p["peak_rss_bytes"]) for p in report["memory"]["points"])

    fresh = report["freshness"]
    assert fresh["records"] > 0 and _positive(fresh["p50_s"])
    assert fresh["p99_s"] >= fresh["p50_s"]
    assert len(fresh["cdf_s"]) == 101

    cpu = report["cpu_per_record"]
    assert _positive(cpu["raw_consumer"])
    assert cpu["pipeline"] and all(_positive(v) for v in cpu["pipeline"].values())

    _check_fixed_cost(report["fixed_cost"])

    for name in CHARTS:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5_000, name


@pytest.mark.slow
def test_the_catalogs_section_times_commits_on_both_catalogs(tmp_path: Path) -> None:
    import dataclasses

    from lab.bench.catalogs import WARMUP, catalog_commits
    from lab.bench.context import Context

    ctx = Context(
        broker=None,  # type: ignore[arg-type]  # the section reads no topic
        dataset=None,  # type: ignore[arg-type]
        preset=dataclasses.replace(QUICK, commits=6),
        work=tmp_path,
        say=lambda _line: None,
    )
    section = catalog_commits(ctx)
    assert "skipped" not in section, section
    sql, rest = section["rows"]
    assert (sql["catalog"], rest["catalog"]) == ("sql (PostgreSQL)", "rest (over PostgreSQL)")
    for row in (sql, rest):
        assert row["commits"] == 6 and 0 < row["commit_p50_ms"] <= row["commit_p99_ms"]
        assert row["commit_p50_ms"] <= row["protocol_p50_ms"]
    assert section["rest_over_sql"]["commit_p50_ms"] > 0
    assert section["warmup_commits_left_out"] == WARMUP


def test_the_tables_goals_compare_the_runs_and_judge_nothing_unmeasured() -> None:
    from lab.peers.tables import goals, idle_cost

    def run(cpu: float, commit: float, peak: int, tables: int = 20) -> dict[str, Any]:
        return {
            "cpu_s": cpu,
            "cores_used": 1.0,
            "steady": {"cpu_s_per_million": cpu / 2},
            "commit_phase": {"p50_s": commit},
            "peak_rss_bytes": peak,
            "records_per_cpu_s": 1e6 / cpu,
            "exactly_once": True,
            "tables": tables,
            "committed_batches": 10,
            "table_commits": {"empty_p50_s": 0.02, "with_files_p50_s": 0.05},
        }

    runs = {
        "one_table": run(40.0, 0.05, 1000, tables=1),
        "many_tables": run(50.0, 0.2, 1600),
        "idle_tables": run(45.0, 0.145, 1000),
    }
    connect = {"records_per_cpu_s": 10_000.0, "cores_used": 0.9, "exactly_once": True}
    cpu, commit, peak, vs_connect, once = goals(runs, connect)
    assert (cpu["ratio"], cpu["met"]) == (1.25, True)
    assert (commit["ratio"], commit["met"]) == (4.0, False)
    assert (peak["ratio"], peak["met"]) == (1.6, False)
    assert (vs_connect["ratio"], vs_connect["met"]) == (2.0, True)  # 20,000 against 10,000
    assert once["met"] is True
    assert goals(runs, {"error": "timed out"})[3]["met"] is None  # not measured: no verdict
    idle = idle_cost(runs)
    assert idle is not None and idle["idle_tables"] == 19
    assert idle["extra_commit_phase_per_batch_s"] == pytest.approx(0.095)
    assert idle["per_idle_table_ms"] == pytest.approx(5.0)
    assert idle["cpu_per_idle_table_per_batch_ms"] == pytest.approx(500 / 19, abs=0.01)


# Three pipeline runs (one table, three tables, idle tables) at a few thousand records:
# ~1.5-2 min on a 2-core host. The Connect peer is left out: its many-tables run has its
# own test (tests/integration/lab/test_peers_kafka_connect.py).
@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.extended  # CI's budget: in the rotation
def test_the_tables_section_routes_topics_to_tables_exactly_once(
    kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    from lab.bench.dataset import BenchBroker
    from lab.peers.tables import TablesPlan, run_tables

    plan = TablesPlan(
        topics=3, records=3_000, partitions=2, batch=500, connect=False, timeout_s=300.0
    )
    section = run_tables(
        BenchBroker(kafka_broker.bootstrap_servers), plan, tmp_path, lambda _line: None
    )
    json.dumps(section)  # what report.json holds
    sets = section["data_sets"]
    assert sets["records_many"] == sets["records_one"] == 3_000
    assert len(sets["many_topics"]) == 3 and len(sets["empty_topics"]) == 2
    part = section["by_format"]["iceberg"]
    runs = part["runs"]
    assert list(runs) == ["one_table", "many_tables", "idle_tables"]
    assert [runs[k]["tables"] for k in runs] == [1, 3, 3]
    for name, r in runs.items():
        # every produced (topic, partition, offset) once, in its topic's table
        assert r["exactly_once"] and r["records"] == 3_000, (name, r["tally"])
        assert r["tally"]["present"] == r["tally"]["expected"] == 3_000
        assert r["committed_batches"] >= 2 and r["commit_phase"]["p50_s"] > 0
        assert r["cpu_s"] > 0 and r["peak_rss_bytes"] > 100 * 2**20  # the cgroup saw the JVM
        # every table stands at the last batch: the idle ones committed it too
        assert r["tables_at_last_batch"] == r["tables"], name
    idle = part["idle_table_commit"]
    assert idle["idle_tables"] == 2 and idle["per_idle_table_ms"] is not None
    assert idle["empty_commit_p50_s"] > 0 and idle["one_table_commit_p50_s"] > 0
    # every batch after the first: one empty commit per idle table
    later = runs["idle_tables"]["committed_batches"] - 1
    assert runs["idle_tables"]["table_commits"]["empty"] == 2 * later
    assert part["connect"] == {"skipped": "not in the plan"}
    cpu, commit, peak, connect, once = part["goals"]
    for g in (cpu, commit, peak):
        assert g["ratio"] > 0 and isinstance(g["met"], bool), g
    assert cpu["one_table_cores_used"] == runs["one_table"]["cores_used"] > 0
    assert connect["met"] is None and connect["connect"] is None  # not measured: no verdict
    assert once["met"] is True
