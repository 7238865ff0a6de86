#!/usr/bin/env bash
# One command: set up, start an embedded Kafka broker, generate events, ingest them into
# a local Iceberg lake (./demo-lake) with a progress display, and check exactly-once.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bootstrap.sh
source "$ROOT/scripts/bootstrap.sh"
cd "$ROOT"
exec ingest demo "$@"
