#!/usr/bin/env python3
"""Failover drills: a thin wrapper over ``ingest drill`` (see docs/drills.md).

    scripts/failover_drill.py                 # full matrix → ./drills/report.json, timeline.png
    scripts/failover_drill.py --matrix fast   # the quick subset
    scripts/failover_drill.py --scenario zombie --format iceberg --out /tmp/d

Exit status 1 when any drill found missing or duplicated records (or a failed assertion).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.cli import main

if __name__ == "__main__":
    main(["drill", *sys.argv[1:]])
