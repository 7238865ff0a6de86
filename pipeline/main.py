"""Entry point for ``spark-submit pipeline/main.py run --config …`` (and ``python -m pipeline``).

spark-submit runs this file as a script, so the package must be importable: either
installed (``pip install .``), shipped with ``--py-files`` (zip/wheel), or found next to
this file (the repository checkout).
"""

import os
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.cli import main

if __name__ == "__main__":
    argv = sys.argv[1:]
    # `spark-submit pipeline/main.py --config x.yaml` means `run --config x.yaml`
    if not argv or argv[0].startswith("-"):
        argv = ["run", *argv]
    main(argv)
