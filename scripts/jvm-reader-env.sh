#!/usr/bin/env bash
# The independent JVM readers of our tables (docs/design.md: readers we never write with):
# Spark's own Iceberg runtime and Hudi's own Spark datasource. Both packages are built for
# Spark 3.5 (Maven Central serves no Hudi Spark bundle for the project's Spark), so they need
# PySpark 3.5 and live in their own virtual environment, never in .venv:
#   pyspark==3.5.7 in $INGEST_JVM_READER_VENV (default .jvm-reader/venv)
#   the `jvm-reader` set of pipeline/resources/pom.xml (iceberg-spark-runtime-3.5_2.12 and
#   hudi-spark3.5-bundle_2.12), fetched by Maven with the project's Python
#   ($INGEST_PROJECT_PYTHON, default .venv/bin/python)
#   the SQLite JDBC driver for Iceberg's JdbcCatalog: Debian libxerial-sqlite-jdbc-java
#   (installed when missing and running as root; $INGEST_SQLITE_JDBC_JAR overrides the jar)
#   Hadoop's S3A (hadoop-aws 3.3.4, PySpark 3.5.7's Hadoop) and the AWS SDK modules it calls,
#   from the same `jvm-reader` set, for tables on S3
# Idempotent and quick once set up (a stamp in the venv records the pins it was built with).
# Prints python=, iceberg_jar=, hudi_jar=, sqlite_jdbc_jar= and s3_jars= (comma-separated)
# lines; when something cannot be had it prints one line naming it to stderr and exits 1.
# tests/integration/formats/iceberg/test_jvm_iceberg_reader.py and
# tests/integration/formats/hudi/test_jvm_hudi_reader.py run it (the slow suite);
# tests/jvm_reader/ holds the readers.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${INGEST_JVM_READER_PYTHON:-${PYTHON:-python3}}"  # PySpark 3.5 wants Python <= 3.11
VENV="${INGEST_JVM_READER_VENV:-$ROOT/.jvm-reader/venv}"
PROJECT_PY="${INGEST_PROJECT_PYTHON:-$ROOT/.venv/bin/python}"
PYSPARK_PIN="pyspark==3.5.7"
SQLITE_DEB="libxerial-sqlite-jdbc-java"
stamp="$VENV/.jvm-reader-installed"

missing() { echo "jvm-reader-env: missing $*" >&2; exit 1; }

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
pins="$PYSPARK_PIN"
if [ "$(cat "$stamp" 2>/dev/null)" != "$pins" ] || [ ! -x "$VENV/bin/python" ]; then
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
    "$PYSPARK_PIN" >"$log" 2>&1; then
    last="$(grep -E 'ERROR|Error' "$log" | tail -n1 | cut -c1-200)"
    missing "$PYSPARK_PIN: pip install failed (PyPI unreachable?): ${last:-see $log}"
  fi
  echo "$pins" >"$stamp"
fi

# The readers' jars, from the project's one JVM manifest (fetched once, then reused).
[ -x "$PROJECT_PY" ] || missing "the project's Python $PROJECT_PY (run scripts/bootstrap.sh)"
jars="$(cd "$ROOT" && "$PROJECT_PY" -m pipeline.jvm fetch jvm-reader 2>&1)" \
  || missing "the jvm-reader jars: ${jars##*error: }"
dir="${jars##*jvm-reader in }"
iceberg_jar="$(find "$dir" -name 'iceberg-spark-runtime-3.5_2.12-*.jar' -print -quit)"
hudi_jar="$(find "$dir" -name 'hudi-spark3.5-bundle_2.12-*.jar' -print -quit)"
[ -n "$iceberg_jar" ] && [ -n "$hudi_jar" ] || missing "the reader jars in $dir"
# Hadoop's S3A and the AWS SDK modules it calls (the rest of their dependencies are Spark's)
s3_jars="$(find "$dir" \( -name 'hadoop-aws-*.jar' -o -name 'aws-java-sdk-*.jar' \
  -o -name 'jmespath-java-*.jar' -o -name 'ion-java-*.jar' -o -name 'jackson-dataformat-cbor-*.jar' \
  -o -name 'wildfly-openssl-*.jar' \) | sort | paste -sd, -)"
case "$s3_jars" in *hadoop-aws-*aws-java-sdk-s3-* | *aws-java-sdk-s3-*hadoop-aws-*) ;;
  *) missing "hadoop-aws and aws-java-sdk-s3 in $dir" ;;
esac
echo "python=$VENV/bin/python"
echo "iceberg_jar=$iceberg_jar"
echo "hudi_jar=$hudi_jar"
echo "sqlite_jdbc_jar=$sqlite_jar"
echo "s3_jars=$s3_jars"
