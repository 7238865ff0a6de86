# Sourced by this directory's drill scripts before anything runs: a drill finds its tools
# and the control plane, or stops with one line naming what is missing and what provides
# it (without them every command would only record "[exit 127]" in the transcripts).

need() {  # need TOOL WHAT-PROVIDES-IT
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "$(basename "$0"): $1 not found: $2" >&2
  exit 1
}

need_chart_tools() {  # helm and kubectl, which every drill here drives
  need helm "scripts/tools.sh installs it (with kubectl) into .tools/bin"
  need kubectl "scripts/tools.sh installs it (with helm) into .tools/bin"
}

serving() {  # the API server of KUBECONFIG answers
  kubectl get --raw /readyz >/dev/null 2>&1 && return 0
  echo "$(basename "$0"): no API server answers (KUBECONFIG=${KUBECONFIG:-}): scripts/k8s-control-plane.sh start starts one" >&2
  exit 1
}
