#!/usr/bin/env bash
# Package the application for spark-submit on an existing cluster:
#
#   dist/spark/pipeline.zip        the `pipeline` package (for --py-files), reproducible:
#                                  sorted entries, fixed timestamps, no byte code
#   dist/spark/ingest_submit.py    the launcher to pass as spark-submit's application
#   dist/spark/*.whl               with --wheel: the package as a wheel (pip install it on
#                                  the nodes, or pass it to --py-files as well)
#
#   scripts/build-pyfiles.sh [--wheel] [--out DIR]
#
# --py-files ships our code only. Its dependencies (pyspark's Python side, confluent-kafka,
# pyiceberg, pyarrow, pydantic, …; see pyproject.toml) have compiled parts and must already
# be installed on every node, or shipped as a packed environment with
# `scripts/spark-submit.sh … --env-archive env.tar.gz` (docs/deploy.md).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY=python3
OUT="$ROOT/dist/spark"
wheel=0
while [ $# -gt 0 ]; do
  case "$1" in
    --wheel) wheel=1 ;;
    --out) OUT="$2"; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "build-pyfiles: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$OUT"

"$PY" - "$ROOT" "$OUT/pipeline.zip" <<'PYEOF'
import os, sys, zipfile

root, target = sys.argv[1], sys.argv[2]
files = []
for dirpath, dirnames, filenames in os.walk(os.path.join(root, "pipeline")):
    dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
    for name in sorted(filenames):
        if name.endswith((".pyc", ".pyo")):
            continue
        full = os.path.join(dirpath, name)
        files.append((os.path.relpath(full, root), full))
tmp = target + ".tmp"
with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
    for arc, full in sorted(files):
        info = zipfile.ZipInfo(arc.replace(os.sep, "/"), date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        with open(full, "rb") as f:
            z.writestr(info, f.read())
os.replace(tmp, target)
print(f"{target}: {len(files)} files")
PYEOF
cp "$ROOT/scripts/ingest_submit.py" "$OUT/ingest_submit.py"
echo "$OUT/ingest_submit.py"
if [ "$wheel" = 1 ]; then
  "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$OUT" "$ROOT"
  ls "$OUT"/*.whl
fi
