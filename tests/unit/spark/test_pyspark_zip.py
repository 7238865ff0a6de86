"""PySpark's zip, as Spark's Python processes import it: compiled once by
``pipeline.spark.pyspark_zip``, after which they compile nothing of it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pipeline.spark import pyspark_zip

# a Spark Python process's start: the planner of a Python streaming source
PROBE = """
import builtins, sys
compiled = []
real = builtins.compile
def counting(source, filename, *a, **k):
    if ".zip" in str(filename):
        compiled.append(filename)
    return real(source, filename, *a, **k)
builtins.compile = counting
import pyspark.sql.streaming.python_streaming_source_runner as m
print(len(compiled), m.__file__)
"""


@pytest.fixture
def spark_home(tmp_path: Path) -> Path:
    zips = pyspark_zip.spark_zips()
    if not zips:
        pytest.skip("the installed PySpark has no python/lib zips")
    lib = tmp_path / "spark" / "python" / "lib"
    lib.mkdir(parents=True)
    for z in zips:  # as PySpark's wheel ships them: sources only
        with zipfile.ZipFile(z) as src, zipfile.ZipFile(lib / z.name, "w") as out:
            for info in src.infolist():
                if not info.filename.endswith(".pyc") and info.filename != pyspark_zip.MARK:
                    out.writestr(info, src.read(info))
    return tmp_path / "spark"


def _compiled_on_import(home: Path) -> tuple[int, str]:
    path = ":".join(str(z) for z in pyspark_zip.spark_zips(home))
    r = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    count, module_file = r.stdout.split()
    return int(count), module_file


def test_spark_processes_compile_pyspark_until_the_zip_is_compiled(spark_home: Path) -> None:
    before, module_file = _compiled_on_import(spark_home)
    assert ".zip" in module_file  # the zip wins over the installed package, as in Spark
    assert before > 50

    assert pyspark_zip.main(["--spark-home", str(spark_home)]) == 0

    after, module_file = _compiled_on_import(spark_home)
    assert ".zip" in module_file
    assert after == 0
    for z in pyspark_zip.spark_zips(spark_home):
        assert pyspark_zip.is_compiled(z)
        with zipfile.ZipFile(z) as f:  # the sources stay
            assert any(n.endswith(".py") for n in f.namelist())
        assert pyspark_zip.compile_zip(z) is False  # once
