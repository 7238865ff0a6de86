"""What a checkout holds: no symbolic link is tracked.

The set-up's own directories (``.jvm/``, ``.tools/``) are made per checkout; a link to
another checkout's, once committed, replaced a fresh clone's tools with a link that
resolves to itself, and every Spark start in CI failed (``bash``: too many levels of
symbolic links).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout"
)
def test_the_checkout_tracks_no_symbolic_link() -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    links = [line.split("\t", 1)[1] for line in listed.splitlines() if line.startswith("120000")]
    assert links == []


def test_the_set_ups_directories_are_ignored_as_files_and_links_too() -> None:
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "/.jvm" in ignored and "/.tools" in ignored
