"""The shell scripts CI runs: each parses, and each ``export`` names real variables.

A typo joining two lines (``export A=1stage "x"``) parses but aborts ``set -e`` scripts at
run time, which once cost a whole CI run; this catches it before.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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
