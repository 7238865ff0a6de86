#!/usr/bin/env bash
# A virtual environment with the project on another PySpark line, for CI's stage that runs
# the exactly-once core there with source.reader spark (scripts/run-tests.sh).
#
#   scripts/spark-line-env.sh [PYSPARK_VERSION]      (default 3.5.7, the 3.5 LTS line)
#
# Builds .spark-lines/<version>/venv (once; again when a pyproject.toml changes): pyspark at
# that version, then the project editable with its dev extras and the lab (lab/), so the
# tests of this checkout run against it. Spark's Kafka source jars for that line come from
# the project's Maven manifest on first use (pipeline/source/spark_kafka.py). Prints the
# environment's python; when something cannot be had it prints one line naming it to
# stderr and exits 1.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION="${1:-3.5.7}"
PY="${INGEST_SPARK_LINE_PYTHON:-${PYTHON:-python3}}"  # PySpark 3.5 wants Python <= 3.11
HOME_DIR="$ROOT/.spark-lines"
VENV="$HOME_DIR/$VERSION/venv"
stamp="$VENV/.installed"
want="pyspark==$VERSION $(cat "$ROOT/pyproject.toml" "$ROOT/lab/pyproject.toml" | sha256sum | cut -c1-12)"

missing() { echo "spark-line-env: $*" >&2; exit 1; }

built() { [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && [ -x "$VENV/bin/python" ]; }

if ! built; then
  mkdir -p "$HOME_DIR/$VERSION"
  # one builder at a time (CI's two lanes, tests that build it): the others wait, then find it
  exec 9>"$HOME_DIR/$VERSION/.lock"
  flock 9
fi
if ! built; then
  [ -f "$HOME_DIR/.gitignore" ] || echo '*' >"$HOME_DIR/.gitignore"
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV" >/dev/null 2>&1 \
    || missing "a Python venv at $VENV ($PY -m venv failed)"
  log="$HOME_DIR/$VERSION/pip-install.log"
  echo "spark-line-env: installing pyspark==$VERSION and the project into $VENV" >&2
  if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    "pyspark==$VERSION" -e "$ROOT[dev]" -e "$ROOT/lab" >"$log" 2>&1; then
    last="$(grep -E 'ERROR|Error' "$log" | tail -n1 | cut -c1-200)"
    missing "pip install pyspark==$VERSION and the project failed: ${last:-see $log}"
  fi
  "$VENV/bin/python" -m pipeline.spark.pyspark_zip >>"$log" 2>&1 || true  # see bootstrap.sh
  echo "$want" >"$stamp"
fi
echo "$VENV/bin/python"
