"""Where a drill's recoveries spent their time, read from the drivers' own logs.

A drill run with ``INGEST_SPARK_LOG_LEVEL=INFO`` and ``--keep-work`` leaves each driver's log
(``driver-NN.out``; its first line names the full log file, which holds Spark's lines too).
Every recovery of the report (a fault → the first new commit the drill saw in the table)
is split at the milestones of the driver that recovered, on the drill's clock
(``DrillResult.started_at`` maps the logs' wall clock onto it):

    launch    the drill started the process (its ``start`` event; a warm standby's was
              before the fault)
    logging   the command's first log line: the Python imports done
    lease     the lease taken (at once, after a dead holder, or by a standby taking over)
    epoch     the writer epoch acquired: both tables fenced
    session   Spark's session up (its ``SharedState`` line)
    query     Spark's ``MicroBatchExecution`` starting the pipeline's query
    init      the query initialised: the source's planner up, the checkpoint read
              (``Resuming at batch``, or ``Starting new streaming query``)
    plan      a new batch's offsets written to the checkpoint (none when the first batch
              is one the killed driver had planned: Spark runs it again)
    commit    the first table commit of a batch (a recommit included)
    seen      the drill saw the commit in the table (its ``recovered`` event)

A milestone the driver passed before the fault (a standby's session), after its first
commit, or not at all (no lease with ``ha.mode: off``) is left out; each segment runs from
the previous milestone present. Only the recovering driver's own lines count: it is the
driver whose first commit after the fault came first.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from lab.drill.driver import driver_out
from lab.drill.model import DrillResult

_LOG_FILE = re.compile(r"INFO pipeline: log file: (\S+)")  # the command's first line
MILESTONES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("logging", _LOG_FILE),
    ("lease", re.compile(r"took (over )?the lease")),
    ("epoch", re.compile(r"writer epoch \d+ acquired")),
    ("session", re.compile(r"SharedState: Warehouse path")),
    ("query", re.compile(r"MicroBatchExecution: Starting ingest-(?!\S*-rehearsal )\S+ \[id")),
    ("init", re.compile(r"MicroBatchExecution: (Resuming at batch|Starting new streaming query)")),
    ("plan", re.compile(r"MicroBatchExecution: Committed offsets for batch")),
    (
        "commit",
        re.compile(r"commit of batch \d+ \(|pipeline\.runtime\.batches: batch \d+ committed"),
    ),
)
SEGMENTS = ("launch", *(name for name, _ in MILESTONES), "seen")
_STAMPS = (  # the pipeline's lines, then Spark's (log4j2 pattern of the session)
    (re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) "), "%Y-%m-%d %H:%M:%S,%f"),
    (re.compile(r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}) "), "%y/%m/%d %H:%M:%S.%f"),
)
_NOT_A_FAULT = ("start", "stop", "recovered", "drain")


def stamp(line: str) -> float | None:
    """The wall clock (Unix seconds, local time as the logs write it) of a log line."""
    for pattern, fmt in _STAMPS:
        m = pattern.match(line)
        if m:
            return datetime.strptime(m.group(1), fmt).timestamp()
    return None


def driver_lines(workdir: Path, n: int) -> list[tuple[float, str]]:
    """Driver ``n``'s stamped log lines, its own and Spark's, in time order."""
    out = driver_out(workdir, n)
    body = out.read_text(errors="replace") if out.exists() else ""
    m = _LOG_FILE.search(body)
    if m and Path(m.group(1)).exists():  # the full log repeats the .out lines: read alone
        body = Path(m.group(1)).read_text(errors="replace")
    lines = [(t, line) for line in body.splitlines() if (t := stamp(line)) is not None]
    return sorted(lines, key=lambda x: x[0])


@dataclass
class RecoveryPhases:
    kind: str  # the fault: kill-solo, kill-active, checkpoint-deleted, kill, ...
    driver: int
    total_s: float  # fault → seen
    # milestone → seconds since the fault, for those passed after it
    at: dict[str, float] = field(default_factory=dict)

    @property
    def segments(self) -> dict[str, float]:
        """Seconds from the previous milestone present (the fault first) to each, in the
        order the driver passed them."""
        out, prev = {}, 0.0
        for name in sorted(self.at, key=lambda k: (self.at[k], SEGMENTS.index(k))):
            out[name] = round(self.at[name] - prev, 2)
            prev = self.at[name]
        return out


def recoveries(result: DrillResult, workdir: Path) -> list[RecoveryPhases]:
    """Each recovery of a drill, split at its driver's milestones (drill clock, seconds)."""
    if not result.started_at:
        raise ValueError("the report has no started_at (a drill from before phases)")
    starts = {
        int(e.detail.split()[1]): e.t
        for e in result.events
        if e.kind == "start" and e.detail.startswith("driver ")
    }
    marks = {n: _milestones(driver_lines(workdir, n), result.started_at) for n in starts}
    # the fault events are stamped once the kill is done: a recovery's is the nearest
    faults = [f for f in result.events if f.kind not in _NOT_A_FAULT]
    rows = []
    seen = [e for e in result.events if e.kind == "recovered"]
    # the recoveries' own durations (2 decimals) where they line up, else the events' (1)
    exact = len(result.recover_s) == len(seen)
    for i, e in enumerate(seen):
        total = result.recover_s[i] if exact else float(e.detail.rstrip("s"))
        fault_t = e.t - total
        kind = min(faults, key=lambda f: abs(f.t - fault_t)).kind if faults else "start"
        firsts = {
            n: min(after)
            for n, m in marks.items()
            if (after := [ts for ts in m.get("commit", []) if ts >= fault_t])
        }
        if not firsts:
            continue
        n = min(firsts, key=lambda k: firsts[k])
        at = {"launch": starts[n]} if starts[n] >= fault_t else {}
        for name, _ in MILESTONES:
            after = [ts for ts in marks[n].get(name, []) if fault_t <= ts <= firsts[n]]
            if after:
                at[name] = min(after)
        at["seen"] = e.t
        since = {k: round(v - fault_t, 2) for k, v in at.items()}
        rows.append(RecoveryPhases(kind, n, round(total, 2), since))
    return rows


def _milestones(lines: list[tuple[float, str]], started_at: float) -> dict[str, list[float]]:
    """Every time (drill clock) each milestone's line appears, by milestone."""
    found: dict[str, list[float]] = {}
    for t, line in lines:
        for name, pattern in MILESTONES:
            if pattern.search(line):
                found.setdefault(name, []).append(t - started_at)
    return found


def medians(rows: list[RecoveryPhases]) -> dict[str, dict[str, float]]:
    """Per fault kind: the median of each segment over the recoveries that have it, and of
    the total (``n``: how many recoveries)."""
    out: dict[str, dict[str, float]] = {}
    for kind in sorted({r.kind for r in rows}):
        mine = [r for r in rows if r.kind == kind]
        m: dict[str, float] = {"n": len(mine), "total": statistics.median(r.total_s for r in mine)}
        for name in SEGMENTS:
            vals = [r.segments[name] for r in mine if name in r.segments]
            if vals:
                m[name] = round(statistics.median(vals), 2)
        out[kind] = m
    return out
