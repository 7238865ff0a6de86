"""File-economy run (``ingest drill --files MINUTES``): the live data files of a pipeline
at 1,000 records/s with a 1 s trigger, with background compaction and without.

Two runs on the drill rig (rate producer, the pipeline as its own process), one after
the other, the same rate and minutes: ``files`` with ``maintenance.compaction`` on
(:data:`COMPACTION`), then ``files-baseline`` with it off. No faults. For MINUTES after
the first commit, every :data:`SAMPLE_S` seconds the tool opens the tables in its own
process and records each table's live data files and bytes (``file_stats()``, what a
reader of the head opens); every :data:`VERIFY_EVERY_S` seconds it runs ``ingest verify
--require-full`` as a subprocess against the live tables (one at a time). Then the
producer stops, the pipeline drains, and ``ingest verify`` runs once more with the
drill's own count of every acknowledged offset.

Kafka: the rig's 3-node cluster (or ``--bootstrap``), 16 partitions, zstd batches
lingering 500 ms (~76 B a record on the wire; the committed runs used the same). The
topic keeps every record (Kafka's default 7-day retention), so every verify checks every
committed record (``complete``).

Asserted (``problems``, verdict FAILED): every verify ok and complete, nothing missing
or duplicated, no driver exit, the compaction run saw a compaction commit. The economy
numbers (bound, averages, ratio) are reported, not asserted. Output under ``--out``:
``files-<format>.json`` and ``files-<format>.png``.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from lab.drill.brokers import broker_info
from lab.drill.count import count_against
from lab.drill.driver import ROOT
from lab.drill.model import DrillSpec, TableFormat
from lab.drill.report import write_files_png
from lab.drill.rig import Rig
from lab.drill.runner import DrillOptions

RATE = 1000.0
PARTITIONS = 16
PRODUCER_CONF = {"compression.type": "zstd", "linger.ms": "500", "batch.size": "1000000"}
# Every 10 s: the live count stays near 10 s of batches plus the full-size files. A 16 MiB
# target (~1/4 of a 10-minute run's main table) bounds what one run rewrites: a partly
# filled output is re-packed with the new small files until it reaches 12 MiB (75 %),
# then left alone; the default (sink.targetFileSizeBytes, 128 MiB) would rewrite the whole
# table every 10 s. minInputFiles 8: about one batch's files.
COMPACTION = {
    "enabled": True,
    "interval": "10 seconds",
    "minInputFiles": 8,
    "targetFileSizeBytes": 16 << 20,
}
SAMPLE_S = 5.0
VERIFY_EVERY_S = 120.0
VERIFY_TIMEOUT_S = 900.0
FIRST_COMMIT_TIMEOUT_S = 480.0
AVERAGES = ("final_average", "mean_average", "last_half_mean_average")


@dataclass
class Checkpoint:
    """One ``ingest verify`` of the live (or, last, drained) tables."""

    t: float  # started, seconds after the first commit
    seconds: float = 0.0
    exit_code: int | None = None
    ok: bool = False
    complete: bool = False
    totals: dict[str, int] = field(default_factory=dict)
    verdicts: list[str] = field(default_factory=list)


@dataclass
class FilesLog:
    label: str  # files | files-baseline
    samples: list[dict[str, Any]] = field(default_factory=list)  # t, produced, tables
    checkpoints: list[Checkpoint] = field(default_factory=list)
    driver_cpu_s: float | None = None
    batches: dict[str, Any] = field(default_factory=dict)


# -- summaries (pure) ------------------------------------------------------------------
def table_summary(samples: list[dict[str, Any]], table: str) -> dict[str, Any]:
    """Live files and their average size of ``table`` over the samples (``t``, ``tables``:
    name -> [files, bytes]); ``last_half``: the samples of the run's second half."""
    pts = [(s["t"], *s["tables"][table]) for s in samples if s["tables"].get(table, [0])[0]]
    if not pts:
        return {"samples": 0}
    late = [p for p in pts if p[0] >= pts[-1][0] / 2]
    return {
        "samples": len(pts),
        "max_files": max(p[1] for p in pts),
        "mean_files": round(statistics.fmean(p[1] for p in pts), 1),
        "final_files": pts[-1][1],
        "final_bytes": pts[-1][2],
        "final_average_bytes": round(pts[-1][2] / pts[-1][1]),
        "mean_average_bytes": round(statistics.fmean(b / f for _, f, b in pts)),
        "last_half_mean_average_bytes": round(statistics.fmean(b / f for _, f, b in late)),
    }


