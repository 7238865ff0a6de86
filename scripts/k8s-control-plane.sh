#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for chart drills (no kubelet, no nodes):
# etcd + kube-apiserver (+ kube-controller-manager and kube-scheduler when built), all
# built here from the Go module proxy (the only place binaries can come from on hosts
# without GitHub or a container registry).
#
#   scripts/k8s-control-plane.sh build [component…]  build what is missing (once) into
#                                   .tools/k8s/<version>/bin; components: kube-apiserver
#                                   etcd kube-controller-manager kube-scheduler (default all)
#   scripts/k8s-control-plane.sh start   certificates, then etcd, the apiserver, and the
#                                   controller-manager/scheduler if built; waits for /readyz
#   scripts/k8s-control-plane.sh stop    stop everything started (pid files), keep the data
#   scripts/k8s-control-plane.sh env     print `export KUBECONFIG=… PATH=…` for a shell
#   scripts/k8s-control-plane.sh clean   stop, delete the run state and the Go caches
#                                   (the built binaries stay)
#
# Needs Go (K8S_GO, default /usr/local/go/bin/go), openssl and curl. .tools/ is git-ignored.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
K8S_VERSION="${K8S_VERSION:-v1.34.4}"     # kubectl in .tools/bin is 1.34 (scripts/tools.sh)
ETCD_VERSION="${ETCD_VERSION:-v3.6.4}"    # the etcd server version k8s 1.34's go.mod pins
GO="${K8S_GO:-/usr/local/go/bin/go}"
BIN="$ROOT/.tools/k8s/$K8S_VERSION/bin"
BUILD="$ROOT/.tools/k8s-build"            # wrapper module + Go caches (deleted by `clean`)
RUN="$ROOT/.tools/k8s/run"                # certs, etcd data, logs, pid files
KUBECONFIG_FILE="$ROOT/.tools/k8s/kubeconfig"
ETCD_PORT="${K8S_ETCD_PORT:-23790}"
ETCD_PEER_PORT="${K8S_ETCD_PEER_PORT:-23800}"
API_PORT="${K8S_API_PORT:-16443}"
ALL=(kube-apiserver etcd kube-controller-manager kube-scheduler)
STAMP="kubernetes $K8S_VERSION etcd $ETCD_VERSION"

log() { echo "k8s: $*" >&2; }
since() { local ms=$(( ($(date +%s%N) - $1) / 1000000 )); printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100)); }

# k8s.io/kubernetes replaces its k8s.io/* staging modules with ./staging/… paths that its
# module zip does not contain, so it cannot be built with `go install …@version`. A wrapper
# module requires it and points each staging module at its published v0.Y.Z release.
wrapper() {
  local dir="$BUILD/$K8S_VERSION-etcd-$ETCD_VERSION" minor="v0.${K8S_VERSION#v1.}"
  [ -f "$dir/go.mod" ] && return 0
  mkdir -p "$dir/etcd"
  local mod
  mod="$(GOMODCACHE="$BUILD/gomod" "$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
    sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
  {
    echo "module local.invalid/k8s-build"
    echo "go 1.24.0"
    echo "require ("
    echo "  k8s.io/kubernetes $K8S_VERSION"
    echo "  go.etcd.io/etcd/server/v3 $ETCD_VERSION"
    echo ")"
    echo "replace ("
    sed -n 's#^\s*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*#  \1 => \1 '"$minor"'#p' "$mod"
    echo ")"
  } >"$dir/go.mod"
  # etcd's server module has no main package of its own (it lives in etcd's repository
  # root module): a two-line main that calls the same entry point.
  cat >"$dir/etcd/main.go" <<'EOF'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
}

