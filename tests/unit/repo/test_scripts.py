"""The shell scripts CI runs: each parses, and each ``export`` names real variables.

A typo joining two lines (``export A=1stage "x"``) parses but aborts ``set -e`` scripts at
run time, which once cost a whole CI run; this catches it before.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = sorted([*ROOT.glob("scripts/*.sh"), ROOT / ".ci" / "run"])
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_parses(script: Path) -> None:
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_exports_name_valid_variables(script: Path) -> None:
    for number, line in enumerate(script.read_text().splitlines(), 1):
        words = line.strip().split(None, 1)
        if not words or words[0] != "export" or len(words) < 2:
            continue
        for word in shlex.split(words[1], comments=True):
            name = word.split("=", 1)[0]
            assert NAME.match(name), f"{script.name}:{number}: export of {name!r}"


def _path_without(tmp: Path, tools: set[str]) -> str:
    """A PATH of one directory of links to every command on this PATH but ``tools``."""
    farm = tmp / "bin"
    farm.mkdir()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = farm / entry.name
            if entry.name not in tools and not link.exists() and os.access(entry.path, os.X_OK):
                link.symlink_to(entry.path)
    return str(farm)


def test_kubernetes_drill_without_its_tools_stops_in_one_line(tmp_path: Path) -> None:
    """Run before scripts/tools.sh, the chart drill used to record ``[exit 127]`` for every
    helm command and exit 0; it names the missing tool and its installer instead, before
    writing any transcript. A copy of the checkout's scripts, so that the checkout's own
    .tools/bin (which k8s-control-plane.sh's env puts on PATH) is not there."""
    root = tmp_path / "checkout"
    for rel in (
        "docs/drills/kubernetes/drill.sh",
        "docs/drills/kubernetes/transcript.sh",
        "docs/drills/kubernetes/tools.sh",
        "scripts/k8s-control-plane.sh",
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, root / rel)
    out = tmp_path / "out"
    out.mkdir()
    path = _path_without(tmp_path, {"helm", "kubectl", "etcd", "kube-apiserver"})
    done = subprocess.run(
        ["bash", str(root / "docs/drills/kubernetes/drill.sh")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": path, "OUT": str(out)},
    )
    assert done.returncode != 0, done.stdout[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "helm" in lines[0] and "scripts/tools.sh" in lines[0], lines
    assert not list(out.iterdir())


def test_the_demo_lake_is_not_left_untracked() -> None:
    """``./scripts/run-demo.sh`` writes ``./demo-lake`` (``ingest demo``'s default): ignored,
    so ``git status`` of a checkout stays clean after the demo."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "-q", "demo-lake/kafka/server.log"],
        capture_output=True,
    )
    assert done.returncode == 0, "demo-lake/ is not in .gitignore"
