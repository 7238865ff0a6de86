#!/usr/bin/env bash
# System packages the test suite uses for real external parts (installed when missing and
# running as root; otherwise the tests that need them skip and name the package):
#   prometheus, promtool  - Debian "prometheus" (real Prometheus server, rule/metric checks)
#   podman/buildah/debootstrap/runc - image build test (tests/integration/deploy/test_deploy_image.py)
set -euo pipefail
[ "$(id -u)" = 0 ] || { echo "test-deps: not root, skipping system packages" >&2; exit 0; }
command -v apt-get >/dev/null 2>&1 || { echo "test-deps: no apt-get, skipping" >&2; exit 0; }
want=()
command -v promtool >/dev/null 2>&1 || want+=(prometheus)
for extra in ${INGEST_TEST_APT_EXTRA:-}; do
  dpkg -s "$extra" >/dev/null 2>&1 || want+=("$extra")
done
if [ "${#want[@]}" -gt 0 ]; then
  echo "test-deps: installing ${want[*]}" >&2
  if [ ! -f /tmp/.ingest-apt-updated ]; then apt-get update -qq && touch /tmp/.ingest-apt-updated; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null \
    || echo "test-deps: could not install ${want[*]} (tests needing them will skip)" >&2
fi
