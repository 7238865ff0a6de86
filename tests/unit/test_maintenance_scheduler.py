"""The maintenance scheduler's log: an orphan cleanup run always leaves one line.

The sweep logs what it removes (pipeline.formats.orphans) and compaction each rewrite;
a cleanup that removed nothing used to log nothing, so a soak could not tell whether the
background cleanup ran at all."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from pipeline.commit.maintenance import OrphanResult
from pipeline.config import parse_config
from pipeline.maintenance_scheduler import Maintenance


class _Table:
    name = "table db.events"

    def __init__(self, result: OrphanResult) -> None:
        self.result = result

    def remove_orphans(self, older: float, protected: Any, *, dry_run: bool = False) -> Any:
        return self.result


def _tables(result: OrphanResult) -> Any:
    timeline = SimpleNamespace(pending=lambda: [])
    return SimpleNamespace(
        commit_tables=lambda: [],  # no table: the cleanup iterates none
        timeline=lambda _: timeline,
        journal_pipelines=lambda: [],
        maintenance=lambda: [_Table(result)],
    )


def _cfg() -> Any:
    return parse_config(
        {
            "id": "p",
            "source": {"bootstrapServers": "127.0.0.1:9", "topics": ["t"]},
            "sink": {"table": "db.events", "catalog": {"warehouse": "/tmp/w"}},
            "decode": {"format": "raw"},
            "checkpointLocation": "/tmp/ck",
        }
    )


def test_orphan_cleanup_that_removes_nothing_says_it_ran(caplog: pytest.LogCaptureFixture) -> None:
    reported: list[Any] = []
    m = Maintenance(
        _cfg(),
        _tables(OrphanResult("table db.events", too_young=3, referenced=7)),
        report=reported.append,
    )
    with caplog.at_level(logging.INFO, logger="pipeline"):
        m.remove_orphans(older_than_s=600)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "table db.events: orphan cleanup removed nothing (3 unreferenced files younger than "
        "600 s kept, 7 referenced)"
    ]
    assert len(reported) == 1


def test_orphan_cleanup_that_removes_files_adds_no_second_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    result = OrphanResult("table db.events", removed=("a.parquet",), removed_bytes=10)
    m = Maintenance(_cfg(), _tables(result))
    with caplog.at_level(logging.INFO, logger="pipeline"):
        m.remove_orphans(older_than_s=600)
    assert caplog.records == []  # the sweep's own "removed 1 orphan data files" is the line
