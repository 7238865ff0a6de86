"""``ingest status``: the run state kept next to the checkpoint and "running or stopped"
from the driver's real metrics endpoint. No Spark, no broker: the end-to-end case (a
data-loss stop of a real pipeline, then ``ingest status``) is in test_verify.py, on its
tables."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from pipeline.config import PipelineConfig, parse_config
from pipeline.formats.base import LastBatch, TableStatus
from pipeline.observe.metrics import PipelineMetrics
from pipeline.observe.runstate import FILE_NAME, read_run_state, record_run_state
from pipeline.ops.status import print_set_status, run_status, set_summary, table_line


def _cfg(tmp_path: Path, checkpoint: str | None = None, **metrics: object) -> PipelineConfig:
    return parse_config(
        {
            "id": "status-test",
            "source": {"bootstrapServers": "127.0.0.1:9", "topics": ["t"]},
            "decode": {"schema": [{"name": "id", "type": "long"}]},
            "sink": {"table": "db.t", "catalog": {"warehouse": str(tmp_path / "wh")}},
            "checkpointLocation": checkpoint or str(tmp_path / "checkpoint"),
            "metrics": {"enabled": True, "port": 0, **metrics},
        }
    )


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    return int(proc.stdout)


def test_run_state_file_is_local_atomic_and_never_creates_the_checkpoint(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    ckpt = tmp_path / "checkpoint"
    assert record_run_state(cfg, "running", None) is None  # no checkpoint dir: nothing made
    assert not ckpt.exists()
    assert "no run recorded" in (read_run_state(cfg).note or "")
    ckpt.mkdir()
    assert record_run_state(cfg, "stopped", "[ingest:data-loss] gone") == ckpt / FILE_NAME
    assert sorted(p.name for p in ckpt.iterdir()) == [FILE_NAME]  # the temp file was renamed
    rs = read_run_state(cfg)
    assert (rs.state, rs.error, rs.pid, rs.pipeline_id) == (
        "stopped",
        "[ingest:data-loss] gone",
        os.getpid(),
        "status-test",
    )
    # file: URIs are local too; object stores are skipped quietly and status says so
    uri = _cfg(tmp_path, checkpoint=ckpt.as_uri())
    assert read_run_state(uri).error == "[ingest:data-loss] gone"
    remote = _cfg(tmp_path, checkpoint="s3a://bucket/ckpt")
    assert record_run_state(remote, "running", None) is None
    state, lines = run_status(remote.model_copy(update={"metrics": cfg.metrics.model_copy(
        update={"enabled": False})}))  # fmt: skip
    assert state == "unknown" and any("not a local path" in ln for ln in lines)

    # a stop recorded: stopped, with the error line (the endpoint is not up)
    state, lines = run_status(cfg)
    assert state == "stopped" and "last error: [ingest:data-loss] gone" in lines
    # "running" recorded by a process that is gone: stopped, killed
    path = ckpt / FILE_NAME
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "state": "running", "error": None, "pid": _dead_pid()}))
    state, lines = run_status(cfg)
    assert state == "stopped" and "without recording a stop" in lines[0]


def test_running_and_ready_come_from_the_metrics_endpoint(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    (tmp_path / "checkpoint").mkdir()
    metrics = PipelineMetrics(cfg.id, table="db.t", format_name="iceberg", host="127.0.0.1", port=0)
    metrics.start()
    try:
        record_run_state(cfg, "running", None, metrics_url=metrics.url)  # port 0: recorded
        metrics.set_query_active(True)
        state, lines = run_status(cfg)
        assert state == "running" and lines[0] == f"metrics endpoint {metrics.url}: ready"
        metrics.mark_failed("[ingest:data-loss] partition t[0] below the log start", 3)
        state, lines = run_status(cfg)
        assert state == "running" and "NOT READY: batch 3 failed" in lines[0], lines
        # an endpoint serving another pipeline does not count as this one running
        at_port = cfg.metrics.model_copy(update={"port": metrics.port, "host": "127.0.0.1"})
        other = cfg.model_copy(update={"id": "someone-else", "metrics": at_port})
        state, lines = run_status(other)
        assert state != "running" and any("serves another pipeline" in ln for ln in lines)
    finally:
        metrics.stop()
    # the endpoint is gone but the recorded process (this one) lives: still running
    state, lines = run_status(cfg)
    assert state == "running" and any("not reachable" in ln for ln in lines), lines


def _table(name: str, batch: int | None, exists: bool = True) -> TableStatus:
    last = None
    if batch is not None:
        last = LastBatch("p1", batch, "inc-1", 3, None, 1_700_000_000.0, {})
    return TableStatus(f"table {name}", "/wh/" + name, exists, "4 snapshots", last_batch=last)


def test_a_routed_set_of_twenty_tables_reads_one_line_per_table_and_one_for_the_set() -> None:
    statuses = [_table(f"db.t{i:02d}", 7) for i in range(20)]
    out = io.StringIO()
    last = print_set_status(statuses, "p1", Console(file=out, width=200))
    lines = out.getvalue().splitlines()
    assert len(last) == 20 and len(lines) == 22  # the pipeline, 20 tables, the set
    assert lines[0] == "pipeline p1: incarnation inc-1, writer epoch 3"
    assert all(f"table db.t{i:02d}: batch 7, 4 snapshots" in lines[i + 1] for i in range(20))
    assert lines[-1] == "routed set: 20 tables, every table holds batch 7"


def test_a_table_behind_the_set_is_named() -> None:
    statuses = [_table("db.a", 7), _table("db.b", 6), _table("db.c", None, exists=False)]
    assert set_summary(statuses) == (
        "routed set: 3 tables, batch 7 in 1 of them; behind: table db.b (batch 6), "
        "table db.c (nothing committed) (the next run rolls the set forward)"
    )
    assert table_line(statuses[2], "p1") == "table db.c: does not exist yet (nothing committed)"
    assert set_summary([_table("db.a", None)]) == "routed set: 1 table, no batch committed yet"
