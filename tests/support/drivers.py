"""Run the pipeline as its own OS process (`python -m pipeline run`), as drills do, and read
back what a run wrote: (topic, partition, offset) of every row, with multiplicity."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from lab.generator import GeneratorSpec, event_schema_fields, produce
from pipeline.commit.checkpoint import DATA_LOSS_KEY
from pipeline.commit.types import DEAD_LETTER
from pipeline.config import parse_config

ROOT = Path(__file__).resolve().parent.parent.parent

Coord = tuple[str, int, int]
COORD_COLUMNS = ("_kafka_topic", "_kafka_partition", "_kafka_offset")


def pipeline_config(
    tmp: Path,
    bootstrap: str,
    topic: str,
    sink: dict[str, Any],
    *,
    source: dict[str, Any] | None = None,
    **top: Any,
) -> dict[str, Any]:
    """A config document: the generator's events on ``topic`` into ``sink``, the checkpoint
    under ``tmp``, available-now, no metrics; ``top`` sets or replaces top-level keys."""
    return {
        "id": f"p-{topic}",
        "source": {"bootstrapServers": bootstrap, "topics": [topic], **(source or {})},
        "decode": {"schema": event_schema_fields()},
        "sink": sink,
        "checkpointLocation": str(tmp / "checkpoint"),
        "trigger": {"mode": "available-now"},
        "metrics": {"enabled": False},
        **top,
    }


def iceberg_config(
    tmp: Path,
    bootstrap: str,
    topic: str,
    *,
    catalog: dict[str, Any] | None = None,
    table: str = "db.events",
    **source: Any,
) -> Any:
    """A parsed config into the Iceberg ``table`` (partitioned by day) of ``catalog``, else a
    SQLite catalog under ``tmp``; ``source`` adds source options; metrics on a free port."""
    sink = {
        "catalog": catalog or {"warehouse": str(tmp / "warehouse")},
        "table": table,
        "partitionBy": ["day(ts)"],
    }
    return parse_config(
        pipeline_config(tmp, bootstrap, topic, sink, source=source, metrics={"port": 0})
    )


def write_config(tmp: Path, cfg: dict[str, Any]) -> Path:
    """``cfg`` as ``tmp/pipeline.yaml``, for a driver process."""
    path = tmp / "pipeline.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _pipeline(args: list[str], env: dict[str, str], timeout: float) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


def run_cli(*args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m pipeline <args>`` from the repository root; ``env`` adds variables."""
    return _pipeline(list(args), {**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout)


def run_driver(config: Path, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    """One driver run on ``config``; ``fault`` arms INGEST_FAULT (e.g. ``after-commit:kill``)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "INGEST_SPARK_LOG_LEVEL": "ERROR"}
    env.pop("INGEST_FAULT", None)
    if fault:
        env["INGEST_FAULT"] = fault
    return _pipeline(["run", "--config", str(config)], env, 300)


def run_driver_ok(config: Path, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    """A driver run on ``config`` that must exit 0."""
    r = run_driver(config, fault)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def run_driver_killed(config: Path, fault: str) -> subprocess.CompletedProcess[str]:
    """A driver run on ``config`` SIGKILLed at the ``fault`` point (``<point>:kill``)."""
    r = run_driver(config, fault)
    assert r.returncode == -signal.SIGKILL, r.stderr[-3000:]
    return r


# (fault armed in a run, what the NEXT run's recovery must do with its instant)
FAULT_CHAIN = [
    ("after-requested:kill", "rolled_back"),
    ("after-write:kill", "rolled_back"),
    ("during-rollback:kill", None),  # dies while rolling back the previous run's instant
    ("after-precommit:kill", "recommitted"),
    ("after-dead-letter-commit:kill", "recommitted"),
    ("after-commit:kill", "completed"),
    ("after-commit-before-checkpoint:kill", "replay_skipped"),
]


def killed_at_every_fault_point(bootstrap: str, topic: str, config: Path, seed: int) -> list[Any]:
    """Per point of :data:`FAULT_CHAIN`: 600 new records (5 % malformed, seeds from ``seed``),
    then a driver run SIGKILLed there. The ``produce`` results, in order."""
    results = []
    for i, (fault, _) in enumerate(FAULT_CHAIN):
        spec = GeneratorSpec(count=600, malformed_fraction=0.05, seed=seed + i)
        results.append(produce(bootstrap, topic, spec))
        r = run_driver(config, fault)
        assert r.returncode == -signal.SIGKILL, (fault, r.returncode, r.stderr[-2000:])
    return results


_COMMIT_LINE = re.compile(r"(\d+) records in (\S+)(?: as snapshot| \()")


def logged_records(messages: list[str]) -> dict[str, int]:
    """Records per table from the commit log lines (Iceberg name or Hudi base path)."""
    out: dict[str, int] = {}
    for msg in messages:
        m = _COMMIT_LINE.search(msg)
        if m:
            out[m[2]] = out.get(m[2], 0) + int(m[1])
    return out


def produced(*results: Any) -> Counter[Coord]:
    """Every (topic, partition, offset) the generator's ``produce`` results wrote, once."""
    return Counter(
        (t, p, o) for r in results for (t, p), (a, b) in r.offsets.items() for o in range(a, b + 1)
    )


def arrow_coords(table: Any) -> Counter[Coord]:
    """(topic, partition, offset) of every row of an Arrow table (None or no rows: empty)."""
    if table is None or table.num_rows == 0:
        return Counter()
    return Counter(zip(*(table[c].to_pylist() for c in COORD_COLUMNS), strict=True))


def iceberg_coords(*committers: Any) -> Counter[Coord]:
    """(topic, partition, offset) over the Iceberg tables of ``committers`` (a committer that
    is None or whose table does not exist yet counts nothing)."""
    out: Counter[Coord] = Counter()
    for committer in committers:
        table = committer.table() if committer is not None else None
        if table is not None:
            out.update(arrow_coords(table.scan(selected_fields=COORD_COLUMNS).to_arrow()))
    return out


def iceberg_table_coords(warehouse: Path, identifier: str) -> Counter[Coord]:
    """(topic, partition, offset) of the Iceberg table ``identifier`` in the default SQLite
    catalog of ``warehouse``, read by pyiceberg."""
    from pyiceberg.catalog import load_catalog

    from pipeline.config import CatalogConfig

    props = CatalogConfig(warehouse=str(warehouse)).pyiceberg_properties()
    table = load_catalog("lake", **props).load_table(identifier)
    return arrow_coords(table.scan(selected_fields=COORD_COLUMNS).to_arrow())


def coords(pipeline: Any) -> Counter[Coord]:
    """(topic, partition, offset) over a pipeline's main and dead-letter Iceberg tables."""
    tables = pipeline.tables.commit_tables()
    return iceberg_coords(tables.main, tables.get(DEAD_LETTER))


def recorded_data_loss(pipeline: Any) -> list[Any]:
    """The data-loss skips recorded in the main Iceberg table's snapshot summaries."""
    table = pipeline.tables.commit_tables().main.table()
    assert table is not None
    return [
        json.loads(s.summary.additional_properties[DATA_LOSS_KEY])
        for s in table.snapshots()
        if s.summary is not None and DATA_LOSS_KEY in s.summary.additional_properties
    ]


# -- Hudi tables, read through hudi-rs (the ``hudi`` package), an independent reader ----------


def hudi_read(base: Path | str, s3: Any = None) -> Any:
    """The Hudi table at ``base`` as one Arrow table; None without a ``.hoodie`` or rows.
    ``s3``: the ``S3Server`` an ``s3://`` base is on (the table must exist there)."""
    import hudi
    import pyarrow as pa

    from pipeline.formats.hudi.storage import reader_options
    from pipeline.storage.s3_settings import S3Settings

    builder = hudi.HudiTableBuilder.from_base_uri(str(base))
    if s3 is not None:
        builder = builder.with_storage_options(
            reader_options(S3Settings.from_properties(s3.properties()))
        )
    elif not (Path(base) / ".hoodie").is_dir():
        return None
    batches = builder.build().read()
    return pa.Table.from_batches(batches) if batches else None


def hudi_coords(*bases: Path) -> Counter[Coord]:
    """(topic, partition, offset) over the Hudi tables at ``bases``."""
    out: Counter[Coord] = Counter()
    for base in bases:
        out.update(arrow_coords(hudi_read(base)))
    return out


def hudi_completed_commits(base: Path) -> list[str]:
    """Instant times of the completed commits on the timeline of the Hudi table at ``base``."""
    import hudi

    table = hudi.HudiTableBuilder.from_base_uri(str(base)).build()
    return [i.timestamp for i in table.get_timeline().get_completed_commits()]


def hudi_base_files(base: Path) -> set[str]:
    """Parquet files under ``base`` outside hidden folders (``.hoodie``, staging), relative."""
    return {
        str(p.relative_to(base))
        for p in base.rglob("*.parquet")
        if not any(x.startswith(".") for x in p.relative_to(base).parts)
    }
