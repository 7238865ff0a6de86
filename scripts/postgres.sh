#!/usr/bin/env bash
# PostgreSQL for the catalog tests: installs Debian's postgresql when missing (as root),
# then creates and starts a cluster of the project's own ("ingest", port 54329, trust
# authentication on 127.0.0.1 only, database "test") without touching any other cluster.
# Prints the libpq URI of that database; run-tests.sh captures it with $(...).
set -euo pipefail
# Only the URI goes to stdout (the caller captures it); everything the tools print goes
# to stderr (pg_ctlcluster prints "Removed stale pid file." after an unclean stop).
exec 3>&1 1>&2
PORT="${INGEST_PG_PORT:-54329}"
NAME="${INGEST_PG_CLUSTER:-ingest}"
if ! command -v pg_createcluster >/dev/null 2>&1 || [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then
  [ "$(id -u)" = 0 ] || { echo "postgres: PostgreSQL is not installed (apt-get install postgresql, as root)" >&2; exit 1; }
  echo "postgres: installing Debian's postgresql" >&2
  if [ ! -f /tmp/.ingest-apt-updated ]; then apt-get update -qq && touch /tmp/.ingest-apt-updated; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
fi
VERSION="$(ls /etc/postgresql | sort -n | tail -1)"
if [ ! -d "/etc/postgresql/$VERSION/$NAME" ]; then
  pg_createcluster "$VERSION" "$NAME" -p "$PORT" -- --auth=trust >/dev/null
fi
if ! pg_lsclusters -h | awk -v v="$VERSION" -v n="$NAME" '$1==v && $2==n {print $4}' | grep -q online; then
  # The server outlives this script: it must not inherit the caller's pipe (fd 3), or
  # the caller's $(...) waits for it to exit.
  pg_ctlcluster --skip-systemctl-redirect "$VERSION" "$NAME" start 3>&- </dev/null
fi
for _ in $(seq 1 100); do
  if su postgres -c "psql -h 127.0.0.1 -p $PORT -d postgres -Atqc 'select 1'" >/dev/null 2>&1; then break; fi
  sleep 0.2
done
if ! su postgres -c "psql -h 127.0.0.1 -p $PORT -d postgres -Atqc \"select 1 from pg_database where datname='test'\"" | grep -q 1; then
  su postgres -c "createdb -h 127.0.0.1 -p $PORT test"
fi
echo "postgresql://postgres@127.0.0.1:$PORT/test" >&3
