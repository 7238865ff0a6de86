"""The pipeline on a real Spark standalone cluster (lab/cluster.py): a master and
two workers, each its own JVM, executors in JVMs of their own launched by the workers, the
driver submitted with ``scripts/spark-submit.sh standalone``. Every record produced must be
in the Iceberg tables exactly once, and tasks must have run in executors of both workers.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.drivers import iceberg_coords, pipeline_config, produced, write_config

from lab.cluster import StandaloneCluster, cmdline

ROOT = Path(__file__).resolve().parents[3]
SUBMIT = ROOT / "scripts" / "spark-submit.sh"


def _java(pid: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/exe").endswith("/java")
    except OSError:
        return False


def _jvms(cluster: StandaloneCluster, driver: int) -> dict[str, list[int]]:
    """The cluster's JVMs now, by role; the driver is ``driver`` once spark-submit's
    launcher has exec'd into the SparkSubmit JVM."""
    master = cluster.master.pid if cluster.master and cluster.master.poll() is None else None
    roles = {
        "master": [master] if master else [],
        "worker": [p for w in cluster.workers if (p := w.pid)],
        "executor": [e for w in cluster.workers for e in w.executor_pids()],
        "driver": [driver] if "org.apache.spark.deploy.SparkSubmit" in cmdline(driver) else [],
    }
    return {r: [p for p in pids if _java(p)] for r, pids in roles.items()}


def _inside(root: Path) -> list[int]:
    """Processes whose working directory is inside ``root``."""
    out = []
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(os.readlink(f"/proc/{d}/cwd")).is_relative_to(root):
                out.append(int(d))
        except OSError:
            continue
    return out


def _task_executors(event_dir: Path) -> Counter[str]:
    """Executor id -> tasks that ended successfully there, from the driver's event log."""
    ran: Counter[str] = Counter()
    for log in event_dir.rglob("events_*"):  # eventlog_v2_<app id>/events_<n>_<app id>
        for line in log.read_text().splitlines():
            ev = json.loads(line)
            if ev["Event"] == "SparkListenerTaskEnd" and ev["Task End Reason"]["Reason"] == (
                "Success"
            ):
                ran[ev["Task Info"]["Executor ID"]] += 1
    return ran


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_spark_submit_to_a_standalone_cluster_exactly_once(
    kafka_broker: Any, tmp_path: Path
) -> None:
    from lab.generator import GeneratorSpec, produce
    from pipeline.config import parse_config
    from pipeline.formats.iceberg.pipeline_tables import IcebergTables

    t0 = time.monotonic()
    with StandaloneCluster(tmp_path / "cluster", workers=2, cores=1, memory="1g") as cluster:
        up_s = time.monotonic() - t0
        topic = kafka_broker.new_topic("cluster", 4)
        spec = GeneratorSpec(count=3000, malformed_fraction=0.02, seed=11)
        res = produce(kafka_broker.bootstrap_servers, topic, spec, partitions=4)
        assert res.produced == 3000
        want = produced(res)
        assert len(want) == 3000  # contiguous offsets per partition: every one is expected
        sink = {"catalog": {"warehouse": str(tmp_path / "warehouse")}, "table": "db.events"}
        doc = pipeline_config(
            tmp_path,
            kafka_broker.bootstrap_servers,
            topic,
            sink,
            source={"maxRecordsPerTrigger": 1000},  # several batches, 2 tasks each
        )
        config = write_config(tmp_path, doc)
        events = tmp_path / "events"
        events.mkdir()
        confs = {
            "spark.executor.memory": "512m",
            # the first batch waits for both executors, so both get tasks; under load an
            # executor may take longer to register than the default 30 s of waiting
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "180s",
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": events.as_uri(),
            "spark.eventLog.compress": "false",
        }
        driver_cwd = tmp_path / "driver"
        driver_cwd.mkdir()
        env = {**os.environ, "INGEST_SPARK_LOG_LEVEL": "ERROR"}
        env["SPARK_SUBMIT"] = str(Path(sys.executable).parent / "spark-submit")
        t_job = time.monotonic()
        proc = subprocess.Popen(
            [
                "bash", str(SUBMIT), "standalone", "--master", cluster.master_url,
                "--config", str(config),
                *(x for k, v in confs.items() for x in ("--conf", f"{k}={v}")),
            ],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=driver_cwd,
        )  # fmt: skip
        # sample the JVMs while the job runs: the most seen at once
        most: dict[str, list[int]] = {}
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.3):
                seen = _jvms(cluster, proc.pid)
                if sum(map(len, seen.values())) > sum(map(len, most.values())):
                    most.clear()
                    most.update(seen)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            out, err = proc.communicate(timeout=240)
        finally:
            done.set()
            sampler.join()
            if proc.poll() is None:
                proc.kill()
        job_s = time.monotonic() - t_job
        assert proc.returncode == 0, out[-2000:] + err[-4000:]
        assert re.search(r"stopped: [1-9]\d* batches committed", out + err), out[-2000:]
        # separate JVMs: master, 2 workers, an executor under each, the driver's
        assert {r: len(p) for r, p in most.items()} == {
            "master": 1, "worker": 2, "executor": 2, "driver": 1
        }, most  # fmt: skip
        assert len({p for pids in most.values() for p in pids}) == 6
        # tasks ran in executors (never the driver), under both workers: executor dirs are
        # <worker work dir>/<app id>/<executor id>
        ran = _task_executors(events)
        assert ran and "driver" not in ran, ran
        by_worker = {
            w.n: {d.name for d in (w.dir / "work").glob("app-*/*") if d.is_dir()}
            for w in cluster.workers
        }
        assert all(by_worker.values()), by_worker
        for n, ids in by_worker.items():
            assert any(ran[i] for i in ids), (n, ids, ran)
        driver_py = re.search(r"ingest: package pipeline from (\S+)", out + err)
        assert driver_py and driver_py[1].startswith(str(ROOT / "dist" / "spark")), err[-2000:]
        t_down = time.monotonic()
    down_s = time.monotonic() - t_down
    assert not list(_inside(tmp_path / "cluster"))  # no process left in the cluster's dirs
    # exactly once: every produced (topic, partition, offset) once in main + dead letters
    tables = IcebergTables.from_config(parse_config(doc))
    got = iceberg_coords(tables.main, tables.dead_letter)
    assert got == want, (len(want - got), sum(n - 1 for n in got.values() if n > 1))
    print(f"cluster up {up_s:.1f}s, job {job_s:.1f}s, down {down_s:.1f}s; tasks by executor {ran}")
