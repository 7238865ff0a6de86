"""Every ``ingest`` command fails the same way on an operator's mistake.

A bad argument, a missing config file, an option conflict, an unreachable broker or
catalog: exit 2, at most two lines on stderr (the error and a hint), no traceback, and
nothing created on disk -- neither in the working directory (``./drills``,
``./demo-lake``, ``bench-<time>``) nor where the config points (warehouse, checkpoint).
Each case runs the real entry point (``python -m pipeline``) in a subprocess, so the
error path under test is the one an operator meets.

An unexpected exception (a bug, an OS error) prints one line naming the log file, where
the traceback went, and exits 1.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
UNREACHABLE = "127.0.0.1:1"  # nothing listens on port 1: connection refused at once


def _config(work: Path, **catalog: Any) -> dict[str, Any]:
    return {
        "id": "errors",
        "source": {"bootstrapServers": UNREACHABLE, "topics": ["events"], "brokerRetrySeconds": 0},
        "decode": {"schema": [{"name": "a", "type": "string"}]},
        "sink": {
            "catalog": {"warehouse": str(work / "lake" / "warehouse"), **catalog},
            "table": "db.events",
        },
        "checkpointLocation": str(work / "lake" / "ck"),
        "commit": {"catalogRetrySeconds": 0},
        "metrics": {"enabled": False},
    }


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The working directory: two configs, a foreign non-empty directory and an existing
    warehouse for the catalog-outage config (its tables' data would live there)."""
    w = tmp_path / "work"
    w.mkdir()
    (w / "unreachable-broker.yaml").write_text(yaml.safe_dump(_config(w)))
    pg = _config(w, uri="postgresql+psycopg2://ingest@127.0.0.1:1/catalog")
    pg["sink"]["catalog"]["warehouse"] = str(w / "pg-warehouse")
    (w / "pg-warehouse").mkdir()
    (w / "unreachable-catalog.yaml").write_text(yaml.safe_dump(pg))
    (w / "foreign").mkdir()
    (w / "foreign" / "precious.txt").write_text("not a demo's\n")
    return w


BROKER_CFG = "{work}/unreachable-broker.yaml"
CATALOG_CFG = "{work}/unreachable-catalog.yaml"
MISSING = "{work}/no-such.yaml"

CASES: dict[str, list[str]] = {
    "no-command": [],
    "unknown-command": ["frobnicate"],
    # run
    "run-bad-argument": ["run", "--bogus"],
    "run-no-config": ["run"],
    "run-missing-config": ["run", "--config", MISSING],
    "run-bad-set": ["run", "--config", BROKER_CFG, "--set", "trigger.mode=sometimes"],
    "run-unreachable-broker": ["run", "--config", BROKER_CFG],
    # demo
    "demo-bad-argument": ["demo", "--events", "many"],
    "demo-foreign-lake": ["demo", "--lake", "{work}/foreign"],
    # status
    "status-bad-argument": ["status", "--bogus"],
    "status-missing-config": ["status", "--config", MISSING],
    "status-no-tables": ["status", "--config", BROKER_CFG],
    "status-unreachable-catalog": ["status", "--config", CATALOG_CFG],
    # compact
    "compact-bad-argument": ["compact", "--config", BROKER_CFG, "--min-input-files", "1"],
    "compact-missing-config": ["compact", "--config", MISSING],
    "compact-dry-run-without-orphans": ["compact", "--config", CATALOG_CFG, "--dry-run"],
    "compact-older-than-without-orphans": [
        "compact",
        "--config",
        CATALOG_CFG,
        "--older-than",
        "2 hours",
    ],
    "compact-bad-older-than": [
        "compact",
        "--config",
        CATALOG_CFG,
        "--orphans",
        "--older-than",
        "soon",
    ],
    "compact-no-tables": ["compact", "--config", BROKER_CFG],
    "compact-unreachable-catalog": ["compact", "--config", CATALOG_CFG],
    "compact-orphans-unreachable-catalog": ["compact", "--config", CATALOG_CFG, "--orphans"],
    # verify
    "verify-bad-argument": ["verify", "--config", BROKER_CFG, "--format", "delta"],
    "verify-missing-config": ["verify", "--config", MISSING],
    "verify-no-tables": ["verify", "--config", BROKER_CFG],
    "verify-unreachable-catalog": ["verify", "--config", CATALOG_CFG],
    # broker
    "broker-bad-argument": ["broker", "--brokers", "0"],
    "broker-bad-topic": ["broker", "--topic", "events:eight"],
    "broker-data-dir-is-a-file": ["broker", "--data-dir", "{work}/foreign/precious.txt"],
    # produce
    "produce-bad-argument": ["produce"],
    "produce-bad-partitions": ["produce", "--bootstrap", UNREACHABLE, "--partitions", "0"],
    "produce-unreachable-broker": ["produce", "--bootstrap", UNREACHABLE, "--count", "10"],
    # drill
    "drill-bad-argument": ["drill", "--matrix", "huge"],
    "drill-unknown-scenario": ["drill", "--scenario", "meteor"],
    "drill-bad-soak": ["drill", "--soak", "0"],
    "drill-unreachable-broker": ["drill", "--bootstrap", UNREACHABLE],
    # bench
    "bench-bad-argument": ["bench", "--only", "everything"],
    "bench-unreachable-broker": ["bench", "--bootstrap", UNREACHABLE],
}


