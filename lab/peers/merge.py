"""Merge a re-run of some of the peers section's tables into a committed report.

    python -m lab.peers.merge NEW/report.json INTO/report.json [--note TEXT]

Each table the new run measured (``throughput``, ``freshness``, ``correctness``) replaces
the report's table whole -- rows of one table always come from one run, so the ratios in
it stay same-machine, same-run ratios -- and the goals are computed again. The report's
``meta.merged_runs`` names what was replaced, when, by which command and plan.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from lab.peers.section import PARTS, goals


def merge(into: dict[str, Any], new: dict[str, Any], note: str = "") -> list[str]:
    """``into`` with the tables ``new`` measured; the names of those tables."""
    ours, theirs = into["peers"], new["peers"]
    parts = [p for p in PARTS if p in theirs]
    if not parts:
        raise ValueError("the new report measured none of " + ", ".join(PARTS))
    for part in parts:
        ours[part] = theirs[part]
    ours.setdefault("systems", {}).update(theirs.get("systems", {}))
    ours["goals"] = goals(ours)
    meta = new.get("meta", {})
    into["meta"].setdefault("merged_runs", []).append(
        {
            "when": meta.get("generated"),
            "what": f"{', '.join(parts)} replaced by a re-run" + (f": {note}" if note else ""),
            "command": meta.get("command"),
            "plan": theirs.get("plan"),
            "seconds": meta.get("seconds"),
            "host": meta.get("host"),
        }
    )
    return parts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("new", type=Path)
    ap.add_argument("into", type=Path)
    ap.add_argument("--note", default="", help="why the tables were re-run")
    ns = ap.parse_args()
    into = json.loads(ns.into.read_text())
    parts = merge(into, json.loads(ns.new.read_text()), ns.note)
    ns.into.write_text(json.dumps(into, indent=2) + "\n")
    print(f"merged {', '.join(parts)} into {ns.into}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
