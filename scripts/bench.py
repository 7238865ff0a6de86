#!/usr/bin/env python3
"""Benchmark report: same as ``ingest bench`` (options: ``--help``).

scripts/bench.py            # full preset → ./bench-<time>/report.json + PNG charts
scripts/bench.py --out docs/bench   # the committed report
scripts/bench.py --quick    # smoke run
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.cli import main

if __name__ == "__main__":
    main(["bench", *sys.argv[1:]])
