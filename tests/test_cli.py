"""The CLI's own commands: broker, produce, Java check."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from pipeline.errors import EnvironmentProblem
from pipeline.spark.session import check_java

ROOT = Path(__file__).resolve().parent.parent


def test_broker_and_produce_commands() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    broker = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "broker", "--topic", "clicks:3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert broker.stdout is not None
        line = broker.stdout.readline()
        assert line.startswith("bootstrap servers: "), line
        bootstrap = line.split(": ", 1)[1].strip()
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "pipeline",
                "produce",
                "--bootstrap",
                bootstrap,
                "--topic",
                "clicks",
                "--count",
                "300",
                "--malformed",
                "0.1",
            ],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        assert "produced 300 events (30 malformed)" in r.stdout
        c = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "cli-test", "enable.auto.commit": False}
        )
        try:
            total = 0
            for p in range(3):
                low, high = c.get_watermark_offsets(TopicPartition("clicks", p), timeout=10)
                total += high - low
            assert total == 300
        finally:
            c.close()
    finally:
        broker.send_signal(signal.SIGINT)
        broker.wait(30)
    assert broker.returncode == 0


def test_missing_java_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-java-here"))
    with pytest.raises(EnvironmentProblem, match="openjdk-17-jre-headless"):
        check_java()
    monkeypatch.delenv("JAVA_HOME")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EnvironmentProblem, match="Java was not found"):
        check_java()


def test_old_java_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "java"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(EnvironmentProblem, match="Java 11 found, Spark 4 needs Java 17"):
        check_java()
