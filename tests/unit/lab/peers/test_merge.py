"""A re-run of some of the peers section's tables merged into a report
(lab/peers/merge.py): the re-run tables replace the report's whole, the others
stay, the goals are computed again from what the report now holds, and the report says
what was merged."""

from __future__ import annotations

from typing import Any

import pytest

from lab.peers.merge import merge
from lab.peers.section import check_choice


def _row(system: str, per_cpu_s: float) -> dict[str, Any]:
    return {
        "size": "~270 B",
        "system": system,
        "records_per_cpu_s": per_cpu_s,
        "steady": {"cpu_s_per_million": 1e6 / (2 * per_cpu_s)},
    }


def _report(rows: list[dict[str, Any]], **meta: Any) -> dict[str, Any]:
    fresh = [
        {"system": "ingest-iceberg", "p99_s": 1.2},
        {"system": "spark-iceberg-sink", "p99_s": 1.5},
    ]
    return {
        "meta": {"generated": "then", "command": "ingest bench --full --only peers", **meta},
        "peers": {"plan": {}, "systems": {}, "throughput": rows, "freshness": fresh},
    }


def test_a_rerun_table_replaces_the_report_table_whole_and_the_goals_follow() -> None:
    into = _report([_row("ingest-iceberg", 60_000), _row("spark-iceberg-sink", 45_000)])
    command = "ingest bench --full --peers --peers-part throughput"
    rerun = [_row("ingest-iceberg", 90_000), _row("spark-iceberg-sink", 40_000)]
    new = {
        "meta": {"generated": "now", "command": command},
        "peers": {"plan": {"records": 1}, "systems": {"x": {}}, "throughput": rerun},
    }
    assert merge(into, new, "the driver's JIT") == ["throughput"]
    peers = into["peers"]
    assert [r["records_per_cpu_s"] for r in peers["throughput"]] == [90_000, 40_000]
    assert peers["freshness"][0]["p99_s"] == 1.2  # not re-run: kept
    whole = next(g for g in peers["goals"] if g["goal"].endswith("whole run"))
    assert whole["ratio"] == pytest.approx(2.25) and whole["met"] is True
    assert any(g["goal"].startswith("freshness") and g["met"] for g in peers["goals"])
    (entry,) = into["meta"]["merged_runs"]
    assert entry["when"] == "now" and "throughput" in entry["what"] and "JIT" in entry["what"]
    assert entry["command"].endswith("--peers-part throughput")


def test_a_report_without_any_table_is_refused() -> None:
    with pytest.raises(ValueError, match="measured none"):
        merge(_report([]), {"meta": {}, "peers": {"plan": {}}})


def test_unknown_systems_and_tables_are_refused_in_one_line() -> None:
    check_choice(["ingest-iceberg"], ["throughput"])
    with pytest.raises(ValueError, match="--peer nope: allowed: ingest-iceberg"):
        check_choice(["nope"], [])
    with pytest.raises(ValueError, match="--peers-part speed: allowed: throughput"):
        check_choice([], ["speed"])


def test_the_reports_command_reruns_the_narrowed_section() -> None:
    from lab.bench.runner import BenchOptions, reproduce_command

    opts = BenchOptions(only=("peers",), peer=("ingest-iceberg",), peers_part=("throughput",))
    assert reproduce_command(opts) == (
        "ingest bench --full --peers --peer ingest-iceberg --peers-part throughput"
    )
