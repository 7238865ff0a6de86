# Sourced by this directory's drill scripts (ROOT and WORK set): helm's state in WORK, and
# transcripts, one file per phase in OUT, each command echoed with its exit status.
# helm's own state in a throw-away home: a drill must not touch the user's helm config
export HELM_CACHE_HOME="$WORK/helm/cache" HELM_CONFIG_HOME="$WORK/helm/config" HELM_DATA_HOME="$WORK/helm/data"
T=/dev/null

run() {  # run CMD…: echo it into the transcript, run it, record the exit status
  echo "\$ $*" | sed "s#$ROOT/##g" | tee -a "$T"
  "$@" 2>&1 | sed "s#$ROOT/##g" | tee -a "$T"
  local rc=${PIPESTATUS[0]}
  echo "[exit $rc]" | tee -a "$T"; echo | tee -a "$T"
  return "$rc"
}
phase() { T="$OUT/$1.txt"; : >"$T"; echo "# $2 ($(date -u +%FT%TZ))" | tee -a "$T"; echo >>"$T"; }
