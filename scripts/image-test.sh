#!/usr/bin/env bash
# Build the Dockerfile with podman on a locally made Debian bookworm base, without any
# container registry (used by tests/integration/deploy/test_deploy_image.py; handy by hand too).
#
#   scripts/image-test.sh base            make/import the base image, print its name
#   scripts/image-test.sh build [TAG]     build the image (default tag below), print TAG
#   scripts/image-test.sh run ARGS…       podman run --rm TAG ARGS… with the settings below
#
# The base is `debootstrap --variant=minbase bookworm`, imported as $INGEST_BASE_IMAGE and
# passed to the build as BASE_IMAGE. Its tarball is cached in $INGEST_IMAGE_CACHE
# (default /var/tmp/ingest-image-cache), so only the first run downloads Debian packages.
# Podman runs with runc, cgroupfs and low default ulimits (a CONTAINERS_CONF file written
# to the cache directory unless CONTAINERS_CONF is set); RUN steps use the host network.
# Needs root, podman, runc and debootstrap (Debian: apt-get install podman runc debootstrap).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${INGEST_IMAGE_CACHE:-/var/tmp/ingest-image-cache}"
BASE="${INGEST_BASE_IMAGE:-localhost/ingest-test-base:bookworm}"
TAG_DEFAULT="${INGEST_IMAGE:-localhost/kafka-lakehouse-ingest:test}"
MIRROR="${INGEST_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

die() { echo "image-test: $*" >&2; exit 1; }
for tool in podman runc; do
  command -v "$tool" >/dev/null || die "$tool not found (Debian: apt-get install -y podman runc debootstrap)"
done
mkdir -p "$CACHE"
if [ -z "${CONTAINERS_CONF:-}" ]; then
  export CONTAINERS_CONF="$CACHE/containers.conf"
  cat >"$CONTAINERS_CONF" <<'EOF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
fi

base() {
  if podman image exists "$BASE"; then echo "$BASE"; return; fi
  local tarball="$CACHE/bookworm-minbase.tar"
  if [ ! -s "$tarball" ]; then
    command -v debootstrap >/dev/null || die "debootstrap not found (Debian: apt-get install -y debootstrap)"
    [ "$(id -u)" = 0 ] || die "debootstrap needs root"
    local dir="$CACHE/rootfs.$$"
    rm -rf "$dir"
    echo "image-test: debootstrap --variant=minbase bookworm (once; cached in $tarball)" >&2
    debootstrap --variant=minbase bookworm "$dir" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
      || die "debootstrap failed, see $CACHE/debootstrap.log"
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
    tar -C "$dir" --numeric-owner -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$dir"
  fi
  podman import "$tarball" "$BASE" >/dev/null
  echo "$BASE"
}

build() {
  local tag="${1:-$TAG_DEFAULT}"
  base >/dev/null
  local args=(--format docker --network host --pull=never --layers
              --build-arg "BASE_IMAGE=$BASE" -t "$tag")
  # Behind a TLS-intercepting proxy pip needs the host's CA bundle (build stage only).
  local ca="${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}"
  if [ -f "$ca" ]; then
    args+=(--volume "$ca:/run/host-ca.crt:ro" --build-arg PIP_CERT=/run/host-ca.crt)
  fi
  if [ -n "${INGEST_EXTRA_JARS:-}" ]; then args+=(--build-arg "EXTRA_JARS=$INGEST_EXTRA_JARS"); fi
  # the Spark line (INGEST_PYSPARK_VERSION, e.g. 3.5.7; default: the newest)
  if [ -n "${INGEST_PYSPARK_VERSION:-}" ]; then
    args+=(--build-arg "PYSPARK_VERSION=$INGEST_PYSPARK_VERSION")
  fi
  # the image copies .jvm/ (Spark's Kafka source for each Spark line, fetched once by the
  # host's Maven; the broker's jars, the lab's, stay out: .dockerignore)
  (cd "$ROOT" && python3 -m pipeline.jvm fetch spark-kafka-3.5 spark-kafka-4.2 >&2) \
    || die "cannot fetch the JVM jars"
  podman build "${args[@]}" -f "$ROOT/Dockerfile" "$ROOT" >&2
  echo "$tag"
}

cmd="${1:-}"
shift || true
case "$cmd" in
  base) base ;;
  build) build "$@" ;;
  run) exec podman run --rm --network none "$TAG_DEFAULT" "$@" ;;
  *) die "usage: $0 base | build [TAG] | run ARGS…" ;;
esac
