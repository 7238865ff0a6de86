"""Graceful stop of ``ingest run`` on SIGTERM/SIGINT (docs/deploy.md, "Stopping").

Each driver is an ``ingest run`` subprocess in its own session, and the signal goes to the
whole process group -- as tini -g sends Kubernetes' SIGTERM to the driver and its JVM. A
signal lands inside a batch deterministically through the ``sleep`` fault action (the
batch's instant is pending while the driver sleeps at the fault point).

Checked every time: exit 0 within ``run.stopTimeoutSeconds``, the ``stopped: …`` summary
line on stdout, no ``Traceback`` on stderr; then the next run resumes and every produced
record is in the table(s) exactly once, counted by (topic, partition, offset).

Default suite: Iceberg, mid-batch then idle (two driver runs). Slow: Hudi mid-batch, a stop
cut short by the timeout, a second signal, idle.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from support.drivers import (
    hudi_coords,
    iceberg_coords,
    pipeline_config,
    produced,
    write_config,
)
from support.kafka_fixtures import KafkaTestBroker

from pipeline.config import load_config
from pipeline.tools.generator import GeneratorSpec, produce

ROOT = Path(__file__).resolve().parent.parent
STOP_TIMEOUT_S = 20.0


def _config(tmp: Path, bootstrap: str, topic: str, fmt: str, **run: Any) -> Path:
    if fmt == "hudi":
        sink = {
            "format": "hudi",
            "table": "db.events",
            "hudi": {"basePath": str(tmp / "lake" / "events")},
        }
    else:
        sink = {"catalog": {"warehouse": str(tmp / "warehouse")}, "table": "db.events"}
    cfg = pipeline_config(
        tmp,
        bootstrap,
        topic,
        sink,
        id=f"stop-{topic}",
        trigger={"mode": "processing-time", "interval": "1 second"},
        spark={"master": "local[2]"},
        run={"stopTimeoutSeconds": STOP_TIMEOUT_S, **run},
    )
    return write_config(tmp, cfg)


class Driver:
    """One ``ingest run`` in its own process group."""

    def __init__(self, config: Path, fault: str | None = None) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "INGEST_SPARK_LOG_LEVEL": "ERROR"}
        env.pop("INGEST_FAULT", None)
        env["INGEST_LOG_FILE"] = str(config.parent / "ingest.log")
        if fault:
            env["INGEST_FAULT"] = fault
        self.cfg = load_config(config)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "run", "--config", str(config)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.signalled_at = 0.0

    def signal(self, sig: int = signal.SIGTERM) -> None:
        if not self.signalled_at:
            self.signalled_at = time.monotonic()
        os.killpg(self.proc.pid, sig)  # the driver and its JVM, as tini -g does

    def finish(self, timeout: float = STOP_TIMEOUT_S + 30) -> tuple[int, str, str, float]:
        """(exit code, stdout, stderr, seconds from the first signal to the exit)."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            out, err = self.proc.communicate()
            raise AssertionError(f"driver did not exit:\n{out[-3000:]}\n{err[-3000:]}") from None
        return self.proc.returncode, out, err, time.monotonic() - self.signalled_at

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.communicate()


def _sinks(cfg: Any) -> Any:
    if cfg.sink.format == "hudi":
        from pipeline.formats.hudi.pipeline_tables import HudiTables

        return HudiTables.from_config(cfg)
    from pipeline.formats.iceberg.pipeline_tables import IcebergTables

    return IcebergTables.from_config(cfg)


def _coords(cfg: Any) -> Counter[tuple[str, int, int]]:
    """(topic, partition, offset) of every row in the main and dead-letter tables."""
    if cfg.sink.format == "hudi":
        base = Path(cfg.sink.hudi.base_path)
        return hudi_coords(base, Path(f"{base}_dead_letter"))
    sinks = _sinks(cfg)
    return iceberg_coords(sinks.main, sinks.dead_letter)


def _wait(cond: Any, driver: Driver, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        if driver.proc.poll() is not None:
            out, err = driver.proc.communicate()
            raise AssertionError(f"driver exited while waiting for {what}:\n{out[-2000:]}\n{err}")
        time.sleep(0.2)
    driver.kill()
    raise AssertionError(f"timed out waiting for {what}")


def _pending(cfg: Any) -> Any:
    timeline = _sinks(cfg).timeline(cfg.id)
    return lambda: bool(timeline.pending())


def _assert_clean_stop(
    rc: int, out: str, err: str, elapsed: float, batches: int | None = None
) -> str:
    assert rc == 0, f"exit {rc}\n{out[-3000:]}\n{err[-3000:]}"
    assert "Traceback" not in err, err[-5000:]
    summary = [ln for ln in out.splitlines() if ln.startswith("stopped: ")]
    assert len(summary) == 1, out[-3000:]
    if batches is not None:
        assert summary[0].startswith(f"stopped: {batches} batches committed"), summary[0]
    assert elapsed < STOP_TIMEOUT_S, f"took {elapsed:.1f} s to stop\n{out[-3000:]}"
    return summary[0]


def _mid_batch_then_idle(kafka_broker: KafkaTestBroker, tmp_path: Path, fmt: str) -> None:
    topic = kafka_broker.new_topic(f"stop-{fmt}", 2)
    config = _config(tmp_path, kafka_broker.bootstrap_servers, topic, fmt)
    first = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=400, seed=61))

    # 1. SIGTERM while batch 0 is pending (its workers write, then it sleeps 6 s before
    # pre-commit): the batch commits, then the query stops.
    driver = Driver(config, fault="after-write:sleep=4@0")
    try:
        _wait(_pending(driver.cfg), driver, 120, "batch 0 to start")
        driver.signal(signal.SIGTERM)
        rc, out, err, elapsed = driver.finish()
    finally:
        driver.kill()
    _assert_clean_stop(rc, out, err, elapsed, batches=1)
    assert elapsed > 2, "the stop did not wait for the batch"
    assert _coords(driver.cfg) == produced(first)  # the batch committed, not cut
    assert not _pending(driver.cfg)()

    # 2. The next run resumes, commits the new records, idles; SIGTERM stops it promptly.
    second = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=300, seed=62))
    want = produced(first, second)
    driver = Driver(config)
    try:
        _wait(lambda: sum(_coords(driver.cfg).values()) >= want.total(), driver, 120, "resume")
        time.sleep(1.0)  # idle: nothing new to read
        driver.signal(signal.SIGTERM)
        rc, out, err, elapsed = driver.finish()
    finally:
        driver.kill()
    _assert_clean_stop(rc, out, err, elapsed)
    assert elapsed < 10, f"an idle stop took {elapsed:.1f} s"
    assert _coords(driver.cfg) == want


