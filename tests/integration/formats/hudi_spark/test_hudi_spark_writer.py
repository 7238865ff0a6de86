"""Hudi's own Spark writer in two phases (pipeline.formats.hudi_spark.client, our JVM helper
pipeline/resources/hudi-writer built with Maven), on PySpark 3.5.7 with
``hudi-spark3.5-bundle_2.12`` -- the one line the bundle is served for -- in its own
environment (``scripts/spark-line-env.sh 3.5.7``).

One process requests and writes two instants and exits without committing: nothing is
visible, their files are on disk. A second process, through the committer
(pipeline.formats.hudi_spark.committer), completes the first from the journal's
descriptors alone (no recompute) with our checkpoint in the commit's extra metadata, rolls
the second back through Hudi, writes a third, fences epoch 2 and is refused a commit at
epoch 1, commits at epoch 2 (twice: the second a no-op), and commits a batch that wrote no
rows. Hudi's Spark datasource and hudi-rs then read exactly the committed offsets once
each; the rolled-back instant's files are gone; a third process reads back what was
committed, the offsets, the epoch and the file sizes recovery checks.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.s3_fixtures import S3Server
from support.spark_lines import python_of

ROOT = Path(__file__).resolve().parents[4]
SCRIPT = ROOT / "tests" / "jvm_writer" / "hudi_two_phase.py"
LOCK_SCRIPT = ROOT / "tests" / "jvm_writer" / "s3_lock.py"


def _steps(python: str, base: Path, journal: Path, *steps: str) -> dict[str, Any]:
    r = subprocess.run(
        [python, str(SCRIPT), str(base), str(journal), *steps],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _hudi_rs(base: Path) -> tuple[list[int], dict[str, str]]:
    import hudi
    import pyarrow as pa

    table = hudi.HudiTableBuilder.from_base_uri(str(base)).build()
    timeline = table.get_timeline()
    commits = timeline.get_completed_commits(desc=False)
    extra = {
        c.timestamp: json.loads(timeline.get_instant_metadata_in_json(c))
        .get("extraMetadata", {})
        .get("ingest.pipeline-id", "")
        for c in commits
    }
    if not commits:
        return [], extra
    options = hudi.HudiReadOptions(filters=[], projection=["offset"]).with_as_of_timestamp(
        commits[-1].timestamp
    )
    batches = list(table.read_stream(options))
    offsets = pa.Table.from_batches(batches).column("offset").to_pylist() if batches else []
    return sorted(offsets), extra


@pytest.mark.slow
@pytest.mark.hudi_spark
def test_hudi_spark_writer_commits_from_recorded_stats_in_another_process(tmp_path: Path) -> None:
    python = python_of("3.5.7")
    base, journal = tmp_path / "events", tmp_path / "journal.json"

    first = _steps(python, base, journal, "write", "A", "0", "100", "write", "B", "100", "50")
    assert [line.split()[1:] for line in first["timeline"]] == [["commit", "INFLIGHT"]] * 2
    entries = json.loads(journal.read_text())
    files = {
        name: [base / json.loads(json.loads(d)["stat"])["path"] for d in entry["files"]]
        for name, entry in entries.items()
    }
    assert all(p.is_file() for n in ("A", "B") for p in files[n]) and files["A"] and files["B"]
    assert _hudi_rs(base) == ([], {})  # written, not committed: nothing visible

    second = _steps(
        python, base, journal,
        "status",  # the committer: nothing committed, no epoch yet
        "commit", "A", "1", "rollback", "B", "write", "C", "150", "30",
        "fence", "2", "commit", "C", "1",  # a zombie at epoch 1: refused
        "commit", "C", "2", "commit", "C", "2",  # the owner; the second time a no-op
        "empty", "D", "2",  # a batch with no rows for this table: offsets move on
        "read",
    )  # fmt: skip
    want = [*range(0, 100), *range(150, 180)]
    assert second["read"] == want  # Hudi's Spark datasource: each committed offset once
    assert second["committed"] == {"A": False, "B": False}
    assert second["offsets"] == {} and second["epoch"] is None
    assert len(second["fenced"]) == 1
    assert "writer epoch 1 was superseded by epoch 2" in second["fenced"][0]
    entries = json.loads(journal.read_text())
    states = {line.split()[0]: line.split()[1:] for line in second["timeline"]}
    for name in ("A", "C", "D"):
        assert states[entries[name]["instant"]] == ["commit", "COMPLETED"], name
    assert entries["B"]["instant"] not in states  # rolled back: a rollback instant instead
    assert ["rollback", "COMPLETED"] in states.values()
    assert not any(p.exists() for p in files["B"])
    assert all(p.is_file() for p in files["A"])

    third = _steps(python, base, journal, "status")  # a fresh process reads it all back
    assert third["committed"] == {"A": True, "B": False, "C": True, "D": True}
    assert third["offsets"] == {"events/0": 180, "events/1": 180}
    assert third["epoch"] == 2
    for name in ("A", "C"):  # recovery's intact check: every file with its recorded size
        stats = [json.loads(json.loads(d)["stat"]) for d in entries[name]["files"]]
        recorded = [s["fileSizeInBytes"] for s in stats]
        assert third["sizes"][name] == recorded

    offsets, extra = _hudi_rs(base)  # hudi-rs: the same rows, our checkpoints in the commits
    assert offsets == want
    assert {entries[n]["instant"] for n in ("A", "C", "D")} == set(extra)
    assert all(pid == "p1" for pid in extra.values())


@pytest.mark.slow
@pytest.mark.hudi_spark
def test_hudis_lock_on_s3_admits_one_writer_and_expires_a_dead_ones(s3_server: S3Server) -> None:
    """Hudi refuses its file-system lock on S3A ("can not support atomic creation"); the
    tables' lock there is our helper's conditional PUT (tests/jvm_writer/s3_lock.py)."""
    base = f"s3://{s3_server.new_bucket('hudi-lock')}/lake/events"
    r = subprocess.run(
        [python_of("3.5.7"), str(LOCK_SCRIPT), base, s3_server.endpoint,
         s3_server.access_key, s3_server.secret_key],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["lock"] == f"{base}/.hoodie/.ingest/lock"
    assert out["first"] is True
    assert out["second_while_held"] is False and out["second_waited_s"] >= 1.4
    assert out["second_after_its_unlock"] is False  # a writer releases only its own lock
    assert out["second_after_release"] is True
    assert out["third_at_once"] is False  # held by a writer that never releases it ...
    assert out["third_after_expiry"] is True  # ... until it is older than the expiry
    assert 1.0 <= out["third_waited_s"] <= 15, out
