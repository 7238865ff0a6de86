"""spark-submit launcher for the ingest application.

    spark-submit --py-files dist/spark/pipeline.zip dist/spark/ingest_submit.py --config X.yaml
    spark-submit … local:///opt/ingest/app/ingest_submit.py --config /etc/ingest/pipeline.yaml

It imports ``pipeline`` from wherever Spark put it on ``sys.path`` (the ``--py-files``
zip/wheel, or the image's virtualenv), says on stderr which copy that is, and runs
``pipeline.main`` (a bare ``--config`` means ``run --config``). Unlike running
``pipeline/main.py`` from a checkout, it never puts a source tree in front of the shipped
package. ``scripts/build-pyfiles.sh`` copies it next to the zip; the image has it under
/opt/ingest/app.
"""

import os
import runpy
import sys

import pipeline

print(
    f"ingest: package pipeline from {os.path.dirname(os.path.abspath(pipeline.__file__))}",
    file=sys.stderr,
    flush=True,
)
runpy.run_module("pipeline.main", run_name="__main__", alter_sys=True)
