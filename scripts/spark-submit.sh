#!/usr/bin/env bash
# spark-submit the ingest pipeline to an existing Spark cluster. Thin: it only assembles the
# spark-submit command line (print it with --dry-run) — docs/deploy.md explains each mode.
#
#   scripts/spark-submit.sh MODE --config FILE [options] [-- ingest options…]
#
# MODE         where the driver runs          how the code gets there
#   local        here, --master local[*]        --py-files dist/spark/pipeline.zip
#   standalone   here (client mode; Spark has   --py-files zip; dependencies installed on the
#                no cluster mode for Python     workers or --env-archive
#                on standalone), --master spark://HOST:7077
#   yarn         in YARN (--deploy-mode cluster, default) or here (client)
#                                              --py-files zip (+ --env-archive); the config
#                                              is shipped with --files in cluster mode
#   k8s-cluster  in a driver pod created by spark-submit, --master k8s://https://API
#                                              the image (--image) has the package; the config
#                                              is local:///path in the image / a mounted
#                                              volume, or uploaded via --upload-path
#   k8s-client   here; executors are pods of --image; this host must be reachable from the
#                pods (--conf spark.driver.host=…); the Helm chart is this mode in a pod
#
# Options:
#   --config FILE            pipeline YAML (required); local:///… = a path inside the image
#   --master URL             override the mode's master (e.g. local[2] to try a mode locally)
#   --deploy-mode MODE       yarn: cluster (default) | client
#   --image IMAGE            k8s: the ingest image (driver in cluster mode, executors)
#   --namespace NS           k8s: namespace (default: default)
#   --service-account NAME   k8s-cluster: the driver pod's ServiceAccount (may create pods)
#   --upload-path URI        k8s-cluster: where spark-submit uploads a local --config
#                            (spark.kubernetes.file.upload.path, e.g. s3a://bucket/uploads)
#   --env-archive FILE       a packed Python environment (venv-pack / conda-pack .tar.gz) for
#                            executors (and a YARN cluster driver): --archives FILE#environment
#   --properties-file FILE   Spark settings (default conf/spark-defaults.conf; k8s modes
#                            add conf/spark-defaults.k8s.conf)
#   --conf KEY=VALUE         passed to spark-submit (repeatable)
#   --dry-run                print the command (one argument per line) instead of running it
# Everything after `--` goes to the pipeline (e.g. --set source.maxRecordsPerTrigger=100000).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

die() { echo "spark-submit.sh: $*" >&2; exit 2; }
usage() { sed -n '2,41p' "$0"; exit "${1:-0}"; }

[ $# -ge 1 ] || usage 2
MODE="$1"; shift
case "$MODE" in
  local|standalone|yarn|k8s-cluster|k8s-client) ;;
  -h|--help) usage 0 ;;
  *) die "unknown mode '$MODE' (local, standalone, yarn, k8s-cluster, k8s-client)" ;;
esac

config="" master="" deploy_mode="" image="" namespace="default" service_account=""
upload_path="" env_archive="" properties="" dry_run=0
confs=() app_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --config) config="${2:?}"; shift ;;
    --master) master="${2:?}"; shift ;;
    --deploy-mode) deploy_mode="${2:?}"; shift ;;
    --image) image="${2:?}"; shift ;;
    --namespace) namespace="${2:?}"; shift ;;
    --service-account) service_account="${2:?}"; shift ;;
    --upload-path) upload_path="${2:?}"; shift ;;
    --env-archive) env_archive="${2:?}"; shift ;;
    --properties-file) properties="${2:?}"; shift ;;
    --conf) confs+=(--conf "${2:?}"); shift ;;
    --dry-run) dry_run=1 ;;
    -h|--help) usage 0 ;;
    --) shift; app_args=("$@"); break ;;
    *) die "unknown option $1 (pipeline options go after --)" ;;
  esac
  shift
done
[ -n "$config" ] || die "--config FILE is required"

case "$MODE" in
  local) master="${master:-local[*]}"; deploy_mode=client ;;
  standalone) [ -n "$master" ] || die "standalone needs --master spark://HOST:PORT"; deploy_mode=client ;;
  yarn) master="${master:-yarn}"; deploy_mode="${deploy_mode:-cluster}" ;;
  k8s-cluster|k8s-client)
    [ -n "$master" ] || die "$MODE needs --master k8s://https://API-SERVER:PORT"
    [ -n "$image" ] || die "$MODE needs --image (the ingest image; see Dockerfile)"
    deploy_mode="${MODE#k8s-}" ;;
esac
case "$deploy_mode" in cluster|client) ;; *) die "--deploy-mode must be cluster or client" ;; esac

# Spark settings: the project's defaults, plus the Kubernetes ones for k8s modes.
properties="${properties:-$ROOT/conf/spark-defaults.conf}"
[ -f "$properties" ] || die "properties file $properties not found"
if [[ "$MODE" == k8s-* ]]; then
  merged="$(mktemp "${TMPDIR:-/tmp}/ingest-spark-defaults.XXXXXX")"
  trap 'rm -f "$merged"' EXIT
  cat "$properties" "$ROOT/conf/spark-defaults.k8s.conf" >"$merged"
  properties="$merged"
fi

