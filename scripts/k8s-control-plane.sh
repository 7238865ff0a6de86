#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for chart drills: etcd + kube-apiserver
# (+ kube-controller-manager and kube-scheduler when built), all built here from the Go
# module proxy (the only place binaries can come from on hosts without GitHub or a
# container registry); optionally one real node (kubelet + Debian's containerd and runc).
#
#   scripts/k8s-control-plane.sh build [component…]  build what is missing (once) into
#                                   .tools/k8s/<version>/bin; components: kube-apiserver
#                                   etcd kube-controller-manager kube-scheduler kubelet
#                                   (default all)
#   scripts/k8s-control-plane.sh start   certificates, then etcd, the apiserver, and the
#                                   controller-manager/scheduler if built; waits for /readyz
#   scripts/k8s-control-plane.sh node    after start: containerd (own config and socket under
#                                   .tools/k8s/run), a pause image of our own, the kubelet
#                                   as node drill-node; pods on a CNI bridge (10.244.0.0/24)
#   scripts/k8s-control-plane.sh node stop   kubelet, every container, containerd
#   scripts/k8s-control-plane.sh import IMAGE…  podman's images into containerd (k8s.io)
#   scripts/k8s-control-plane.sh stop    stop everything started (pid files), keep the data
#   scripts/k8s-control-plane.sh env     print `export KUBECONFIG=… PATH=…` for a shell
#   scripts/k8s-control-plane.sh clean   stop, delete the run state and the Go caches
#                                   (the built binaries stay)
#
# Needs Go (K8S_GO, default /usr/local/go/bin/go), openssl and curl. .tools/ is git-ignored.
# `node` needs root and Debian's containerd, runc, containernetworking-plugins and podman.
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
# the apiserver listens on loopback; `node` needs pods to reach it (Spark's executor pods):
# K8S_API_BIND=<this host's IP> (then also in the serving certificate; set before the first start)
API_BIND="${K8S_API_BIND:-127.0.0.1}"
NODE_NAME="${K8S_NODE_NAME:-drill-node}"
POD_CIDR="${K8S_POD_CIDR:-10.244.0.0/24}"
PAUSE_IMAGE="localhost/drill-pause:1"
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
    kube-apiserver | kube-controller-manager | kube-scheduler | kubelet) pkg="k8s.io/kubernetes/cmd/$c" ;;
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

issue() {  # issue NAME SUBJECT [SAN]: a certificate from the drill CA into RUN/pki
  local ext d="$RUN/pki"
  ext="$(mktemp)"
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n' >"$ext"
  [ -n "${3:-}" ] && echo "subjectAltName=$3" >>"$ext"
  openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$d/$1.key" -out "$d/$1.csr" 2>/dev/null
  openssl x509 -req -in "$d/$1.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -days 30 -extfile "$ext" -out "$d/$1.crt" 2>/dev/null
  rm -f "$ext" "$d/$1.csr"
}

