"""The driver JVM's class archive (pipeline/spark/class_archive.py), with real JVMs.

A fresh JVM home: ``prepare`` starts and stops a session in a child process whose JVM dumps
its classes at exit, and promotes the dump once a JVM with ``-Xshare:on`` maps it; the next
session maps the archive (started with ``-Xshare:on``, it would fail to start otherwise),
``spark.classArchive: false`` leaves the JVM without it. A truncated archive is deleted and
never mapped (it would crash the JVM); a dump whose JVM cannot map it is deleted; a dump
whose JVM is still running is left alone; one process at a time dumps.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipeline.spark import class_archive

SESSION = textwrap.dedent(
    """
    import sys
    from pipeline.spark.session import build_spark
    s = build_spark("t", "local[1]", {"spark.driver.extraJavaOptions": sys.argv[1]},
                    class_archive=sys.argv[2] == "on")
    s.range(10).count()
    print(s.sparkContext.getConf().get("spark.driver.extraJavaOptions"))
    s.stop()
    """
)


def _session(home: Path, java_options: str, archive: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "INGEST_JVM_DIR": str(home)}
    return subprocess.run(
        [sys.executable, "-c", SESSION, java_options, archive],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_prepare_then_the_next_session_maps_the_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INGEST_JVM_DIR", str(tmp_path))
    archive = class_archive.prepare()
    assert archive is not None and archive.is_file()
    assert archive.stat().st_size == int(archive.name.split(".")[1])
    where = class_archive.directory()
    assert sorted(p.name for p in where.iterdir()) == [archive.name]  # dump, sidecar, claim gone

    # -Xshare:on: the JVM must map the archive or refuse to start
    r = _session(tmp_path, "-Xshare:on", "on")
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"-XX:SharedArchiveFile={archive}" in r.stdout
    r = _session(tmp_path, "-Xshare:auto", "off")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "SharedArchiveFile" not in r.stdout and "ArchiveClassesAtExit" not in r.stdout


def _fake_java(tmp_path: Path, code: int) -> str:
    java = tmp_path / f"java-{code}"
    java.write_text(f"#!/bin/sh\nexit {code}\n")
    java.chmod(0o755)
    return str(java)


def test_only_whole_checked_archives_are_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INGEST_JVM_DIR", str(tmp_path))
    where, key = class_archive.directory(), class_archive._key()
    where.mkdir(parents=True)
    gone = subprocess.Popen(["true"])
    gone.wait()

    # a truncated archive (its size is not its name's) is deleted, and a dump is claimed
    (where / f"{key}.999.jsa").write_bytes(b"x" * 10)
    option, dump = class_archive.java_options(where)
    assert option.startswith("-XX:ArchiveClassesAtExit=") and dump is not None
    assert not (where / f"{key}.999.jsa").exists()
    # while this process holds the claim, no other process dumps
    assert not class_archive._claim(where, key)

    # a finished dump that a JVM cannot map is deleted; one that maps is promoted
    (where / f"{key}.dumping").unlink()
    bad = where / f"{key}.{gone.pid}.dump"
    bad.write_bytes(b"y" * 100)
    bad.with_suffix(".cp").write_text(f"{_fake_java(tmp_path, 1)}\n/cp\n{gone.pid}\n")
    assert class_archive.promote(where, key) is None
    assert not bad.exists() and not bad.with_suffix(".cp").exists()
    good = where / f"{key}.{gone.pid}.dump"
    good.write_bytes(b"z" * 123)
    good.with_suffix(".cp").write_text(f"{_fake_java(tmp_path, 0)}\n/cp\n{gone.pid}\n")
    # still written by a live JVM (this process stands for it): left alone
    good.with_suffix(".cp").write_text(f"{_fake_java(tmp_path, 0)}\n/cp\n{os.getpid()}\n")
    assert class_archive.promote(where, key) is None and good.exists()
    good.with_suffix(".cp").write_text(f"{_fake_java(tmp_path, 0)}\n/cp\n{gone.pid}\n")
    archive = class_archive.promote(where, key)
    assert archive == where / f"{key}.123.jsa" and archive.read_bytes() == b"z" * 123
    assert class_archive.java_options(where) == (
        f"-XX:SharedArchiveFile={archive} -Xlog:cds=off",
        None,
    )


def test_an_unwritable_home_only_forgoes_the_archive(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    assert class_archive.java_options(blocked / "class-archive") == ("", None)


def test_a_spark_conf_directory_with_files_forgoes_the_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The JVM cannot archive a class path holding a non-empty directory (Spark puts its
    conf directory first): no dump is attempted, nothing is claimed."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text("spark.ui.enabled false\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    where = tmp_path / "class-archive"
    assert class_archive.java_options(where) == ("", None)
    assert not where.exists() or not list(where.iterdir())