SUBMIT="${SPARK_SUBMIT:-}"
if [ -z "$SUBMIT" ]; then
  if [ -n "${SPARK_HOME:-}" ]; then SUBMIT="$SPARK_HOME/bin/spark-submit"
  elif command -v spark-submit >/dev/null; then SUBMIT="$(command -v spark-submit)"
  else SUBMIT="$ROOT/.venv/bin/spark-submit"; fi
fi

# pyspark's pip-installed spark-submit finds SPARK_HOME through a Python that has pyspark;
# the driver of a local/client-mode job runs on that Python too unless told otherwise.
if [ -z "${SPARK_HOME:-}" ]; then
  for py in "$(dirname "$SUBMIT")/python" "$ROOT/.venv/bin/python" python3; do
    if home="$("$py" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))' 2>/dev/null)"; then
      export SPARK_HOME="$home"
      if [ "$deploy_mode" = client ] && [ -z "${PYSPARK_DRIVER_PYTHON:-}" ]; then
        PYSPARK_DRIVER_PYTHON="$(command -v "$py")"
        export PYSPARK_DRIVER_PYTHON
      fi
      break
    fi
  done
fi

cmd=("$SUBMIT" --master "$master" --deploy-mode "$deploy_mode" --name "ingest"
     --properties-file "$properties")
if [ "$deploy_mode" = client ]; then
  # the driver runs here: the project's log4j2 settings (warnings and errors, one line each)
  cmd+=(--driver-java-options "-Dlog4j2.configurationFile=file:$ROOT/conf/log4j2.properties")
fi
if [[ "$master" == local* ]] && [ -z "${SPARK_LOCAL_IP:-}" ]; then
  export SPARK_LOCAL_IP=127.0.0.1  # no interface guessing for a local run
fi

# The code: the image (k8s) or the zip of the package next to the launcher.
if [[ "$MODE" == k8s-* ]]; then
  cmd+=(--conf "spark.kubernetes.container.image=$image"
        --conf "spark.kubernetes.namespace=$namespace")
  if [ "$MODE" = k8s-cluster ]; then
    [ -z "$service_account" ] ||
      cmd+=(--conf "spark.kubernetes.authenticate.driver.serviceAccountName=$service_account")
    app="local:///opt/ingest/app/ingest_submit.py"
  else
    zip="$ROOT/dist/spark/pipeline.zip"
    app="$ROOT/scripts/ingest_submit.py"
  fi
else
  zip="$ROOT/dist/spark/pipeline.zip"
  # (re)build the zip when any source file is newer
  if [ ! -f "$zip" ] || [ -n "$(find "$ROOT/pipeline" -newer "$zip" -type f -not -name '*.pyc' -print -quit)" ]; then
    if [ "$dry_run" = 1 ]; then echo "(would build $zip)" >&2
    else bash "$ROOT/scripts/build-pyfiles.sh" >&2; fi
  fi
  cmd+=(--py-files "$zip")
  app="$ROOT/dist/spark/ingest_submit.py"
fi

# Spark's Kafka source (source.reader spark) for the driver's PySpark line, from the
# project's Maven manifest (fetched once): the driver JVM starts with it on its class path.
# The image carries its own (k8s modes).
if [[ "$MODE" != k8s-* ]]; then
  jar_py="${PYSPARK_DRIVER_PYTHON:-$ROOT/.venv/bin/python}"
  if [ "$dry_run" = 1 ] && [ ! -x "$jar_py" ]; then jars="(Spark's Kafka source jars)"
  else jars="$(cd "$ROOT" && "$jar_py" -m pipeline.source.spark_kafka jars)" \
    || die "cannot fetch Spark's Kafka source jars (source.reader spark)"; fi
  cmd+=(--jars "$jars")
fi

# The pipeline config: a path for the driver to read.
if [[ "$config" == local://* ]]; then
  config_arg="${config#local://}"
elif [ "$deploy_mode" = cluster ]; then
  [ -f "$config" ] || die "config $config not found"
  if [ "$MODE" = k8s-cluster ]; then
    [ -n "$upload_path" ] || die "k8s-cluster: give --config local:///path/in/the/image (or a mounted volume), or --upload-path URI to upload $config"
    cmd+=(--conf "spark.kubernetes.file.upload.path=$upload_path")
  fi
  # shipped with the job; YARN and Spark on Kubernetes put it in the driver's working dir
  cmd+=(--files "$(cd "$(dirname "$config")" && pwd)/$(basename "$config")")
  config_arg="$(basename "$config")"
else
  [ -f "$config" ] || die "config $config not found"
  config_arg="$(cd "$(dirname "$config")" && pwd)/$(basename "$config")"
fi

if [ -n "$env_archive" ]; then
  cmd+=(--archives "$env_archive#environment"
        --conf spark.pyspark.python=./environment/bin/python)
  if [ "$MODE" = yarn ] && [ "$deploy_mode" = cluster ]; then
    cmd+=(--conf spark.yarn.appMasterEnv.PYSPARK_PYTHON=./environment/bin/python)
  fi
fi

cmd+=("${confs[@]}" "$app" --config "$config_arg" "${app_args[@]}")
if [ "$dry_run" = 1 ]; then printf '%s\n' "${cmd[@]}"; exit 0; fi
exec "${cmd[@]}"