certs() {  # a CA, the apiserver's serving cert, an admin client cert, the service-account key
  local d="$RUN/pki"
  [ -f "$d/admin.crt" ] && return 0
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=drill-ca" \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  issue apiserver "/CN=kube-apiserver" \
    "IP:127.0.0.1,IP:$API_BIND,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
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
  cluster: {server: "https://$API_BIND:$API_PORT", certificate-authority: "$d/ca.crt"}
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
  local exe="$BIN/$name"
  [ -x "$exe" ] || exe="$(command -v "$name")"   # containerd: the Debian package's
  "$exe" "$@" >"$RUN/$name.log" 2>&1 &
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
    --bind-address "$API_BIND" --secure-port "$API_PORT" --advertise-address "$API_BIND" \
    --kubelet-client-certificate "$d/admin.crt" --kubelet-client-key "$d/admin.key" \
    --kubelet-preferred-address-types InternalIP \
    --tls-cert-file "$d/apiserver.crt" --tls-private-key-file "$d/apiserver.key" \
    --client-ca-file "$d/ca.crt" --authorization-mode RBAC \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$d/sa.pub" --service-account-signing-key-file "$d/sa.key" \
    --service-cluster-ip-range 10.0.0.0/24 --endpoint-reconciler-type none
  wait_http kube-apiserver "https://$API_BIND:$API_PORT/readyz" 120 \
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

# --- node: containerd (Debian package) + runc + the kubelet, pods on a CNI bridge --------
# Needs root, cgroups (v1 or v2), containerd, runc and containernetworking-plugins (Debian).
CTRD="$RUN/containerd"
ctr_() { ctr --address "$CTRD/containerd.sock" -n k8s.io "$@"; }

node_ip() { ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p'; }

pause_image() {  # a pause image of our own (no registry): a static Go binary that sleeps
  ctr_ images ls -q | grep -qxF "$PAUSE_IMAGE" && return 0
  local dir="$RUN/pause-image"
  mkdir -p "$dir"
  cat >"$dir/main.go" <<'EOF'
package main

import (
	"os"
	"os/signal"
	"syscall"
)

// The pod sandbox's process: holds the namespaces until the kubelet stops the sandbox.
func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	<-c
}
EOF
  printf 'module local.invalid/pause\ngo 1.22\n' >"$dir/go.mod"
  ( cd "$dir" && GOTOOLCHAIN=local CGO_ENABLED=0 GOCACHE="$BUILD/gocache" \
      "$GO" build -trimpath -ldflags "-s -w" -o pause . )
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$dir/Containerfile"
  podman build -q --pull=never -t "$PAUSE_IMAGE" -f "$dir/Containerfile" "$dir" >/dev/null
  podman save "$PAUSE_IMAGE" | ctr_ images import - >/dev/null
}

image_import() {  # image_import IMAGE…: podman's store → containerd's k8s.io namespace
  local i
  for i in "$@"; do
    ctr_ images ls -q | grep -qxF "$i" && { log "$i already in containerd"; continue; }
    log "importing $i into containerd …"
    podman save "$i" | ctr_ images import - >/dev/null
  done
}

node_start() {
  local d="$RUN/pki" ip t0 i
  [ -x "$BIN/kubelet" ] || { log "kubelet not built: run $0 build kubelet"; exit 2; }
  running kube-apiserver || { log "start the control plane first ($0 start)"; exit 2; }
  ip="${K8S_NODE_IP:-$(node_ip)}"
  mkdir -p "$CTRD" "$RUN/cni/net.d" "$RUN/kubelet"
  # host_leftovers cleans fixed host paths and iptables chains only after a node of ours
  # (a host running a kubelet of its own must keep its own)
  if pgrep -x kubelet >/dev/null && ! running kubelet; then
    log "another kubelet runs on this host: not starting a second node here"; exit 2
  fi
  touch "$RUN/node.ours"
  t0=$(date +%s%N)
  cat >"$CTRD/config.toml" <<EOF
version = 2
root = "$CTRD/root"
state = "$CTRD/state"
[grpc]
  address = "$CTRD/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # the kubelet asks for negative oom_score_adj (sandboxes -998); lowering it needs
  # CAP_SYS_RESOURCE, which sandboxed hosts may not grant ("nsexec: failed to update
  # /proc/self/oom_score_adj: Permission denied"): clamp at containerd's own value instead
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$RUN/cni/net.d"
EOF
  # one bridge, pod IPs from POD_CIDR; no masquerade: pods reach this host's addresses only
  cat >"$RUN/cni/net.d/10-drill.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "drill", "plugins": [
  {"type": "bridge", "bridge": "cni-drill0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]],
            "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$RUN/cni/ipam"}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
  launch containerd --config "$CTRD/config.toml"
  for i in $(seq 100); do ctr_ version >/dev/null 2>&1 && break; sleep 0.2; done
  ctr_ version >/dev/null || { log "containerd not up:"; tail -20 "$RUN/containerd.log" >&2; return 1; }
  log "containerd up in $(since "$t0") s"
  pause_image
  # the kubelet's identity (group system:nodes) and its permissions (RBAC only, no Node
  # authorizer here: the built-in system:node role bound to the group)
  [ -f "$d/kubelet.crt" ] || issue kubelet "/O=system:nodes/CN=system:node:$NODE_NAME"
  KUBECONFIG="$KUBECONFIG_FILE" "$ROOT/.tools/bin/kubectl" create clusterrolebinding drill-nodes \
    --clusterrole system:node --group system:nodes --dry-run=client -o yaml |
    KUBECONFIG="$KUBECONFIG_FILE" "$ROOT/.tools/bin/kubectl" apply -f - >/dev/null
  sed -e "s#$d/admin#$d/kubelet#g" -e "s#drill-admin#$NODE_NAME#g" "$KUBECONFIG_FILE" >"$RUN/kubelet/kubeconfig"
  cat >"$RUN/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $ip
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $d/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$CTRD/containerd.sock
podCIDR: $POD_CIDR
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
podLogsDir: $RUN/kubelet/pod-logs
serializeImagePulls: false
evictionHard: {memory.available: 500Mi, nodefs.available: 5%, imagefs.available: 5%}
EOF
  t0=$(date +%s%N)
  launch kubelet --config "$RUN/kubelet/config.yaml" --kubeconfig "$RUN/kubelet/kubeconfig" \
    --root-dir "$RUN/kubelet/root" --cert-dir "$RUN/kubelet/pki" \
    --hostname-override "$NODE_NAME" --node-ip "$ip" --pod-infra-container-image "$PAUSE_IMAGE"
  for i in $(seq 300); do
    running kubelet || { log "kubelet exited:"; tail -30 "$RUN/kubelet.log" >&2; return 1; }
    KUBECONFIG="$KUBECONFIG_FILE" "$ROOT/.tools/bin/kubectl" get node "$NODE_NAME" \
      -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True && break
    sleep 0.5
  done
  log "node $NODE_NAME ($ip): $(KUBECONFIG="$KUBECONFIG_FILE" "$ROOT/.tools/bin/kubectl" get node "$NODE_NAME" --no-headers 2>&1) after $(since "$t0") s"
}

node_stop() {  # kubelet, then every container and sandbox, then containerd; mounts, bridge
  local pid i t
  for c in kubelet; do
    running "$c" || continue
    pid="$(cat "$RUN/$c.pid")"; kill "$pid"
    for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$RUN/$c.pid"; log "stopped $c ($pid)"
  done
  if running containerd; then
    for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
    sleep 1
    for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$t" >/dev/null 2>&1 || true; done
    for t in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers delete "$t" >/dev/null 2>&1 || true; done
    pid="$(cat "$RUN/containerd.pid")"; kill "$pid"
    for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$RUN/containerd.pid"; log "stopped containerd ($pid)"
  fi
  # leftovers: mounts under RUN (pod volumes, rootfs, sandbox shm), the pods' netns, bridge
  { grep -o " $RUN/[^ ]*" /proc/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  for i in $(ip netns list 2>/dev/null | awk '/^cni-/{print $1}'); do ip netns delete "$i" 2>/dev/null || true; done
  ip link delete cni-drill0 2>/dev/null || true
  if ! running kubelet && [ -f "$RUN/node.ours" ]; then host_leftovers; rm -f "$RUN/node.ours"; fi
}

host_leftovers() {  # what the kubelet, containerd and CNI leave outside RUN, when empty/ours
  local ipt t
  # the kubelet's iptables chains (KUBE-FIREWALL drops non-loopback → loopback traffic)
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    "$ipt" -D INPUT -j KUBE-FIREWALL 2>/dev/null || true
    "$ipt" -D OUTPUT -j KUBE-FIREWALL 2>/dev/null || true
    for t in filter nat mangle; do
      for c in KUBE-FIREWALL KUBE-KUBELET-CANARY KUBE-IPTABLES-HINT; do
        "$ipt" -t "$t" -F "$c" 2>/dev/null && "$ipt" -t "$t" -X "$c" 2>/dev/null || true
      done
    done
  done
  # fixed paths: the device-plugin socket, libcni's cache, runc's state root (empty dirs only)
  rm -f /var/lib/kubelet/device-plugins/kubelet.sock
  rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet /var/lib/cni/results /var/lib/cni \
    /run/containerd/runc/k8s.io /run/containerd/runc /run/containerd/fifo /run/containerd/s \
    /run/containerd 2>/dev/null || true
}

stop() {  # the node (if started), then the control plane in reverse order; SIGTERM, then SIGKILL after 20 s
  local c pid i
  node_stop
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
  node) if [ "${2:-}" = stop ]; then node_stop; else node_start; fi ;;
  import) shift; image_import "$@" ;;
  stop) stop ;;
  env) cmd_env ;;
  clean)
    stop
    # containerd's snapshots hold read-only directories; pod volumes may be owned by others
    [ -d "$RUN" ] && { chmod -R u+w "$RUN" 2>/dev/null || true; rm -rf "$RUN"; }
    rm -f "$KUBECONFIG_FILE"
    # the module cache is read-only by design; `go clean -modcache` knows how to remove it
    [ -d "$BUILD/gomod" ] && GOMODCACHE="$BUILD/gomod" "$GO" clean -modcache
    rm -rf "$BUILD"
    ;;
  *) sed -n '2,24p' "$0" >&2; exit 2 ;;
esac
