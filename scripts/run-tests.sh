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
echo "== ruff" && ruff check pipeline tests
echo "== mypy" && mypy pipeline
echo "== pytest"
exec python -m pytest "$@"
