"""``ingest bench --quick``: the benchmark harness end to end (live embedded broker, real
Spark driver processes, real Iceberg/Hudi commits), plus its pure arithmetic.

The quick preset's numbers are meaningless on a shared 2-core host; what is checked is
that every section is measured, positive and consistent, that the raw ceiling counted
exactly what was produced, and that the charts are real PNG files.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pipeline.cli import main
from pipeline.tools.bench import stats
from pipeline.tools.bench.driver import BatchLine
from pipeline.tools.bench.presets import QUICK
from pipeline.tools.bench.report import CHARTS

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
)


def _line(batch_id: int, records: int, ts: float, outcome: str = "committed") -> BatchLine:
    return BatchLine(batch_id, outcome, records, 0, ts, {"precommit": 0.01, "commit": 0.1})


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


def _positive(x: object) -> bool:
    return isinstance(x, int | float) and x > 0 and math.isfinite(x)


# ~90 s on a quiet 2-core host; a host shared with other Spark jobs can take 10+ min.
@pytest.mark.slow  # ≈ 2.5 min: a whole benchmark run; .ci/run runs it with -m slow
@pytest.mark.timeout(1800)
def test_quick_bench_writes_every_section(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    main(["bench", "--quick", "--out", str(out), "--work", str(tmp_path / "work")])
    report = json.loads((out / "report.json").read_text())
    missing = [s for s in SECTIONS if s not in report]
    assert not missing, missing
    assert report["meta"]["preset"] == "quick"
    assert report["meta"]["host"]["logical_cores"] >= 1

    raw = report["raw_ceiling"]
    assert raw["records"] == raw["produced"] == QUICK.records  # every record, exactly once
    assert all(_positive(raw[k]) for k in ("records_per_s", "mb_per_s", "cpu_seconds_per_million"))

    runs = report["throughput"]["runs"]
    assert {(r["format"], r["mode"]) for r in runs} == {
        ("iceberg", "exactly-once"),
        ("iceberg", "at-least-once"),
    }
    for r in runs:
        assert r["records"] == QUICK.records
        assert r["batches"] >= 2
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

    for name in CHARTS:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5_000, name
