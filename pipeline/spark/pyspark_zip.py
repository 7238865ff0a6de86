"""Compiled byte code in the zips Spark puts first on its Python processes' path.

Spark starts its Python processes with ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's
zip at the head of ``PYTHONPATH``, so they import PySpark from the zip even when the same
PySpark is installed as a package. PySpark's wheel ships the zip with sources only, and
Python caches nothing it compiles from a zip: every such process compiles PySpark again
(most of a planner process's start: docs/bench.md, "Figures behind the code's choices").
Processes forked from a worker daemon pay it once per
daemon, but the streaming source's planner (``python_streaming_source_runner``) is a new
process for every query start -- each start-up, restart and warm standby's take-over.

:func:`compile_zip` adds an unchecked-hash ``.pyc`` beside each ``.py`` of a zip (the
place Python's zip importer looks first), compiled by this interpreter, and replaces the
zip in one rename. The sources stay; an interpreter of another version finds a ``.pyc``
with the wrong magic number and compiles the source as before. Run once after installing
PySpark (``python -m pipeline.spark.pyspark_zip``: scripts/bootstrap.sh, the image); the
pipeline never rewrites files of an installed package while it runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import py_compile
import sys
import tempfile
import warnings
import zipfile
from collections.abc import Iterable
from pathlib import Path

MARK = "ingest-compiled.txt"  # entry a compiled zip carries: the interpreter it was for


def spark_zips(spark_home: Path | None = None) -> list[Path]:
    """The zips under ``spark_home`` (default: the installed PySpark's) on its Python
    processes' path."""
    if spark_home is None:
        spec = importlib.util.find_spec("pyspark")
        if spec is None or spec.origin is None:
            return []
        spark_home = Path(os.environ.get("SPARK_HOME") or Path(spec.origin).parent)
    lib = spark_home / "python" / "lib"
    return sorted(lib.glob("pyspark.zip")) + sorted(lib.glob("py4j-*-src.zip"))


def _tag() -> str:
    return sys.implementation.cache_tag or ""


def is_compiled(path: Path) -> bool:
    """The zip holds byte code for this interpreter."""
    with zipfile.ZipFile(path) as z:
        try:
            return z.read(MARK).decode() == _tag()
        except KeyError:
            return False


def compile_zip(path: Path) -> bool:
    """Add byte code to ``path`` for this interpreter; False when it had it already."""
    if is_compiled(path):
        return False
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        with (
            tempfile.TemporaryDirectory() as scratch,
            zipfile.ZipFile(path) as src,
            zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out,
        ):
            for info in src.infolist():
                name = info.filename
                if name == MARK or (name.endswith(".pyc") and name[:-1] in src.NameToInfo):
                    continue  # our own earlier byte code (another interpreter's)
                data = src.read(info)
                out.writestr(info, data)
                if name.endswith(".py"):
                    out.writestr(_pyc_info(info), _pyc(data, f"{path}/{name}", Path(scratch)))
            out.writestr(MARK, _tag())
        os.chmod(tmp, os.stat(path).st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def _pyc_info(info: zipfile.ZipInfo) -> zipfile.ZipInfo:
    pyc = zipfile.ZipInfo(info.filename + "c", date_time=info.date_time)
    pyc.compress_type = zipfile.ZIP_DEFLATED
    pyc.external_attr = info.external_attr
    return pyc


def _pyc(source: bytes, filename: str, scratch: Path) -> bytes:
    """Unchecked-hash byte code (PEP 552): valid whatever the zip entry's time stamp;
    tracebacks name the file inside the zip."""
    src, pyc = scratch / "module.py", scratch / "module.pyc"
    src.write_bytes(source)
    with warnings.catch_warnings():  # PySpark's own tests' SyntaxWarnings
        warnings.simplefilter("ignore")
        py_compile.compile(
            str(src),
            cfile=str(pyc),
            dfile=filename,
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
    return pyc.read_bytes()


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spark-home", type=Path, help="default: the installed PySpark's")
    args = parser.parse_args(list(argv) if argv is not None else None)
    zips = spark_zips(args.spark_home)
    if not zips:
        print("pyspark_zip: no PySpark zips found; nothing to do", file=sys.stderr)
        return 0
    for z in zips:
        try:
            done = compile_zip(z)
        except OSError as e:  # a read-only install: the pipeline still runs, slower
            print(f"pyspark_zip: cannot rewrite {z} ({e.strerror}); left as is", file=sys.stderr)
            continue
        print(f"pyspark_zip: {z}: {'compiled' if done else 'already compiled'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