# what the error line must name, where passing for another reason would hide a regression
EXPECT = {
    "compact-dry-run-without-orphans": "--dry-run apply to --orphans only",
    "compact-older-than-without-orphans": "--older-than apply to --orphans only",
    "compact-bad-older-than": "--older-than 'soon'",
    "compact-no-tables": "has no tables here yet",
    "compact-unreachable-catalog": "127.0.0.1",
    "status-no-tables": "has no tables here yet",
    "verify-no-tables": "has no tables here yet",
    "run-unreachable-broker": "[ingest:broker-unavailable]",
    "produce-unreachable-broker": "[ingest:broker-unavailable]",
    "drill-unreachable-broker": "[ingest:broker-unavailable]",
    "bench-unreachable-broker": "[ingest:broker-unavailable]",
    "bench-bad-argument": "--only everything",
    "run-missing-config": "does not exist",
}


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def ingest(args: list[str], cwd: Path, logs: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "INGEST_LOG_FILE"}
    environ.update(PYTHONPATH=str(ROOT), TMPDIR=str(logs), COLUMNS="300", **env)
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environ,
        timeout=240,
    )


# each waits out the real broker timeout (~10 s): in the rotation, for the default stage's
# ten minutes
SLOW_CASES = frozenset(
    c for c in CASES if c.endswith("unreachable-broker") and c != "run-unreachable-broker"
)


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=pytest.mark.extended) if c in SLOW_CASES else c for c in sorted(CASES)],
)
def test_operator_errors_are_one_line_exit_2_and_create_nothing(
    case: str, work: Path, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"  # TMPDIR: a command's own log file may go there, nothing else
    logs.mkdir()
    before = _tree(work)
    args = [a.format(work=work) for a in CASES[case]]
    r = ingest(args, work, logs)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, f"exit {r.returncode}\nstderr:\n{r.stderr[-3000:]}"
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert 1 <= len(lines) <= 2, r.stderr[-3000:]
    assert lines[0].startswith("error: "), lines
    assert len(lines) == 1 or lines[1].startswith("hint: "), lines
    assert EXPECT.get(case, "") in lines[0], lines
    assert _tree(work) == before, sorted(_tree(work) ^ before)
    created = [p for p in logs.rglob("*") if not p.name.endswith(".log")]
    assert not created, created


def test_an_unexpected_error_is_one_line_naming_the_log_file_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug or an OS error (here: the orphan listing's ``OSError``) in any command: one
    line with the exception and the log file's path, exit 1; the traceback is in that
    file."""
    import pipeline.ops.compact as compact_tool
    from pipeline.cli import main

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(compact_tool, "run_compact", broken)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv("INGEST_LOG_FILE", raising=False)
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    cfg = tmp_path / "p.yaml"
    cfg.write_text(yaml.safe_dump(_config(tmp_path)))
    (tmp_path / "lake" / "warehouse").mkdir(parents=True)
    with pytest.raises(SystemExit) as exit_:
        main(["compact", "--config", str(cfg)])
    assert exit_.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "OSError" in lines[0] and "No space left on device" in lines[0], lines
    log = Path(lines[0].rsplit(" ", 1)[1])
    assert log.parent == tmp_path and log.name.startswith("ingest-"), lines
    assert "Traceback" in log.read_text() and "No space left" in log.read_text()
