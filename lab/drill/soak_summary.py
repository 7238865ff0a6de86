"""The soak drill's record (``SoakLog``) and the summary of its report (pure; the soak
itself is lab/drill/soak.py): kills by kind, recovery median / p90 / max by
kind, checkpoint deletions, counts and verdict, and the one line printed at the end."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lab.drill.model import DrillResult, Recovery
from lab.drill.soak_schedule import CHECKPOINT, KILLS

RECOVERY_KINDS = ("warm", "cold", "checkpoint", "unplanned")


# -- the record and its summary (pure) ---------------------------------------------------
@dataclass(frozen=True)
class SoakRecovery:
    kind: str  # warm | cold | checkpoint | unplanned
    recovery: Recovery  # its first_commit is filled in by the rig's sampler


@dataclass
class SoakLog:
    """What the soak did, beside the drill result."""

    minutes: float
    seed: int
    counts: Counter[str] = field(default_factory=Counter)
    recoveries: list[SoakRecovery] = field(default_factory=list)
    unplanned_exits: int = 0
    fault_s: float = 0.0  # the fault phase as it ran (first commit to the last fault)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated ``q`` percentile (0-100) of a non-empty sequence."""
    v = sorted(values)
    pos = (len(v) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def recovery_stats(seconds: Sequence[float]) -> dict[str, Any]:
    if not seconds:
        return {"n": 0, "median": None, "p90": None, "max": None}
    return {
        "n": len(seconds),
        "median": round(statistics.median(seconds), 2),
        "p90": round(percentile(seconds, 90), 2),
        "max": round(max(seconds), 2),
    }


def summarize(result: DrillResult, log: SoakLog) -> dict[str, Any]:
    """The soak section of the report."""
    by_kind: dict[str, list[float]] = {k: [] for k in RECOVERY_KINDS}
    unrecovered: Counter[str] = Counter()
    for r in log.recoveries:
        secs = r.recovery.seconds
        if secs is None:
            unrecovered[r.kind] += 1
        else:
            by_kind.setdefault(r.kind, []).append(round(secs, 2))
    kills = {k: log.counts.get(k, 0) for k in KILLS}
    total = sum(kills.values())
    return {
        "minutes": log.minutes,
        "seed": log.seed,
        "format": result.table_format,
        "fault_s": round(log.fault_s, 1),
        "kills": {**kills, "total": total},
        "mean_kill_interval_s": round(log.fault_s / total, 1) if total else None,
        "checkpoint_deletions": log.counts.get(CHECKPOINT, 0),
        "recovery_s": {k: recovery_stats(v) for k, v in by_kind.items() if v},
        "recoveries_without_commit": dict(unrecovered),
        "unplanned_exits": log.unplanned_exits,
        "produced": result.produced,
        "committed": result.committed,
        "missing": result.missing,
        "duplicated": result.duplicated,
        "duration_s": result.duration_s,
        "verdict": result.verdict,
    }


def summary_line(s: dict[str, Any], problems: Sequence[str] = ()) -> str:
    """The one line printed at the end, like every drill's."""
    kills = s["kills"]
    kinds = ", ".join(f"{kills[k]} {k}" for k in KILLS)
    rec = ", ".join(
        f"{k} {v['median']:.1f}/{v['p90']:.1f}/{v['max']:.1f}s (n={v['n']})"
        for k, v in s["recovery_s"].items()
    )
    line = (
        f"soak/{s['format']}: {s['verdict']} ({s['duration_s']:.0f}s, seed {s['seed']}, "
        f"{kills['total']} kills: {kinds}; {s['checkpoint_deletions']} checkpoint "
        f"deletion(s); recovery median/p90/max {rec or '-'}; {s['produced']} produced, "
        f"{s['missing']} missing, {s['duplicated']} duplicated)"
    )
    return line + (f" — {'; '.join(problems)[:300]}" if problems else "")
