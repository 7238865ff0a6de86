#!/usr/bin/env python3
"""Where each recovery of a drill went, phase by phase, from the drivers' own logs.

    INGEST_SPARK_LOG_LEVEL=INFO ingest drill --soak 30 --keep-work --work /tmp/soak …
    python scripts/restart-phases.py docs/drills/soak/soak-iceberg.json /tmp/soak/soak-iceberg \
        [--out docs/drills/soak/phases-iceberg.json]

The milestones and how a recovery is split are in lab/drill/phases.py. Prints
one line per recovery and the median of each phase per fault kind.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lab.drill.model import DrillResult  # noqa: E402
from lab.drill.phases import SEGMENTS, medians, recoveries  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report", type=Path, help="a drill's report.json or soak-<format>.json")
    ap.add_argument("work", type=Path, help="that drill's work directory (driver-NN.out)")
    ap.add_argument("--drill", type=int, default=0, help="which drill of the report (index)")
    ap.add_argument("--out", type=Path, help="write the rows and medians as JSON")
    ns = ap.parse_args()
    doc = json.loads(ns.report.read_text())
    result = DrillResult.from_dict(doc["drills"][ns.drill])
    rows = recoveries(result, ns.work)
    if not rows:
        print("no recovery could be matched to a driver's log (was the work kept?)")
        return 1
    for r in rows:
        parts = ", ".join(f"{k} +{v:.2f}" for k, v in r.segments.items())
        print(f"{r.kind:<18} driver {r.driver:3d}  {r.total_s:6.2f} s: {parts}")
    summary = medians(rows)
    print("\nmedian seconds per phase (each from the previous milestone present):")
    for kind, m in summary.items():
        cells = ", ".join(f"{k} {m[k]:.2f}" for k in SEGMENTS if k in m)
        print(f"  {kind} (n={m['n']:.0f}, total {m['total']:.2f} s): {cells}")
    if ns.out:
        ns.out.write_text(
            json.dumps(
                {
                    "report": str(ns.report),
                    "milestones": list(SEGMENTS),
                    "recoveries": [
                        {
                            "kind": r.kind,
                            "driver": r.driver,
                            "total_s": r.total_s,
                            "at_s": r.at,
                            "segments_s": r.segments,
                        }
                        for r in rows
                    ],
                    "medians": summary,
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