build_one() {  # build_one COMPONENT: one static, stripped binary; its time goes to build-times
  local c="$1" pkg started
  case "$c" in
    etcd) pkg=./etcd ;;
    kube-apiserver | kube-controller-manager | kube-scheduler) pkg="k8s.io/kubernetes/cmd/$c" ;;
    *) log "unknown component $c"; return 2 ;;
  esac
  # the stamp names both versions: a changed ETCD_VERSION rebuilds (one module, shared deps)
  [ -x "$BIN/$c" ] && grep -qxF "$STAMP" "$BIN/../stamp" 2>/dev/null && return 0
  [ -f "$BIN/../stamp" ] && ! grep -qxF "$STAMP" "$BIN/../stamp" && rm -f "$BIN"/* "$BIN/../stamp"
  wrapper
  mkdir -p "$BIN"
  log "building $c ($K8S_VERSION, etcd $ETCD_VERSION) …"
  started=$SECONDS
  # version ldflags: the apiserver reports (and kubectl/helm check) a real version, not v0.0.0
  local v="k8s.io/component-base/version" x="k8s.io/client-go/pkg/version"
  local ld="-s -w -X $v.gitVersion=$K8S_VERSION -X $v.gitTreeState=clean -X $x.gitVersion=$K8S_VERSION"
  ( cd "$BUILD/$K8S_VERSION-etcd-$ETCD_VERSION" &&
    GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 GOCACHE="$BUILD/gocache" \
      GOMODCACHE="$BUILD/gomod" "$GO" build -trimpath -ldflags="$ld" -o "$BIN/$c.tmp" "$pkg" )
  mv "$BIN/$c.tmp" "$BIN/$c"
  echo "$c $((SECONDS - started))s $(date -u +%FT%TZ)" >>"$BIN/../build-times"
  printf '%s\n%s\n' "$STAMP" "$("$GO" env GOVERSION)" >"$BIN/../stamp"
  log "built $c in $((SECONDS - started)) s"
}

certs() {  # a CA, the apiserver's serving cert, an admin client cert, the service-account key
  local d="$RUN/pki"
  [ -f "$d/admin.crt" ] && return 0
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=drill-ca" \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  issue() {  # issue NAME SUBJECT [SAN]
    local ext
    ext="$(mktemp)"
    printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n' >"$ext"
    [ -n "${3:-}" ] && echo "subjectAltName=$3" >>"$ext"
    openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$d/$1.key" -out "$d/$1.csr" 2>/dev/null
    openssl x509 -req -in "$d/$1.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
      -days 30 -extfile "$ext" -out "$d/$1.crt" 2>/dev/null
    rm -f "$ext" "$d/$1.csr"
  }
  issue apiserver "/CN=kube-apiserver" \
    "IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
  # one client identity in system:masters for kubectl/helm and both controllers: the drill
  # tests what the API server admits, not the controllers' own RBAC
  issue admin "/O=system:masters/CN=drill-admin"
  openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
  openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
}

kubeconfig() {
  local d="$RUN/pki"
  cat >"$KUBECONFIG_FILE" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: drill
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$d/ca.crt"}
users:
- name: drill-admin
  user: {client-certificate: "$d/admin.crt", client-key: "$d/admin.key"}
contexts:
- name: drill
  context: {cluster: drill, user: drill-admin, namespace: default}
current-context: drill
EOF
}

running() { [ -f "$RUN/$1.pid" ] && kill -0 "$(cat "$RUN/$1.pid")" 2>/dev/null; }

launch() {  # launch NAME ARGS…: in the background, output to RUN/NAME.log, pid to RUN/NAME.pid
  local name="$1"; shift
  running "$name" && { log "$name already running"; return 0; }
  "$BIN/$name" "$@" >"$RUN/$name.log" 2>&1 &
  echo $! >"$RUN/$name.pid"
}

wait_http() {  # wait_http NAME URL SECONDS [curl args…]: until URL answers 200
  local name="$1" url="$2" limit="$3"; shift 3
  local deadline=$((SECONDS + limit))
  until curl -fsS -o /dev/null --max-time 2 "$@" "$url" 2>/dev/null; do
    running "$name" || { log "$name exited; last lines of $RUN/$name.log:"; tail -20 "$RUN/$name.log" >&2; return 1; }
    [ $SECONDS -lt $deadline ] || { log "$name not ready at $url after ${limit}s"; return 1; }
    sleep 0.2
  done
}

start() {
  local t0 d="$RUN/pki" started
  for c in kube-apiserver etcd; do
    [ -x "$BIN/$c" ] || { log "$c not built: run $0 build"; exit 2; }
  done
  mkdir -p "$RUN"
  certs
  kubeconfig
  t0=$(date +%s%N)
  launch etcd --name drill --data-dir "$RUN/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "drill=http://127.0.0.1:$ETCD_PEER_PORT"
  wait_http etcd "http://127.0.0.1:$ETCD_PORT/health" 60
  # --endpoint-reconciler-type=none: the `kubernetes` Service would get a loopback endpoint,
  # which validation refuses, and nothing in a cluster without nodes would use it anyway.
  launch kube-apiserver --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --secure-port "$API_PORT" --advertise-address 127.0.0.1 \
    --tls-cert-file "$d/apiserver.crt" --tls-private-key-file "$d/apiserver.key" \
    --client-ca-file "$d/ca.crt" --authorization-mode RBAC \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$d/sa.pub" --service-account-signing-key-file "$d/sa.key" \
    --service-cluster-ip-range 10.0.0.0/24 --endpoint-reconciler-type none
  wait_http kube-apiserver "https://127.0.0.1:$API_PORT/readyz" 120 \
    --cacert "$d/ca.crt" --cert "$d/admin.crt" --key "$d/admin.key"
  log "etcd + kube-apiserver ready in $(since "$t0") s"
  # the controllers serve HTTPS on a port of their own only for health/metrics, not needed here
  if [ -x "$BIN/kube-controller-manager" ]; then
    # service-account key + root CA: the token controller and the root-ca publisher work
    launch kube-controller-manager --kubeconfig "$KUBECONFIG_FILE" --leader-elect=false \
      --bind-address 127.0.0.1 --secure-port 0 --use-service-account-credentials=false \
      --service-account-private-key-file "$d/sa.key" --root-ca-file "$d/ca.crt" \
      --cluster-signing-cert-file "$d/ca.crt" --cluster-signing-key-file "$d/ca.key"
  fi
  if [ -x "$BIN/kube-scheduler" ]; then
    launch kube-scheduler --kubeconfig "$KUBECONFIG_FILE" --leader-elect=false \
      --bind-address 127.0.0.1 --secure-port 0
  fi
  sleep 1
  for c in kube-controller-manager kube-scheduler; do
    [ -f "$RUN/$c.pid" ] && ! running "$c" && { log "$c exited:"; tail -20 "$RUN/$c.log" >&2; return 1; }
  done
  log "control plane up in $(since "$t0") s; $(cmd_env | head -1)"
}

stop() {  # reverse order; SIGTERM, then SIGKILL after 20 s
  local c pid i
  for c in kube-scheduler kube-controller-manager kube-apiserver etcd; do
    [ -f "$RUN/$c.pid" ] || continue
    pid="$(cat "$RUN/$c.pid")"
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
      log "stopped $c ($pid)"
    fi
    rm -f "$RUN/$c.pid"
  done
}

cmd_env() {
  echo "export KUBECONFIG=$KUBECONFIG_FILE"
  echo "export PATH=$ROOT/.tools/bin:$BIN:\$PATH"
}

case "${1:-}" in
  build) shift; for c in "${@:-${ALL[@]}}"; do build_one "$c"; done ;;
  start) start ;;
  stop) stop ;;
  env) cmd_env ;;
  clean)
    stop
    rm -rf "$RUN" "$KUBECONFIG_FILE"
    # the module cache is read-only by design; `go clean -modcache` knows how to remove it
    [ -d "$BUILD/gomod" ] && GOMODCACHE="$BUILD/gomod" "$GO" clean -modcache
    rm -rf "$BUILD"
    ;;
  *) sed -n '2,16p' "$0" >&2; exit 2 ;;
esac
