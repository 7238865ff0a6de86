"""The peers section's console tables and its chart (``peers.png``, beside report.json):
records per CPU-second per system and record size, and freshness p50 / p99; the tables
section's console table (:func:`print_tables`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

CHART = "peers.png"


def _f(x: Any, spec: str = ",.0f") -> str:
    return "—" if x is None else format(x, spec)


def print_peers(peers: dict[str, Any], console: Console) -> None:
    t = Table(title="peers: whole runs (launch → every record visible) and steady state")
    for col in ("system", "size", "rec/s", "rec/CPU-s", "steady rec/s", "steady CPU-s/M",
                "first commit s", "peak GiB", "files", "exit"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("system", "size", "exit") else "right")
    for r in peers.get("throughput", []):
        if "error" in r:
            t.add_row(r["system"], r["size"], *["—"] * 7, r["error"][:60])
            continue
        steady = r.get("steady") or {}
        t.add_row(
            r["system"],
            r["size"],
            _f(r["records_per_s"]),
            _f(r["records_per_cpu_s"]),
            _f(steady.get("records_per_s")),
            _f(steady.get("cpu_s_per_million"), ",.1f"),
            _f(r["first_commit_s"], ".1f"),
            _f(r["peak_rss_bytes"] / 2**30, ".2f"),
            str(r["progress"]["data_files"]),
            r["exit"],
        )
    console.print(t)
    if peers.get("freshness"):
        f = Table(title="peers: freshness (commit visible - Kafka timestamp)")
        for col in ("system", "p50 s", "p99 s", "rows measured", "files/min", "avg file KB"):
            f.add_column(col, justify="left" if col == "system" else "right")
        for r in peers["freshness"]:
            f.add_row(
                r["system"],
                _f(r["p50_s"], ".2f"),
                _f(r["p99_s"], ".2f"),
                _f(r["rows_in_window"]),
                _f(r["data_files_per_minute"], ".1f"),
                _f(r["avg_file_bytes"] and r["avg_file_bytes"] / 1000, ",.0f"),
            )
        console.print(f)
    if peers.get("correctness"):
        c = Table(title="peers: correctness under faults (one checker for all)")
        for col in ("fault", "system", "did", "missing", "duplicated"):
            c.add_column(col)
        for r in peers["correctness"]:
            tally = r.get("tally") or {}
            c.add_row(
                r["fault"],
                r["system"],
                r["outcome"],
                str(tally.get("missing")),
                str(tally.get("duplicated")),
            )
        console.print(c)
    for g in peers.get("goals", []):
        met = {True: "met", False: "NOT met", None: "not measured"}[g.get("met")]
        console.print(f"goal: {g['goal']}: {met} {_goal_numbers(g)}", highlight=False)


def _goal_numbers(g: dict[str, Any]) -> str:
    if "ratio" in g:
        return f"(ours {_f(g['ours'])}, best peer {_f(g['best_peer'])}, x{_f(g['ratio'], '.2f')})"
    if "best_peer" in g:
        return f"(ours {_f(g['ours'], '.2f')} s, best peer {_f(g['best_peer'], '.2f')} s)"
    return "; ".join(g.get("not_met", []))


def write_chart(peers: dict[str, Any], out: Path) -> Path | None:
    rows = peers.get("throughput", [])
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = list(dict.fromkeys(r["size"] for r in rows))
    names = list(dict.fromkeys(r["system"] for r in rows))
    fresh = {r["system"]: r for r in peers.get("freshness", [])}
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / max(1, len(sizes))
    for i, size in enumerate(sizes):
        got = {r["system"]: r.get("records_per_cpu_s") for r in rows if r["size"] == size}
        xs = [k + i * width for k in range(len(names))]
        a.bar(xs, [got.get(n) or 0 for n in names], width, label=size)
    a.set_xticks([k + width * (len(sizes) - 1) / 2 for k in range(len(names))])
    a.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    a.set_ylabel("records per CPU-second (whole run, whole process tree)")
    a.legend()
    a.set_title("Cost: records per CPU-second")
    fnames = [n for n in names if n in fresh]
    b.bar([k - 0.2 for k in range(len(fnames))], [fresh[n]["p50_s"] or 0 for n in fnames], 0.4,
          label="p50")  # fmt: skip
    b.bar([k + 0.2 for k in range(len(fnames))], [fresh[n]["p99_s"] or 0 for n in fnames], 0.4,
          label="p99")  # fmt: skip
    b.set_xticks(range(len(fnames)))
    b.set_xticklabels(fnames, rotation=30, ha="right", fontsize=8)
    b.set_ylabel("seconds, Kafka timestamp → commit visible")
    b.legend()
    b.set_title("Freshness at a steady rate, 1 s trigger")
    fig.tight_layout()
    path = out / CHART
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def markdown(peers: dict[str, Any]) -> str:
    """The section's tables as Markdown (docs/bench.md quotes them from report.json)."""
    out = [
        "| system | size | records/s (whole) | records per CPU-s (whole) | steady records/s "
        "| steady CPU-s per M | launch → first commit | peak RSS | data files | exactly once |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in peers.get("throughput", []):
        if "error" in r:
            out.append(f"| {r['system']} | {r['size']} | failed: {r['error'][:80]} |||||||| |")
            continue
        s = r.get("steady") or {}
        t = r.get("tally") or {}
        out.append(
            f"| {r['system']} | {r['size']} | {_f(r['records_per_s'])} "
            f"| {_f(r['records_per_cpu_s'])} | {_f(s.get('records_per_s'))} "
            f"| {_f(s.get('cpu_s_per_million'), '.1f')} | {_f(r['first_commit_s'], '.1f')} s "
            f"| {_f(r['peak_rss_bytes'] / 2**30, '.2f')} GiB | {r['progress']['data_files']} "
            f"| {'yes' if t.get('exactly_once') else 'NO'} |"
        )
    if peers.get("freshness"):
        out += [
            "",
            "| system | p50 | p99 | max | rows measured | data files/min | average file |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in peers["freshness"]:
            size = r["avg_file_bytes"] and r["avg_file_bytes"] / 1000
            out.append(
                f"| {r['system']} | {_f(r['p50_s'], '.2f')} s | {_f(r['p99_s'], '.2f')} s "
                f"| {_f(r['max_s'], '.2f')} s | {_f(r['rows_in_window'])} "
                f"| {_f(r['data_files_per_minute'], '.1f')} | {_f(size, ',.0f')} KB |"
            )
    if peers.get("correctness"):
        systems = list(dict.fromkeys(r["system"] for r in peers["correctness"]))
        faults = list(dict.fromkeys(r["fault"] for r in peers["correctness"]))
        cell = {(r["fault"], r["system"]): r["outcome"] for r in peers["correctness"]}
        out += ["", "| fault | " + " | ".join(systems) + " |", "|---" * (len(systems) + 1) + "|"]
        for f in faults:
            out.append(f"| {f} | " + " | ".join(cell.get((f, s), "") for s in systems) + " |")
    if peers.get("goals"):
        out += ["", "| goal | result |", "|---|---|"]
        for g in peers["goals"]:
            met = {True: "met", False: "**not met**", None: "not measured"}[g.get("met")]
            out.append(f"| {g['goal']} | {met} {_goal_numbers(g)} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":  # python -m lab.peers.report docs/bench/peers/report.json
    import json
    import sys

    print(markdown(json.loads(Path(sys.argv[1]).read_text())["peers"]), end="")


def print_tables(section: dict[str, Any], console: Console) -> None:
    for fmt, part in section["by_format"].items():
        t = Table(title=f"tables ({fmt}): one pipeline, many tables")
        for col in ("run", "tables", "records", "CPU-s", "cores", "rec/CPU-s", "peak GiB",
                    "commit p50 s", "exactly once"):  # fmt: skip
            t.add_column(col, justify="left" if col == "run" else "right")
        rows = {**part["runs"], "connect": part["connect"]}
        for name, r in rows.items():
            if "cpu_s" not in r:
                t.add_row(name, *["—"] * 7, str(r.get("error") or r.get("skipped"))[:40])
                continue
            commit = (r.get("commit_phase") or {}).get("p50_s")
            t.add_row(
                name,
                str(r["tables"]),
                f"{r['records']:,}",
                f"{r['cpu_s']:.1f}",
                f"{r['cores_used']}",
                f"{r['records_per_cpu_s']:,.0f}",
                f"{r['peak_rss_bytes'] / 2**30:.2f}",
                "—" if commit is None else f"{commit:.3f}",
                str(r["exactly_once"]),
            )
        console.print(t)
        for g in part["goals"]:
            ratio = "" if g.get("ratio") is None else f" {g['ratio']}"
            console.print(
                f"  {'met' if g['met'] else 'NOT met'}{ratio}: {g['goal']}", highlight=False
            )
