"""The rotation covers every test CI's stages leave out, each in exactly one share, and any
as many consecutive commits as it has shares run all of them (tests/support/rotation.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from integration.lab.test_drills import _in_ci_subset
from support import rotation

from lab.drill.runner import select

ROOT = Path(__file__).resolve().parents[3]


def _collected(marker: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", marker, "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {line.strip() for line in out.splitlines() if "::" in line}


def test_every_extended_test_has_exactly_one_share() -> None:
    extended = _collected("extended")
    drills = {n for n in extended if n.startswith(rotation.LEFT_OUT_DRILLS + "[")}
    assert drills == {f"{rotation.LEFT_OUT_DRILLS}[{s}]" for s in range(rotation.SHARES)}
    others = extended - drills
    assert others - set(rotation.EXTENDED) == set(), "extended tests without a share"
    assert set(rotation.EXTENDED) - others == set(), "shares name tests that do not exist"
    assert set(rotation.EXTENDED.values()) == set(range(rotation.SHARES))


def test_every_drill_left_out_of_ci_has_exactly_one_share() -> None:
    full = select("full", [], [], 9, 100.0, 2, 2)
    left_out = {(s.label, s.table_format) for s in full if not _in_ci_subset(s)}
    assert left_out == set(rotation.DRILLS)
    assert set(rotation.DRILLS.values()) == set(range(rotation.SHARES))


def test_every_core_test_runs_on_the_spark_reader() -> None:
    """Each test marked ``core`` runs with Spark's Kafka source on the default Spark: in a
    share of the rotation, or every time when it sets ``source.reader: spark`` itself."""
    core = _collected("core")
    own = {n for n in core if n.startswith("tests/integration/source/test_spark_reader.py::")}
    assert own, "tests/integration/source/test_spark_reader.py is the reader's own core"
    assert core - own == set(rotation.CORE_ON_SPARK_READER), "core tests without a share"
    assert set(rotation.CORE_ON_SPARK_READER.values()) <= set(range(rotation.SHARES))


def test_ci_runs_the_core_on_pyspark_3_5_and_on_the_spark_reader() -> None:
    script = (ROOT / "scripts" / "run-tests.sh").read_text()
    assert "scripts/spark-line-env.sh 3.5.7" in script
    assert "-m pytest -m core" in script
    assert "INGEST_SOURCE_READER=spark" in script and "rotation.py --core-nodes" in script


def test_the_other_spark_lines_run_the_spark_reader_tests_in_a_share() -> None:
    """Spark 4.0 and 4.1 (the lines users run besides 3.5 and the default) each run the
    Spark reader's tests in one share, on a PySpark whose line has a jar set."""
    from pipeline.source.spark_kafka import jar_set

    lines = {tuple(int(p) for p in v.split(".")[:2]) for v in rotation.OTHER_SPARK_LINES}
    assert lines == {(4, 0), (4, 1)}
    for version in rotation.OTHER_SPARK_LINES:
        assert jar_set(tuple(int(p) for p in version.split(".")[:2])).startswith("spark-kafka-")
    assert set(rotation.OTHER_SPARK_LINES.values()) <= set(range(rotation.SHARES))
    script = (ROOT / "scripts" / "run-tests.sh").read_text()
    assert "rotation.py --spark-lines" in script and rotation.SPARK_LINE_TESTS in script
    # a share without other lines prints nothing (an empty line ran the 3.5 default)
    for share in range(rotation.SHARES):
        out = subprocess.run(
            [sys.executable, str(ROOT / "tests" / "support" / "rotation.py"), "--share",
             str(share), "--spark-lines"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert out == "".join(f"{v}\n" for v in rotation.spark_lines(share))


@pytest.mark.parametrize("first", [0, 1, 2, 3, 137])
def test_as_many_consecutive_commits_as_shares_run_every_rotated_test(first: int) -> None:
    shares = [height % rotation.SHARES for height in range(first, first + rotation.SHARES)]
    ran = [node for share in shares for node in rotation.node_ids(share)]
    expected = set(rotation.EXTENDED) | {
        f"{rotation.LEFT_OUT_DRILLS}[{s}]" for s in range(rotation.SHARES)
    }
    assert sorted(ran) == sorted(expected)  # each exactly once
    drills = [d for share in shares for d in rotation.drills_of(share)]
    assert sorted(drills) == sorted(rotation.DRILLS)


def test_the_share_is_picked_from_the_commit_or_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INGEST_ROTATION_SHARE", raising=False)
    shares, why = rotation.chosen_share()
    height = rotation.commit_height()
    if height is not None:
        assert shares == [height % rotation.SHARES]
        assert f"commit #{height}" in why
    else:  # a shallow clone or a tarball: still exactly one share
        assert len(shares) == 1
    monkeypatch.setenv("INGEST_ROTATION_SHARE", "2")
    assert rotation.chosen_share() == ([2], "INGEST_ROTATION_SHARE=2")
    monkeypatch.setenv("INGEST_ROTATION_SHARE", "all")
    assert rotation.chosen_share()[0] == list(range(rotation.SHARES))
    for bad in ("8", "two"):
        monkeypatch.setenv("INGEST_ROTATION_SHARE", bad)
        with pytest.raises(SystemExit, match="0..7 or all"):
            rotation.chosen_share()


def test_ci_runs_the_rotation_and_says_which_share() -> None:
    script = (ROOT / "scripts" / "run-tests.sh").read_text()
    assert "tests/support/rotation.py --nodes" in script
    assert "python tests/support/rotation.py\n" in script  # prints the share and why
    out = subprocess.run(
        [sys.executable, "tests/support/rotation.py", "--share", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "INGEST_ROTATION_SHARE": ""},
    ).stdout
    assert out.startswith("rotation share(s) 1 of 8 (--share 1)")
    nodes = subprocess.run(
        [sys.executable, "tests/support/rotation.py", "--nodes", "--share", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert nodes == rotation.node_ids(1)
