"""The benchmark report: ``report.json``, a rich table on the console, PNG charts.

Charts (matplotlib, Agg backend, written next to ``report.json``):

* ``throughput.png`` — steady records/s per run (format, mode, cores) with the raw
  single-process ceiling as a horizontal line.
* ``commit_latency.png`` — protocol time of every commit, commit 1 … N, per table format
  / catalog, with the early and late comparison windows shaded.
* ``freshness.png`` — the CDF of produce → commit-visibility seconds, p50/p99 marked.

Every figure in the charts is read from the report dict, so the charts can be redrawn from
``report.json`` alone (:func:`write_charts`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

CHARTS = ("throughput.png", "commit_latency.png", "freshness.png")
_CHART_SECTIONS = ("throughput", "commit_latency", "freshness")


def write_json(report: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.json"
    path.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n")
    return path


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _throughput_chart(report: dict[str, Any], path: Path) -> None:
    plt = _plt()
    runs = report.get("throughput", {}).get("runs", [])
    raw = report.get("raw_ceiling", {}).get("records_per_s")
    fig, ax = plt.subplots(figsize=(9, 4.5))
    labels = [r["name"] for r in runs]
    colors = ["#1f77b4" if r["mode"] == "exactly-once" else "#ff7f0e" for r in runs]
    ax.bar(range(len(runs)), [r["records_per_s"] for r in runs], color=colors)
    ax.set_xticks(range(len(runs)), labels, rotation=30, ha="right", fontsize=8)
    if raw:
        ax.axhline(raw, color="black", linestyle="--", label=f"raw ceiling {raw:,.0f}/s")
        ax.legend(loc="upper right")
    ax.set_ylabel("records / s (steady)")
    ax.set_title("Pipeline throughput by format, commit mode (blue EO, orange ALO) and cores")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _latency_chart(report: dict[str, Any], path: Path) -> None:
    plt = _plt()
    series = report.get("commit_growth", {}).get("series", [])
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for s in series:
        ys = s["per_commit_s"]
        ax.plot(
            range(1, len(ys) + 1),
            [y * 1000 for y in ys],
            linewidth=0.8,
            label=f"{s['format']} ({s['catalog']}) x{s['protocol']['ratio']}",
        )
    if series:
        for lo, hi in (series[0]["early_window"], series[0]["late_window"]):
            ax.axvspan(lo, hi, color="grey", alpha=0.2)
        ax.legend(loc="upper left")
    ax.set_xlabel("commit number (same table; ratio: late window vs a fresh table, interleaved)")
    ax.set_ylabel("protocol time per commit (ms)")
    ax.set_title("Commit cost over commit number (shaded: compared windows)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _freshness_chart(report: dict[str, Any], path: Path) -> None:
    plt = _plt()
    f = report.get("freshness", {})
    cdf = f.get("cdf_s", [])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if cdf:
        ax.plot(cdf, [i / (len(cdf) - 1) for i in range(len(cdf))])
        for q in ("p50_s", "p99_s"):
            if f.get(q) is not None:
                ax.axvline(f[q], linestyle="--", color="grey")
                ax.text(f[q], 0.05, f" {q[:3]} {f[q]:.2f}s", fontsize=8)
    ax.set_xlabel("seconds from produce to commit visibility")
    ax.set_ylabel("fraction of records")
    rate = f.get("rate_records_per_s")
    ax.set_title(f"End-to-end freshness at {rate:,.0f} records/s" if rate else "Freshness")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_charts(report: dict[str, Any], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    drawn = (_throughput_chart, _latency_chart, _freshness_chart)
    for name, draw, section in zip(CHARTS, drawn, _CHART_SECTIONS, strict=True):
        if section not in report:  # a run of other sections (--peers): no empty chart
            continue
        path = out / name
        draw(report, path)
        paths.append(path)
    return paths


def _fmt(x: Any, spec: str = ",.0f") -> str:
    return "—" if x is None else format(x, spec)


def print_summary(report: dict[str, Any], console: Console) -> None:
    t = Table(title=f"ingest bench ({report['meta']['preset']})", show_lines=False)
    t.add_column("measure")
    t.add_column("value", justify="right")
    t.add_column("note")
    raw = report.get("raw_ceiling")
    if raw:
        t.add_row(
            "raw ceiling",
            f"{_fmt(raw['records_per_s'])}/s",
            f"{raw['mb_per_s']} MB/s, {raw['cpu_seconds_per_million']} CPU-s/M",
        )
    for row in report.get("throughput", {}).get("summary", []):
        t.add_row(
            f"{row['format']} {row['mode']} {row['cores']} core(s)",
            f"{_fmt(row['records_per_s'])}/s",
            f"x{row['ratio_to_raw']} raw, {row['runs']} run(s)",
        )
    for row in report.get("exactly_once_overhead", {}).get("by_format", []):
        att = row.get("attributed") or {}
        t.add_row(
            f"EO overhead {row['format']} {row['cores']}c",
            f"{row['overhead']:.1%}",
            f"throughput, {len(row['eo_records_per_s'])} pairs (spread EO "
            f"{row['eo_spread']:.0%}, ALO {row['alo_spread']:.0%}); attributed "
            f"{_fmt(att.get('overhead'), '.1%')} ({_fmt(att.get('protocol_s_per_batch'), '.3f')}"
            f" s of {_fmt(att.get('batch_s'), '.2f')} s per batch); target ≤ 5 %",
        )
    for row in report.get("catalogs", {}).get("rows", []):
        t.add_row(
            f"commit phase, {row['catalog']} catalog",
            f"p50 {row['commit_p50_ms']} ms",
            f"p99 {row['commit_p99_ms']} ms over {row['commits']} commits (warehouse on S3)",
        )
    for fmt, row in report.get("commit_latency", {}).items():
        if isinstance(row, dict) and "commit" in row:
            t.add_row(
                f"commit latency {fmt}",
                f"p50 {row['commit']['p50_s']}s / p99 {row['commit']['p99_s']}s",
                f"precommit p50 {row['precommit']['p50_s']}s p99 {row['precommit']['p99_s']}s",
            )
    rec = report.get("recovery")
    if rec:
        t.add_row(
            "recovery after SIGKILL",
            f"{rec['restart_to_first_commit_s']}s",
            f"restart → first commit ({rec['first_outcome']})",
        )
    for s in report.get("commit_growth", {}).get("series", []):
        t.add_row(
            f"commit cost growth {s['format']} ({s['catalog']})",
            f"x{s['protocol']['ratio']}",
            f"{s['protocol']['early_median_s']}s → {s['protocol']['late_median_s']}s "
            f"({'flat' if s['flat'] else 'GROWS'})",
        )
    mem = report.get("memory")
    if mem:
        pts = ", ".join(
            f"{p['max_records_per_trigger']:,}: {p['peak_rss_bytes'] / 2**20:,.0f}"
            for p in mem["points"]
        )
        t.add_row("peak RSS MiB by batch size", pts, f"bounded: {mem.get('bounded')}")
    fr = report.get("freshness")
    if fr:
        t.add_row(
            "freshness",
            f"p50 {fr['p50_s']}s / p99 {fr['p99_s']}s",
            f"{fr['rate_records_per_s']:,.0f} records/s, 1 s trigger",
        )
    for size in report.get("fixed_cost", {}).get("sizes", []):
        f = size["fit"]
        ok = size["within_target"]
        t.add_row(
            f"fixed cost per batch {size['label']}",
            f"{_fmt(f['intercept_cpu_s'], '.3f')} CPU-s / {_fmt(f['intercept_wall_s'], '.3f')} s",
            f"+ {_fmt(f['slope_cpu_s_per_million'], '.1f')} CPU-s/M, "
            f"{_fmt(f['slope_wall_s_per_million'], '.1f')} s/M (r² {_fmt(f['r2_cpu'], '.2f')}/"
            f"{_fmt(f['r2_wall'], '.2f')}, {f['points']} batches); marginal "
            f"x{_fmt(size['marginal_ratio'], '.2f')} raw; {_fmt(size['records_per_cpu_s'])}"
            " records/CPU-s"
            + (
                f" (anchor {size['records_per_cpu_s_anchor']:,.0f})"
                if size["records_per_cpu_s_anchor"]
                else ""
            )
            + f"; within target: {', '.join(k for k, v in ok.items() if v) or 'none'}"
            + ("; BROKER-BOUND?" if size["broker_bound"] else ""),
        )
        b = size["cpu_bound"]
        t.add_row(
            f"2-core throughput {size['label']}",
            f"x{_fmt(size['steady_ratio_to_raw'], '.2f')} raw",
            f"all {b['cores']} cores busy would allow x{_fmt(b['max_ratio_to_raw'], '.2f')}: "
            f"{_fmt(b['pipeline_cpu_s_per_million_with_broker'], '.1f')} CPU-s/M with the "
            f"broker's, raw {_fmt(b['raw_cpu_s_per_million_with_broker'], '.1f')}",
        )
    for sc in report.get("fixed_cost", {}).get("partition_scaling", []):
        t.add_row(
            f"fixed cost per partition {sc['label']}",
            f"{_fmt(sc['cpu_s_per_partition'], '.5f')} CPU-s / "
            f"{_fmt(sc['wall_s_per_partition'], '.5f')} s",
            f"per batch and partition, over {', '.join(str(n) for n in sc['partitions'])} "
            f"partitions; at 0 partitions {_fmt(sc['cpu_s_at_zero_partitions'], '.3f')} "
            f"CPU-s / {_fmt(sc['wall_s_at_zero_partitions'], '.3f')} s",
        )
    for d in report.get("decode_cost", {}).get("sets", []):
        t.add_row(
            f"decode {d['data_set']} (~{d['mean_bytes']} B)",
            f"{_fmt(d['pipeline_cpu_s_per_million'], '.2f')} CPU-s/M",
            f"x{_fmt(d['ratio'], '.2f')} of {_fmt(d['raw_cpu_s_per_million'], '.2f')} CPU-s/M: "
            f"{d['baseline']}",
        )
    for d in report.get("decode_cost", {}).get("avro", []):
        t.add_row(
            f"decode Avro {d['data_set']} (~{d['avro_mean_bytes']} B)",
            f"{_fmt(d['avro_cpu_s_per_million'], '.2f')} CPU-s/M",
            f"x{_fmt(d['avro_to_json'], '.2f')} of the JSON path's "
            f"{_fmt(d['json_cpu_s_per_million'], '.2f')} CPU-s/M on the same records "
            f"({d['avro_records_per_cpu_s']:,} vs {d['json_records_per_cpu_s']:,} records/CPU-s)",
        )
    cpu = report.get("cpu_per_record")
    if cpu:
        best = min(cpu["pipeline"].values()) if cpu["pipeline"] else None
        t.add_row(
            "CPU-s per million records",
            _fmt(best, ",.1f"),
            f"best pipeline run; raw consumer {cpu['raw_consumer']}",
        )
    console.print(t)
    bound = report.get("throughput", {}).get("bound")
    if bound:
        console.print(bound, soft_wrap=True)
