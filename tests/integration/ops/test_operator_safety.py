"""What an operator meets first: usage mistakes, unwritable paths, the demo's directory.

Each error an operator can act on is one line on stderr (plus at most a one-line hint),
exit 2, and is found before anything is created: no directory, no writer epoch.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lab.demo import DEMO_MARKER, claim_demo_lake
from pipeline.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=cwd,
    )


def _one_line(r: subprocess.CompletedProcess[str]) -> str:
    """The error line; fails unless stderr is that line plus at most a `hint:` line."""
    lines = r.stderr.splitlines()
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert len(lines) in (1, 2) and lines[0].startswith("error: "), r.stderr
    assert len(lines) == 1 or lines[1].startswith("hint: "), r.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("rnu",), "No such command 'rnu'"),
        (("run", "--bogus-flag"), "No such option: --bogus-flag"),
        ((), "no command given"),
        (("produce",), "'--bootstrap'"),
        (("run",), "--config is required"),
        (("status",), "--config is required"),
        (("drill", "--matrix", "huge"), "--matrix 'huge'"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args: tuple[str, ...], expected: str) -> None:
    assert expected in _one_line(_cli(*args))


def _config(tmp_path: Path, **over: object) -> Path:
    data: dict[str, object] = {
        "id": "preflight",
        # unreachable on purpose: path checks come first, so no broker is needed
        "source": {"bootstrapServers": "127.0.0.1:1", "topics": ["t"]},
        "decode": {"schema": [{"name": "a", "type": "string"}]},
        "sink": {"table": "db.t", "catalog": {"warehouse": str(tmp_path / "wh")}},
        "checkpointLocation": str(tmp_path / "ckpt"),
        "metrics": {"enabled": False},
    }
    data.update(over)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("what", ["checkpoint", "warehouse", "hudi"])
def test_unwritable_paths_refused_before_anything_is_created(tmp_path: Path, what: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("a user's file, where a directory would have to be\n")
    if what == "checkpoint":
        config = _config(tmp_path, checkpointLocation=str(blocker / "ckpt"))
        key = "checkpointLocation"
    elif what == "warehouse":
        # /proc/1 refuses new entries even to root (these tests run as root in CI)
        wh = "/proc/1/ingest-wh" if os.access("/proc/1", os.F_OK) else str(blocker / "wh")
        sink = {"table": "db.t", "catalog": {"warehouse": wh}}
        config = _config(tmp_path, sink=sink)
        key = "sink.catalog.warehouse"
    else:
        sink = {"format": "hudi", "table": "db.t", "hudi": {"basePath": str(blocker / "t")}}
        config = _config(tmp_path, sink=sink)
        key = "sink.hudi.basePath"
    before = _tree(tmp_path)
    line = _one_line(_cli("run", "--config", str(config)))
    assert line.startswith(f"error: [ingest:config] {key} "), line
    assert "not a directory" in line or "read-only" in line or "not writable" in line, line
    # nothing created: no checkpoint, no warehouse (so no catalog, no fence, no epoch)
    assert _tree(tmp_path) == before


def test_demo_refuses_a_directory_it_did_not_create(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    (lake / "warehouse" / "db").mkdir(parents=True)
    table_file = lake / "warehouse" / "db" / "other-pipeline.metadata.json"
    table_file.write_text('{"another pipeline": "its table"}')
    (lake / "checkpoints" / "other").mkdir(parents=True)
    user_file = lake / "notes.txt"
    user_file.write_text("mine\n")
    before = {p: p.read_bytes() for p in (table_file, user_file)}

    line = _one_line(_cli("demo", "--lake", str(lake)))
    assert "was not created by `ingest demo`" in line and "--lake" in line, line
    assert {p: p.read_bytes() for p in before} == before
    assert (lake / "checkpoints" / "other").is_dir() and not (lake / DEMO_MARKER).exists()


def test_demo_claims_new_and_its_own_directories_only(tmp_path: Path) -> None:
    lake = claim_demo_lake(tmp_path / "new")
    assert (lake / DEMO_MARKER).is_file()
    for name in ("warehouse", "checkpoints", "hudi"):
        (lake / name / "x").mkdir(parents=True)
    (lake / "keep.txt").write_text("not the demo's state\n")
    claim_demo_lake(lake)  # a second demo run: its own state is cleared, nothing else
    assert sorted(p.name for p in lake.iterdir()) == [DEMO_MARKER, "keep.txt"]
    with pytest.raises(ConfigError, match="not created by `ingest demo`"):
        claim_demo_lake(tmp_path)  # holds new/: not the demo's


@pytest.mark.slow  # a Kafka node, Spark and three tables: ~1-2 min
def test_demo_with_tables_writes_each_topic_into_a_table_of_its_own(tmp_path: Path) -> None:
    """``ingest demo --tables 3``: three topics, one pipeline, three Iceberg tables; the
    demo's own check per table, and the tables read here: each holds its topic's records
    once (the rest are dead letters) and no other topic's."""
    from collections import Counter

    from pyiceberg.catalog.sql import SqlCatalog
    from support.drivers import run_cli

    lake = tmp_path / "lake"
    r = run_cli(
        "demo", "--tables", "3", "--events", "900", "--rate", "3000", "--partitions", "2",
        "--lake", str(lake), timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "EXACTLY ONCE across 3 tables: 900 produced" in r.stdout, r.stdout[-3000:]
    assert "0 missing, 0 duplicated, 0 in another topic's table" in r.stdout, r.stdout[-3000:]
    for i in (1, 2, 3):
        assert f"demo.events_{i}" in r.stdout and f"events-{i}" in r.stdout
    wh = lake / "warehouse"
    catalog = SqlCatalog("lake", uri=f"sqlite:///{wh}/catalog.db", warehouse=wh.as_uri())
    cols = ("_kafka_topic", "_kafka_partition", "_kafka_offset")
    dead = catalog.load_table("demo.events_1_dead_letter").scan(selected_fields=cols).to_arrow()
    total = dead.num_rows
    for i in (1, 2, 3):
        rows = catalog.load_table(f"demo.events_{i}").scan(selected_fields=cols).to_arrow()
        coords = Counter(zip(*(rows[c].to_pylist() for c in cols), strict=True))
        assert {t for t, _, _ in coords} == {f"events-{i}"}
        assert max(coords.values()) == 1
        total += rows.num_rows
    assert total == 900


def test_demo_tables_check_flags_a_record_in_another_topics_table() -> None:
    """The per-table check of ``demo --tables``: a record in another topic's table is
    counted there (and missing from its own), a second copy is a duplicate."""
    from types import SimpleNamespace

    import pyarrow as pa

    from lab.demo_tables import check_tables
    from pipeline.commit.offsets import TopicPartition

    def table(name: str, coords: list[tuple[str, int]]) -> SimpleNamespace:
        rows = pa.table(
            {
                "_kafka_topic": pa.array([t for t, _ in coords], pa.string()),
                "_kafka_partition": pa.array([0] * len(coords), pa.int32()),
                "_kafka_offset": pa.array([o for _, o in coords], pa.int64()),
            }
        )
        scan = SimpleNamespace(to_arrow=lambda: rows)
        handle = SimpleNamespace(scan=lambda selected_fields: scan)
        return SimpleNamespace(iceberg=SimpleNamespace(name=name), table=lambda: handle)

    tables = SimpleNamespace(
        mains=lambda: [
            ("main", table("demo.events_1", [("events-1", 0), ("events-2", 1)])),
            ("demo.events_2", table("demo.events_2", [("events-2", 0), ("events-2", 0)])),
        ],
        dead_letter=table("demo.events_1_dead_letter", [("events-1", 1)]),
    )
    expected = {TopicPartition("events-1", 0): [0, 1], TopicPartition("events-2", 0): [0, 1]}
    one, two = check_tables(tables, ["events-1", "events-2"], expected)
    assert (one.rows, one.dead_letters, one.missing, one.misplaced, one.ok) == (2, 1, 0, 1, False)
    assert (two.missing, two.duplicated, two.misplaced) == (1, 1, 0)
