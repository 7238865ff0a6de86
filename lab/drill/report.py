"""Drill reports: a rich table for the terminal, ``report.json`` and a PNG timeline.

The JSON holds, per drill, the table's columns plus the fault events and the timeline
samples, so the PNG can be redrawn from it. The PNG has one panel per drill: records
produced vs committed over time, a dashed red line per injected fault (labelled) and a
green dotted line per recovery (first new commit after a restart or the end of a fault).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.table import Table

from lab.drill.model import DrillResult

COLUMNS = (
    "scenario",
    "fmt",
    "faults",
    "restarts",
    "produced",
    "committed",
    "missing",
    "duplicated",
    "lost",
    "recommits",
    "rollbacks",
    "recover med s",
    "recover max s",
    "verdict",
)


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def summary_table(results: Sequence[DrillResult], broker: str | None = None) -> Table:
    """One row per drill; ``broker``: what the drills ran on (the report's
    ``broker.description``), under the title."""
    table = Table(title="failover drills", caption=f"broker: {broker}" if broker else None)
    for col in COLUMNS:
        table.add_column(col, justify="left" if col in ("scenario", "fmt") else "right")
    for r in results:
        style = {"ok": "green", "skipped": "yellow"}.get(r.verdict, "bold red")
        table.add_row(
            r.scenario,
            r.table_format,
            str(r.faults),
            str(r.restarts),
            str(r.produced),
            str(r.committed),
            str(r.missing),
            str(r.duplicated),
            str(r.lost),
            str(r.recommits),
            str(r.rollbacks),
            _secs(r.recover_median),
            _secs(r.recover_max),
            f"[{style}]{r.verdict}[/]",
        )
    return table


def report_dict(results: Sequence[DrillResult], meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        **meta,
        "ok": all(r.ok for r in results),
        "drills": [r.to_dict() for r in results],
    }


def write_json(results: Sequence[DrillResult], meta: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report_dict(results, meta), indent=1) + "\n")
    return path


def read_json(path: Path) -> tuple[list[DrillResult], dict[str, Any]]:
    """Results and metadata of a ``report.json`` (to merge reports or redraw the PNG)."""
    data = json.loads(path.read_text())
    meta = {k: v for k, v in data.items() if k not in ("drills", "ok", "generated")}
    return [DrillResult.from_dict(d) for d in data["drills"]], meta


def _cell(r: DrillResult) -> tuple[tuple[str, bool], int]:
    """(row, column) key of a drill's panel: Iceberg left, Hudi right, a row per scenario;
    a ``both`` drill (two tables) gets a row of its own."""
    both = r.table_format == "both"
    return (r.scenario, both), 1 if r.table_format == "hudi" else 0


def write_timeline(
    results: Sequence[DrillResult],
    path: Path,
    max_labels: int | None = None,
    compact: bool = False,
) -> Path | None:
    """One panel per drill (skipped ones left out), laid out by :func:`_cell` so the same
    fault on both formats sits side by side. None when nothing ran. A panel with more than
    ``max_labels`` faults (a long soak) draws their lines without labels; ``compact``: no
    empty column (a Hudi drill alone on the left)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = [r for r in results if r.skipped is None and r.samples]
    if not ran:
        return None
    rows = list(dict.fromkeys(_cell(r)[0] for r in ran))
    cols = 1 + max(_cell(r)[1] for r in ran)
    shift = min(_cell(r)[1] for r in ran) if compact else 0
    cols -= shift
    fig, axes = plt.subplots(
        len(rows), cols, figsize=(10 * cols + 2, 3.2 * len(rows)), squeeze=False
    )
    used = {(rows.index(_cell(r)[0]), _cell(r)[1] - shift) for r in ran}
    for i in range(len(rows)):
        for j in range(cols):
            if (i, j) not in used:
                axes[i, j].axis("off")
    panels = [(axes[rows.index(_cell(r)[0]), _cell(r)[1] - shift], r) for r in ran]
    for ax, r in panels:
        t = [s.t for s in r.samples]
        ax.plot(t, [s.produced for s in r.samples], label="produced (acked)", color="tab:blue")
        ax.plot(t, [s.committed for s in r.samples], label="committed (table)", color="tab:orange")
        top = max([s.produced for s in r.samples] + [1])
        faults = [e for e in r.events if e.kind not in ("recovered", "start", "stop", "drain")]
        labelled = max_labels is None or len(faults) <= max_labels
        for i, e in enumerate(faults):
            ax.axvline(e.t, color="tab:red", linestyle="--", linewidth=0.9, alpha=0.8)
            if labelled:
                ax.text(
                    e.t,
                    top * (0.95 - 0.12 * (i % 4)),
                    f" {e.kind}\n {e.detail[:28]}",
                    fontsize=6,
                    color="tab:red",
                    va="top",
                )
        for e in r.events:
            if e.kind == "recovered":
                ax.axvline(e.t, color="tab:green", linestyle=":", linewidth=1.0)
        ax.set_title(
            f"{r.scenario} ({r.table_format}): {r.verdict} — {r.faults} faults, "
            f"{r.restarts} restarts, {r.missing} missing, {r.duplicated} duplicated, "
            f"recover median {_secs(r.recover_median)} s / max {_secs(r.recover_max)} s",
            fontsize=9,
        )
        ax.set_xlabel("seconds since drill start")
        ax.set_ylabel("records")
        ax.grid(alpha=0.3)
    handles, labels = panels[0][0].get_legend_handles_labels()
    from matplotlib.lines import Line2D

    handles += [
        Line2D([], [], color="tab:red", linestyle="--"),
        Line2D([], [], color="tab:green", linestyle=":"),
    ]
    labels += ["fault injected", "recovered (first new commit)"]
    fig.legend(handles, labels, loc="upper right", fontsize=8)
    fig.tight_layout(rect=(0, 0, 1 - 1.6 / (10 * cols + 2), 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_files_png(report: dict[str, Any], path: Path) -> Path | None:
    """The file-economy run (lab/drill/files.py): live data files and their
    average size over time, with and without compaction (solid: main table, dotted:
    dead-letter table), and the verify checkpoints (green: exact, red: not)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {k: r for k, r in report.get("runs", {}).items() if r.get("samples")}
    if not runs:
        return None
    fig, (files_ax, size_ax) = plt.subplots(2, 1, figsize=(11, 7.5), sharex=True)
    colors = {"files": "tab:blue", "files-baseline": "tab:orange"}
    for label, run in runs.items():
        name = "compaction on" if label == "files" else "no compaction"
        for table in run["tables"]:
            pts = [(s["t"], *s["tables"][table]) for s in run["samples"] if table in s["tables"]]
            pts = [p for p in pts if p[1]]
            main = table == run["main_table"]
            style = {"color": colors.get(label, "tab:gray"), "linestyle": "-" if main else ":"}
            tag = f"{name}: {table}"
            files_ax.plot([p[0] for p in pts], [p[1] for p in pts], label=tag, **style)
            size_ax.plot([p[0] for p in pts], [p[2] / p[1] / 1024 for p in pts], **style)
        for cp in run["checkpoints"]:
            exact = cp["ok"] and cp["complete"]
            for ax in (files_ax, size_ax):
                ax.axvline(cp["t"], color="tab:green" if exact else "tab:red", lw=0.8, ls="--")
    eco = report.get("economy") or {}
    files_ax.set_title(
        f"{report['format']}: {report['rate']:.0f} records/s, 1 s trigger, "
        f"{report['minutes']:g} min — live files bound {eco.get('files_bound', '-')}, "
        f"average size ratio {eco.get('last_half_mean_average_ratio', '-')}x (second half), "
        f"{eco.get('final_average_ratio', '-')}x (end); dashed: ingest verify (green: exact)",
        fontsize=9,
    )
    files_ax.set_ylabel("live data files")
    size_ax.set_ylabel("average live file size (KiB)")
    size_ax.set_xlabel("seconds since the first commit")
    for ax in (files_ax, size_ax):
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
    files_ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
