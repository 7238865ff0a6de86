"""The independent JVM readers' environment (``scripts/jvm-reader-env.sh``): PySpark 3.5 in its
own virtual environment with Iceberg's and Hudi's Spark packages from the project's JVM
manifest. ``reader_paths()`` builds it on first use and returns its ``python``,
``iceberg_jar``, ``hudi_jar`` and ``sqlite_jdbc_jar``; when it cannot be built the test skips
naming what is missing, or fails under ``INGEST_REQUIRE_JVM_READERS=1`` (set by the test
command: everything it needs can be installed there)."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any, NoReturn

from pipeline.commit.checkpoint import PIPELINE_ID_KEY, RANGES_KEY, parse_ranges
from pipeline.commit.history import Intervals
from pipeline.commit.maintenance import COMPACTION_KEY
from support.drivers import Coord
from support.required import unavailable

ROOT = Path(__file__).resolve().parent.parent.parent
ENV_SCRIPT = ROOT / "scripts" / "jvm-reader-env.sh"
HUDI_READER = ROOT / "tests" / "jvm_reader" / "read_hudi.py"
HUDI_SERVICES = ROOT / "tests" / "jvm_reader" / "hudi_services.py"


def _unavailable(why: str) -> NoReturn:
    unavailable("INGEST_REQUIRE_JVM_READERS", f"JVM reader environment: {why}")


def reader_paths() -> dict[str, str]:
    try:
        r = subprocess.run(
            ["bash", str(ENV_SCRIPT)], capture_output=True, text=True, timeout=600, cwd=ROOT
        )
    except subprocess.TimeoutExpired:
        _unavailable("scripts/jvm-reader-env.sh timed out")
        raise  # not reached: skip and fail raise
    if r.returncode != 0:
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        _unavailable(lines[-1] if lines else f"exit {r.returncode}")
    return dict(ln.split("=", 1) for ln in r.stdout.splitlines() if "=" in ln)


def reader_process_env() -> dict[str, str]:
    """This environment without what points Python or Spark at the project's PySpark."""
    drop = {"SPARK_HOME", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "SPARK_CONF_DIR"}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("PYSPARK_")}
    return {**env, "PYTHONNOUSERSITE": "1"}


def _run(env: dict[str, str], script: Path, *args: str) -> tuple[list[dict[str, Any]], str, int]:
    """``script`` in the readers' Python: its JSON lines, stderr and exit code."""
    r = subprocess.run(
        [env["python"], str(script), "--hudi-jar", env["hudi_jar"], *args],
        capture_output=True,
        text=True,
        timeout=420,
        cwd=ROOT,
        env=reader_process_env(),
    )
    docs = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
    return docs, r.stderr, r.returncode


def _s3a(server: Any) -> list[str]:
    """``read_hudi.py``'s flags for tables on ``server`` (an ``S3Server``): S3A's settings,
    as Hudi's own writer gets them (``s3://`` base paths mapped to S3A, as written)."""
    from pipeline.storage.s3_settings import S3Settings

    settings = S3Settings.from_properties(server.properties()).hadoop_conf()
    return [f"--hadoop={k.removeprefix('spark.hadoop.')}={v}" for k, v in settings.items()]


def hudi_spark_read(
    env: dict[str, str], *bases: Path | str, rows: bool = False, s3: Any = None
) -> dict[str, dict[str, Any]]:
    """Hudi's Spark datasource (``read_hudi.py``) on ``bases``: its JSON document per table,
    by base path. ``rows``: every row instead of the commits; ``s3``: the ``S3Server``."""
    flags = ["--rows"] if rows else ["--commits"]
    if s3 is not None:
        flags += ["--jars", env["s3_jars"], *_s3a(s3)]
    docs, stderr, code = _run(env, HUDI_READER, *flags, *map(str, bases))
    errors = [d["error"] for d in docs if "error" in d]
    assert code == 0 and len(docs) == len(bases), (errors, stderr[-3000:])
    return {d["table"]: d for d in docs}


def hudi_spark_services(env: dict[str, str], base: Path, *flags: str) -> dict[str, Any]:
    """Hudi's own table services (``hudi_services.py`` ``flags``) on the table at ``base``:
    each procedure's result rows, by name."""
    docs, stderr, code = _run(env, HUDI_SERVICES, *flags, str(base))
    assert code == 0 and docs and "error" not in docs[-1], (docs, stderr[-3000:])
    return docs[-1]


def coord_counts(rows: list[list[Any]]) -> Counter[tuple[str, int, int]]:
    """The (topic, partition, offset) rows of a reader's document, counted."""
    return Counter((t, p, o) for t, p, o in rows)


def check_commits(*docs: dict[str, Any]) -> int:
    """Per table: each batch commit's incremental rows are exactly its recorded ranges (main
    and dead letters together), a compaction's are none, and time travel counts rows so far.
    Returns the number of batch commits."""
    batches: dict[tuple[str, str], Counter[Coord]] = {}
    ranges: dict[tuple[str, str], str] = {}
    for doc in docs:
        total = 0
        for commit in doc["commits"]:
            extra, got = commit["extra"], coord_counts(commit["incremental"])
            if commit["action"] == "replacecommit":
                assert extra.get(COMPACTION_KEY) == "true" and not got, commit["instant"]
            else:
                assert PIPELINE_ID_KEY in extra, commit
                key = (extra["ingest.incarnation"], extra["ingest.batch-id"])
                assert ranges.setdefault(key, extra[RANGES_KEY]) == extra[RANGES_KEY]
                batches[key] = batches.get(key, Counter()) + got
                total += sum(got.values())
            assert commit["as_of_rows"] == total, commit["instant"]
        assert total == doc["rows"]
    for key, text in ranges.items():
        assert batches[key] == covered(batch_ranges(text)), key
    return len(ranges)


def batch_ranges(text: str) -> Intervals:
    """A commit's ``ingest.ranges`` as intervals (one [start, end) per partition)."""
    return {tp: [span] for tp, span in parse_ranges(text, RANGES_KEY).items()}


def covered(intervals: Intervals) -> Counter[Coord]:
    """Every (topic, partition, offset) the [start, end) intervals cover, once."""
    return Counter(
        (tp.topic, tp.partition, o)
        for tp, spans in intervals.items()
        for a, b in spans
        for o in range(a, b)
    )
