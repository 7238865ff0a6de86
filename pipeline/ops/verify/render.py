"""Rich output and JSON for ``ingest verify`` reports."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from pipeline.ops.verify.model import COUNT_FIELDS, PartitionVerdict, VerifyReport

WIDE = 1000  # columns of a console that is not a terminal: tables at their natural width


def _range_text(v: PartitionVerdict) -> str:
    if not v.ranges:
        return "-"
    text = f"[{v.ranges[0][0]}, {v.ranges[-1][1]})"
    return text if len(v.ranges) == 1 else f"{text} in {len(v.ranges)} pieces"


def _cell(n: int, bad: bool = True) -> str:
    return f"[bold red]{n}[/]" if n and bad else str(n)


def print_report(console: Console, report: VerifyReport) -> None:
    title = f"{report.table_format} {report.table}"
    if report.dead_letter_table:
        title += f" + dead letters {report.dead_letter_table}"
    table = RichTable(title=title)
    for col in ("topic", "partition", "range"):
        table.add_column(col, justify="left" if col != "partition" else "right")
    for col in COUNT_FIELDS:
        if col != "lost":  # one column with unverifiable
            table.add_column("unverifiable/lost" if col == "unverifiable" else col, justify="right")

    def row(topic: str, partition: str, v: PartitionVerdict) -> list[str]:
        return [
            topic,
            partition,
            _range_text(v) if partition else "",
            str(v.expected),
            str(v.present),
            _cell(v.missing),
            _cell(v.duplicated),
            _cell(v.mismatched) if report.payload_checked else "-",
            _cell(v.unexpected),
            f"{v.unverifiable}/{v.lost}",
        ]

    for tp, v in report.partitions.items():
        table.add_row(*row(tp.topic, str(tp.partition), v))
    table.add_section()
    table.add_row(*row("total", "", report.totals()), style="bold")
    console.print(table)
    for tp, v in report.partitions.items():
        samples = [
            (name, offs)
            for name, offs in (
                ("missing", v.missing_offsets),
                ("duplicated", v.duplicated_offsets),
                ("mismatched", v.mismatched_offsets),
                ("unexpected", v.unexpected_offsets),
            )
            if offs
        ]
        if samples:
            text = "; ".join(f"{n} e.g. {', '.join(map(str, o))}" for n, o in samples)
            console.print(f"  {tp.topic}/{tp.partition}: {text}", highlight=False)
        if v.mismatched_fields:
            fields = ", ".join(f"{k}: {n}" for k, n in sorted(v.mismatched_fields.items()))
            console.print(f"  {tp.topic}/{tp.partition} fields differing: {fields}")
    if report.tables:
        print_tables(console, report)
    if report.range_issues:
        console.print(f"[bold red]{len(report.range_issues)} range issue(s)[/]:")
        for issue in report.range_issues:
            console.print(f"  {issue}", highlight=False, markup=False)
    for note in report.notes:
        console.print(f"  note: {note}", highlight=False, markup=False)
    colour = "red" if not report.ok else "green" if report.complete else "yellow"
    console.print(
        f"[bold {colour}]{escape(report.verdict())}[/] ({report.seconds:.1f}s)",
        highlight=False,
        soft_wrap=True,
    )


def print_tables(console: Console, report: VerifyReport) -> None:
    """A routed set: one row per table (the dead-letter table last, counted once) and the
    sample coordinates of every table that is off, named."""
    table = RichTable(title=f"{report.table}: records per table")
    table.add_column("table")
    table.add_column("route", justify="right")
    for col in ("records", "missing", "duplicated", "misrouted", "unexpected"):
        table.add_column(col, justify="right")
    table.add_column("verdict")
    for t in report.tables:
        table.add_row(
            escape(t.table),
            "dead letters" if t.index is None else str(t.index),
            str(t.records),
            _cell(t.missing),
            _cell(t.duplicated),
            _cell(t.misrouted),
            _cell(t.unexpected),
            "[green]ok[/]" if t.ok else "[bold red]OFF[/]",
        )
    console.print(table)
    for t in report.tables:
        for kind, samples in (
            ("missing", t.missing_offsets),
            ("duplicated", t.duplicated_offsets),
            ("misrouted", t.misrouted_offsets),
        ):
            if samples:
                console.print(
                    f"  {t.table}: {kind} e.g. {', '.join(samples)}", highlight=False, markup=False
                )


def untruncated(console: Console) -> Console:
    """``console`` itself on a terminal; otherwise (a pipe, a CI log) a console as wide as
    any table needs, so no column is ever cut to ``part…``. Same file, no colour."""
    if console.is_terminal:
        return console
    return Console(file=console.file, width=WIDE, highlight=False)


def write_json(path: Path, reports: list[VerifyReport]) -> None:
    doc = {
        "ok": all(r.ok for r in reports),
        "complete": all(r.complete for r in reports),
        "reports": [r.to_dict() for r in reports],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
