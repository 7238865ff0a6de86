#!/usr/bin/env bash
# The independent JVM reader of our Iceberg tables (docs/design.md: a reader we never write
# with): Spark's own Iceberg runtime. The runtime this environment uses is built for Spark
# 3.5, so it needs PySpark 3.5 and lives in its own virtual environment, never in .venv:
#   pyspark==3.5.7 + snowpark-connect-deps-iceberg==1.0.2 (iceberg-spark-runtime-3.5_2.12 1.10.2;
#   1.0.3 ships stripped jars) in $INGEST_JVM_READER_VENV (default .jvm-reader/venv)
#   the SQLite JDBC driver for Iceberg's JdbcCatalog: Debian libxerial-sqlite-jdbc-java
#   (installed when missing and running as root; $INGEST_SQLITE_JDBC_JAR overrides the jar)
# Idempotent and quick once set up (a stamp in the venv records the pins it was built with).
# Prints python=, iceberg_jar=, sqlite_jdbc_jar= lines; when something cannot be had it prints
# one line naming it to stderr and exits 1. tests/test_jvm_iceberg_reader.py runs it (the slow
# suite); tests/jvm_reader/read_iceberg.py is the reader.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${INGEST_JVM_READER_PYTHON:-${PYTHON:-python3}}"  # PySpark 3.5 wants Python <= 3.11
VENV="${INGEST_JVM_READER_VENV:-$ROOT/.jvm-reader/venv}"
PYSPARK_PIN="pyspark==3.5.7"
ICEBERG_PIN="snowpark-connect-deps-iceberg==1.0.2"
SQLITE_DEB="libxerial-sqlite-jdbc-java"
stamp="$VENV/.jvm-reader-installed"

missing() { echo "jvm-reader-env: missing $*" >&2; exit 1; }

find_iceberg_jar() {
  local site
  for site in "$VENV"/lib/python3*/site-packages; do
    [ -d "$site" ] || continue
    find "$site" -name 'iceberg-spark-runtime-3.5_2.12-*.jar' -print -quit 2>/dev/null
  done | head -n1
}

find_sqlite_jar() {
  if [ -n "${INGEST_SQLITE_JDBC_JAR:-}" ]; then
    [ -f "$INGEST_SQLITE_JDBC_JAR" ] && echo "$INGEST_SQLITE_JDBC_JAR"
    return 0
  fi
  local jar
  for jar in /usr/share/java/sqlite-jdbc.jar /usr/share/java/sqlite-jdbc-*.jar; do
    [ -f "$jar" ] && { echo "$jar"; return 0; }
  done
  return 0
}

command -v java >/dev/null 2>&1 || [ -x "${JAVA_HOME:-/nonexistent}/bin/java" ] \
  || missing "java (a JDK/JRE 17, e.g. Debian openjdk-17-jre-headless)"

# The SQLite JDBC driver (Debian package; its JNI library comes with it as a dependency).
sqlite_jar="$(find_sqlite_jar)"
if [ -n "${INGEST_SQLITE_JDBC_JAR:-}" ]; then
  [ -n "$sqlite_jar" ] \
    || missing "SQLite JDBC driver jar $INGEST_SQLITE_JDBC_JAR (INGEST_SQLITE_JDBC_JAR)"
elif [ -z "$sqlite_jar" ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    missing "SQLite JDBC driver (Debian $SQLITE_DEB: apt-get install it, or run this as root)"
  fi
  echo "jvm-reader-env: installing $SQLITE_DEB" >&2
  if [ ! -f /tmp/.ingest-apt-updated ]; then
    apt-get update -qq >/dev/null 2>&1 && touch /tmp/.ingest-apt-updated
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$SQLITE_DEB" \
    >/dev/null 2>&1 || missing "SQLite JDBC driver (apt-get install $SQLITE_DEB failed)"
  sqlite_jar="$(find_sqlite_jar)"
  [ -n "$sqlite_jar" ] \
    || missing "SQLite JDBC driver jar under /usr/share/java ($SQLITE_DEB installed)"
fi

# The reader's own virtual environment.
pins="$PYSPARK_PIN $ICEBERG_PIN"
if [ "$(cat "$stamp" 2>/dev/null)" != "$pins" ] || [ ! -x "$VENV/bin/python" ] \
  || [ -z "$(find_iceberg_jar)" ]; then
  mkdir -p "$(dirname "$VENV")"
  # keep the reader's environment out of git status (the project's .gitignore is not ours)
  [ "$VENV" = "$ROOT/.jvm-reader/venv" ] && [ ! -f "$ROOT/.jvm-reader/.gitignore" ] \
    && echo '*' >"$ROOT/.jvm-reader/.gitignore"
  if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV" >/dev/null 2>&1 || missing "a Python venv at $VENV ($PY -m venv failed)"
  fi
  log="$(dirname "$VENV")/pip-install.log"
  echo "jvm-reader-env: installing $pins into $VENV (first run: a minute or more)" >&2
  if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    "$PYSPARK_PIN" "$ICEBERG_PIN" >"$log" 2>&1; then
    last="$(grep -E 'ERROR|Error' "$log" | tail -n1 | cut -c1-200)"
    missing "$PYSPARK_PIN / $ICEBERG_PIN: pip install failed (PyPI unreachable?): ${last:-see $log}"
  fi
  [ -n "$(find_iceberg_jar)" ] \
    || missing "iceberg-spark-runtime-3.5_2.12 jar in $ICEBERG_PIN (installed without it)"
  echo "$pins" >"$stamp"
fi

iceberg_jar="$(find_iceberg_jar)"
echo "python=$VENV/bin/python"
echo "iceberg_jar=$iceberg_jar"
echo "sqlite_jdbc_jar=$sqlite_jar"
