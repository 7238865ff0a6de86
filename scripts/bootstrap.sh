#!/usr/bin/env bash
# Set up everything the project needs on a fresh Debian/Ubuntu machine with Python 3.11+:
# Java 17 and Maven (as root, when missing), a virtualenv in .venv (INGEST_VENV) with the
# package and its dev extras and the lab (lab/: demo, broker, drills, bench), both
# editable, and the JVM jars of pipeline/resources/pom.xml (Apache Kafka) fetched by Maven
# into .jvm/. Idempotent: re-running only installs what changed. Sourced by run-demo.sh and
# run-tests.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
VENV="${INGEST_VENV:-$ROOT/.venv}"

need_root() { [ "$(id -u)" = 0 ] || { echo "bootstrap: $1 (run as root or install it yourself)" >&2; exit 1; }; }
apt_install() {
  need_root "missing system packages: $*"
  if [ ! -f /tmp/.ingest-apt-updated ]; then apt-get update -qq && touch /tmp/.ingest-apt-updated; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

"$PY" -c 'import sys; assert sys.version_info >= (3, 11), sys.version' 2>/dev/null \
  || { echo "bootstrap: Python 3.11+ is required ($PY is $("$PY" --version 2>&1))" >&2; exit 1; }
if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
  echo "bootstrap: installing Java 17 (openjdk-17-jre-headless)" >&2
  apt_install openjdk-17-jre-headless
fi
if ! command -v mvn >/dev/null 2>&1; then
  echo "bootstrap: installing Maven (fetches the Kafka broker's jars from Maven Central)" >&2
  apt_install maven
fi
if ! "$PY" -c 'import ensurepip, venv' 2>/dev/null; then
  ver="$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
  apt_install "python${ver}-venv"
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "bootstrap: creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
stamp="$VENV/.ingest-installed"
if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ] \
   || [ "$ROOT/lab/pyproject.toml" -nt "$stamp" ]; then
  echo "bootstrap: installing the package, the lab and dev tools into $VENV (first run takes a few minutes)" >&2
  "$VENV/bin/python" -m pip install -q --upgrade pip >&2
  "$VENV/bin/python" -m pip install -q -e "$ROOT[dev]" -e "$ROOT/lab" >&2
  touch "$stamp"
fi
export PATH="$VENV/bin:$PATH"
# The manifest's Kafka set (once; a changed manifest fetches again): one line on failure.
# The test-only `jvm-reader` set is fetched by the tests that use it.
"$VENV/bin/python" -m pipeline.jvm fetch kafka >&2
# The driver JVM's class archive (once per Java and Spark; starts then map Spark's classes
# instead of loading them: pipeline/spark/class_archive.py). Never fails the set-up.
"$VENV/bin/python" -m pipeline.spark.class_archive >&2 || true
# Byte code in PySpark's zip, which Spark's Python processes import instead of the package
# (each query start's source planner compiled PySpark again: pipeline/spark/pyspark_zip.py).
"$VENV/bin/python" -m pipeline.spark.pyspark_zip >&2 || true