def test_sigterm_mid_batch_and_idle_iceberg(kafka_broker: KafkaTestBroker, tmp_path: Path) -> None:
    _mid_batch_then_idle(kafka_broker, tmp_path, "iceberg")


@pytest.mark.slow
def test_sigterm_mid_batch_and_idle_hudi(kafka_broker: KafkaTestBroker, tmp_path: Path) -> None:
    pytest.importorskip("hudi")
    _mid_batch_then_idle(kafka_broker, tmp_path, "hudi")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["iceberg", "hudi"])
def test_stop_cut_short_then_second_signal_then_resume(
    kafka_broker: KafkaTestBroker, tmp_path: Path, fmt: str
) -> None:
    """A batch stuck past run.stopTimeoutSeconds: exit 0, summary says "cut short"; a
    second signal exits at once (130); either way the next run recovers exactly once."""
    if fmt == "hudi":
        pytest.importorskip("hudi")
    topic = kafka_broker.new_topic(f"cut-{fmt}", 2)
    config = _config(tmp_path, kafka_broker.bootstrap_servers, topic, fmt, stopTimeoutSeconds=3)
    first = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=400, seed=71))

    # 1. pre-committed, then stuck for 60 s: the stop gives up after 3 s
    driver = Driver(config, fault="after-precommit:sleep=60@0")
    try:
        _wait(_pending(driver.cfg), driver, 120, "batch 0 to start")
        driver.signal(signal.SIGINT)  # Ctrl-C behaves like SIGTERM
        rc, out, err, elapsed = driver.finish()
    finally:
        driver.kill()
    summary = _assert_clean_stop(rc, out, err, elapsed, batches=0)
    assert "cut short" in summary and "next run recovers" in summary, summary
    assert elapsed < 3 + 5, f"took {elapsed:.1f} s"

    # 2. new records; the recovering run gets stuck in its next batch; two signals: at once
    second = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=300, seed=72))
    driver = Driver(config, fault="after-write:sleep=60@1")
    try:
        _wait(lambda: bool(_coords(driver.cfg)), driver, 120, "the recommit of batch 0")
        _wait(_pending(driver.cfg), driver, 60, "the next batch to start")
        driver.signal(signal.SIGTERM)
        time.sleep(0.5)
        driver.signal(signal.SIGTERM)
        rc, out, err, elapsed = driver.finish()
    finally:
        driver.kill()
    assert rc == 130, f"exit {rc}\n{err[-3000:]}"
    assert elapsed < 5, f"a second signal took {elapsed:.1f} s"
    assert "Traceback" not in err, err[-5000:]
    assert "second stop signal" in err, err

    # 3. the next run recovers, catches up, and stops idle
    want = produced(first, second)
    driver = Driver(config)
    try:
        _wait(lambda: sum(_coords(driver.cfg).values()) >= want.total(), driver, 120, "resume")
        driver.signal(signal.SIGTERM)
        rc, out, err, elapsed = driver.finish()
    finally:
        driver.kill()
    _assert_clean_stop(rc, out, err, elapsed)
    assert _coords(driver.cfg) == want
    assert not _pending(driver.cfg)()


def test_batch_planned_while_halting_fails_unlogged_and_is_replayed(
    spark: Any, kafka_broker: KafkaTestBroker, tmp_path: Path
) -> None:
    """A batch Spark plans in the moment the stop decided to stop the
    query (halting, no batch inside) is refused by raising from foreachBatch -- no wait
    for ``query.stop()``, no sleep: Spark cannot log it as committed, the run ends
    cleanly, and the next run replays it: every record exactly once. (Before: the batch
    waited for a ``query.stop()`` that came from nobody here, then failed the run.)"""
    from support.drivers import coords, iceberg_config

    from pipeline.app import Pipeline

    topic = kafka_broker.new_topic("halting", 2)
    r = produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=2000, seed=63))
    cfg = iceberg_config(tmp_path, kafka_broker.bootstrap_servers, topic, maxRecordsPerTrigger=100)
    p = Pipeline(cfg, spark)
    gate = p.stopping

    def halt_between_batches(stats: Any) -> None:
        # what stop_between_batches does before query.stop(): halt while no batch is inside
        if stats.batches >= 1:
            with gate._gate:
                if not gate._in_batch:
                    gate._halting = True

    started = time.monotonic()
    stats = p.run(tick=halt_between_batches, timeout_s=120)
    assert gate._halted_batch is not None, "no batch was planned while halting"
    assert time.monotonic() - started < 100
    committed = sum(coords(p).values())
    assert 0 < committed < 2000 and stats.batches >= 1
    again = Pipeline(cfg, spark)
    again.run(timeout_s=120)  # replays the halted batch, then drains
    assert coords(again) == produced(r)
