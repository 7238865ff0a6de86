#!/bin/bash
# Entry point of the ingest container image (installed as /opt/ingest/bin/entrypoint, run
# under tini). It dispatches on the first argument:
#
#   (anything else)     ingest "$@"         e.g. `run --config /etc/ingest/pipeline.yaml`,
#                                           `demo`, `status --config …`, `--help`
#   executor            a Spark executor, the way Spark on Kubernetes starts executor pods
#                       (container args "executor"; SPARK_* variables set by the driver)
#   driver ARGS…        a Spark driver pod of `spark-submit --deploy-mode cluster` on
#                       Kubernetes: spark-submit in client mode inside the pod
#   spark-submit ARGS…  spark-submit as is
#
# INGEST_ENTRYPOINT_DRY_RUN=1 prints the command (one argument per line) instead of running it.
set -euo pipefail

run() {
  if [ "${INGEST_ENTRYPOINT_DRY_RUN:-}" = 1 ]; then
    printf '%s\n' "$@"
    exit 0
  fi
  exec "$@"
}

need() {
  local missing=()
  for v in "$@"; do [ -n "${!v:-}" ] || missing+=("$v"); done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "entrypoint: $ROLE needs the environment variable(s) ${missing[*]} (set by Spark on Kubernetes)" >&2
    exit 2
  fi
}

SPARK_HOME="${SPARK_HOME:-$(find_spark_home.py 2>/dev/null || true)}"
ROLE="${1:-}"
case "$ROLE" in
  executor)
    shift
    need SPARK_HOME SPARK_DRIVER_URL SPARK_EXECUTOR_ID SPARK_EXECUTOR_CORES \
      SPARK_EXECUTOR_MEMORY SPARK_APPLICATION_ID SPARK_EXECUTOR_POD_IP
    # JVM options arrive as SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, … in that order.
    java_opts=()
    i=0
    while name="SPARK_JAVA_OPT_$i" && [ -n "${!name+x}" ]; do
      java_opts+=("${!name}")
      i=$((i + 1))
    done
    classpath="$SPARK_HOME/jars/*"
    if [ -n "${SPARK_CLASSPATH:-}" ]; then classpath="$SPARK_CLASSPATH:$classpath"; fi
    if [ -n "${SPARK_EXTRA_CLASSPATH:-}" ]; then classpath="$classpath:$SPARK_EXTRA_CLASSPATH"; fi
    run "${JAVA_HOME:+$JAVA_HOME/bin/}java" "${java_opts[@]}" \
      "-Xms$SPARK_EXECUTOR_MEMORY" "-Xmx$SPARK_EXECUTOR_MEMORY" \
      -cp "$classpath" \
      org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
      --driver-url "$SPARK_DRIVER_URL" \
      --executor-id "$SPARK_EXECUTOR_ID" \
      --cores "$SPARK_EXECUTOR_CORES" \
      --app-id "$SPARK_APPLICATION_ID" \
      --hostname "$SPARK_EXECUTOR_POD_IP" \
      --resourceProfileId "${SPARK_RESOURCE_PROFILE_ID:-0}" \
      --podName "${SPARK_EXECUTOR_POD_NAME:-$(hostname)}"
    ;;
  driver)
    shift
    need SPARK_HOME SPARK_DRIVER_BIND_ADDRESS
    run "$SPARK_HOME/bin/spark-submit" \
      --conf "spark.driver.bindAddress=$SPARK_DRIVER_BIND_ADDRESS" \
      --conf "spark.executorEnv.SPARK_DRIVER_POD_IP=$SPARK_DRIVER_BIND_ADDRESS" \
      --deploy-mode client "$@"
    ;;
  spark-submit)
    shift
    need SPARK_HOME
    run "$SPARK_HOME/bin/spark-submit" "$@"
    ;;
  *)
    run ingest "$@"
    ;;
esac
