"""Fixtures of the core's protocol tests: a fresh in-memory world per test."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.commit_env import Env, make_kafka
from support.memtable import FakeWorkers, MemTable


@pytest.fixture
def env(tmp_path: Path) -> Env:
    kafka = make_kafka()
    main, dl = MemTable("main"), MemTable("dead_letter")
    return Env(tmp_path, kafka, main, dl, FakeWorkers(kafka, main, dl))