def economy(compacted: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """Average live file size with compaction over without (at the end, over the run,
    over its second half) and the bound on live files with compaction."""

    def ratio(key: str) -> float | None:
        a, b = compacted.get(key), baseline.get(key)
        return round(a / b, 1) if a and b else None

    return {
        "files_bound": compacted.get("max_files"),
        "baseline_final_files": baseline.get("final_files"),
        **{f"{k}_ratio": ratio(f"{k}_bytes") for k in AVERAGES},
    }


def checkpoint_from_report(doc: dict[str, Any], cp: Checkpoint) -> Checkpoint:
    """Fill ``cp`` from ``ingest verify --json`` output."""
    cp.ok, cp.complete = bool(doc.get("ok")), bool(doc.get("complete"))
    totals: dict[str, int] = {}
    for r in doc.get("reports", []):
        for k, v in (r.get("totals") or {}).items():
            if isinstance(v, int):
                totals[k] = totals.get(k, 0) + v
        if r.get("verdict"):
            cp.verdicts.append(str(r["verdict"]))
    cp.totals = totals
    return cp


def _group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) of the live processes of process group ``pgid``."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()  # after "(comm)": state is fields[0]
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return round(total / tick, 1)


# -- the live run ----------------------------------------------------------------------
class FilesRun:
    def __init__(self, rig: Rig, log: FilesLog, minutes: float) -> None:
        self.rig, self.log, self.minutes = rig, log, minutes
        self._verify: tuple[subprocess.Popen[bytes], Checkpoint, Path, float] | None = None
        self._n = 0
        self.t0 = 0.0

    def run(self) -> None:
        rig = self.rig
        rig.start_driver(restart=False)
        rig.wait_commits(1, timeout=FIRST_COMMIT_TIMEOUT_S)
        from pipeline.formats.registry import open_tables

        self.tables = open_tables(rig.cfg).maintenance()
        self.t0 = rig.now()
        end, next_verify = self.t0 + self.minutes * 60.0, self.t0 + VERIFY_EVERY_S
        while rig.now() < end:
            tick = rig.now()
            self.sample()
            self._poll_verify()
            if self._verify is None and rig.now() >= next_verify:
                self._start_verify()
                next_verify += VERIFY_EVERY_S
            d = rig.driver
            if d is not None and not d.alive():
                rig.result.problems.append(f"driver {d.n} exited {d.poll()}: {d.error_line()}")
                rig.start_driver()
            time.sleep(max(0.0, tick + SAMPLE_S - rig.now()))
        self._finish_verify()
        assert rig.driver is not None
        self.log.driver_cpu_s = _group_cpu_s(rig.driver.pid)
        self.log.batches = _batch_stats(rig.driver.batch_lines())
        rig.drain()
        self.sample()
        self._start_verify()
        self._finish_verify()
        own = count_against(rig.cfg, rig.producer.expected(), rig.producer.unplaced_counts())
        rig.result.committed, rig.result.missing = own.present, own.missing
        rig.result.duplicated, rig.result.verifier = own.duplicated, "ingest verify + drill count"
        rig.count_outcomes()  # compaction commits seen (a problem when none)

    def sample(self) -> None:
        stats = {}
        for table in self.tables:
            try:
                s = table.file_stats()
            except Exception as e:  # a missed sample, not a failed run
                self.rig.result.notes.append(f"file stats at {self.rig.now():.0f}s: {e}")
                continue
            stats[s.table] = [s.files, s.bytes]
        t = round(self.rig.now() - self.t0, 1)
        self.log.samples.append({"t": t, "produced": self.rig.producer.produced, "tables": stats})

    def _start_verify(self) -> None:
        self._n += 1
        out = self.rig.workdir / f"verify-{self._n:02d}.json"
        cmd = [sys.executable, "-m", "pipeline", "verify", "--config", str(self.rig.config_path)]
        cmd += ["--json", str(out), "--require-full"]
        with open(out.with_suffix(".err"), "wb") as err:
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
        cp = Checkpoint(t=round(self.rig.now() - self.t0, 1))
        self._verify = (proc, cp, out, time.monotonic())

    def _poll_verify(self, wait: bool = False) -> None:
        """Record the running verify once it ended (``wait``: wait for it, bounded)."""
        if self._verify is None:
            return
        proc, cp, out, started = self._verify
        if wait:
            try:
                proc.wait(timeout=VERIFY_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.poll() is None:
            return
        self._verify = None
        cp.seconds, cp.exit_code = round(time.monotonic() - started, 1), proc.returncode
        if out.is_file():
            checkpoint_from_report(json.loads(out.read_text()), cp)
        self.log.checkpoints.append(cp)
        if not (cp.ok and cp.complete):
            err = out.with_suffix(".err").read_text(errors="replace")[-300:]
            self.rig.result.problems.append(
                f"verify at {cp.t:.0f}s: exit {cp.exit_code}, {cp.verdicts or err}"
            )

    def _finish_verify(self) -> None:
        self._poll_verify(wait=True)


def _batch_stats(lines: list[dict[str, Any]]) -> dict[str, Any]:
    done = [b for b in lines if b.get("outcome") == "committed"]
    if not done:
        return {"batches": 0}
    durations = sorted(float(b.get("duration_seconds", 0.0)) for b in done)
    return {
        "batches": len(done),
        "median_duration_s": round(statistics.median(durations), 3),
        "p90_duration_s": round(durations[int(0.9 * (len(durations) - 1))], 3),
        "median_records": statistics.median(int(b.get("records", 0)) for b in done),
        "median_files": statistics.median(int(b.get("files", 0)) for b in done),
    }


def _one(label: str, fmt: TableFormat, minutes: float, opts: DrillOptions, say: Any) -> Any:
    """One run on its own rig; its record for the report."""
    spec = DrillSpec(label, fmt, kills=0, rate=RATE, partitions=PARTITIONS)
    maintenance: dict[str, Any] = {"fileStatsInterval": 0}  # sampled by the tool instead
    if label == "files":
        maintenance["compaction"] = COMPACTION
    log = FilesLog(label)
    work = (opts.work or opts.out / "work") / f"{label}-{fmt}"
    shutil.rmtree(work, ignore_errors=True)
    with Rig(
        spec,
        work,
        opts.bootstrap,
        on_status=lambda m: say(f"{label}/{fmt}: {m}"),
        overrides={"maintenance": maintenance},
        producer_conf=PRODUCER_CONF,
    ) as rig:
        try:
            FilesRun(rig, log, minutes).run()
        except Exception as e:  # a run that breaks is a failed run, reported
            rig.result.problems.append(f"{type(e).__name__}: {e}")
    r = rig.result
    if r.ok and not opts.keep_work:
        shutil.rmtree(work, ignore_errors=True)
    names = list(dict.fromkeys(t for s in log.samples for t in s["tables"]))
    return {
        **{k: getattr(r, k) for k in ("verdict", "problems", "notes", "produced", "committed")},
        **{k: getattr(r, k) for k in ("missing", "duplicated", "compactions", "duration_s")},
        "driver_cpu_s": log.driver_cpu_s,
        "batches": log.batches,
        "main_table": names[0] if names else None,
        "tables": {t: table_summary(log.samples, t) for t in names},
        "checkpoints": [asdict(c) for c in log.checkpoints],
        "samples": log.samples,
    }


def run_files(
    minutes: float, table_format: TableFormat, opts: DrillOptions, console: Console
) -> dict[str, Any]:
    """The compaction run, then the baseline; writes ``files-<format>.json`` and ``.png``
    under ``opts.out``; returns the report."""
    started = time.monotonic()
    console.print(f"broker: {broker_info(opts.bootstrap)['description']}")
    runs: dict[str, Any] = {}
    for label in ("files", "files-baseline"):
        runs[label] = _one(label, table_format, minutes, opts, console.print)
        console.print(_line(label, table_format, runs[label]))
    report: dict[str, Any] = {
        "format": table_format,
        "minutes": minutes,
        "rate": RATE,
        "partitions": PARTITIONS,
        "trigger": "1 second",
        "compaction": COMPACTION,
        "producer": PRODUCER_CONF,
        "broker": broker_info(opts.bootstrap),
        "elapsed_s": round(time.monotonic() - started, 1),
        "ok": all(r["verdict"] == "ok" for r in runs.values()),
        "runs": runs,
    }
    c, b = runs["files"], runs["files-baseline"]
    if c["main_table"] and b["main_table"]:
        report["economy"] = economy(c["tables"][c["main_table"]], b["tables"][b["main_table"]])
    out = opts.out / f"files-{table_format}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    png = write_files_png(report, opts.out / f"files-{table_format}.png")
    console.print(f"economy: {report.get('economy')}; report: {out}, plot: {png}")
    return report


def _line(label: str, fmt: str, r: dict[str, Any]) -> str:
    main = r["tables"].get(r["main_table"], {})
    cps = ", ".join(
        f"{c['t']:.0f}s {'exact' if c['ok'] and c['complete'] else 'NOT EXACT'}"
        for c in r["checkpoints"]
    )
    return (
        f"{label}/{fmt}: {r['verdict']} ({r['duration_s']:.0f}s, {r['produced']} produced, "
        f"{r['missing']} missing, {r['duplicated']} duplicated; main table: max "
        f"{main.get('max_files')} live files, final {main.get('final_files')}, average "
        f"{main.get('final_average_bytes')} B; compactions {r['compactions']}; verify {cps})"
        + (f" — {'; '.join(r['problems'])[:300]}" if r["problems"] else "")
    )
