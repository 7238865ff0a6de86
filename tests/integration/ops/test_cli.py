"""The CLI's own commands: broker, produce, rest-catalog, Java check."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from pipeline.errors import EnvironmentProblem
from pipeline.spark.session import check_java

ROOT = Path(__file__).resolve().parents[3]


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
        head = broker.stdout.readline()
        assert head.startswith("Apache Kafka 4.") and "1 node(s)" in head, head
        data_dir = Path(head.rsplit("data in ", 1)[1].strip())
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
    assert not data_dir.exists()  # a clean stop removes its own temporary log directory


def test_rest_catalog_command_serves_the_catalog_block_it_prints(tmp_path: Path) -> None:
    import yaml
    from support.pg_fixtures import require_postgres_uri

    from pipeline.config.sink import CatalogConfig
    from pipeline.formats.iceberg.catalog import load_catalog

    postgres = require_postgres_uri()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "rest-catalog", "--postgres", postgres,
         "--data-dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        lines: list[str] = []
        while not lines or lines[-1] != "press Ctrl-C to stop":
            line = server.stdout.readline()
            assert line, f"exited {server.poll()}: {server.stderr.read() if server.stderr else ''}"
            lines.append(line.rstrip("\n"))
        assert lines[0].startswith("Iceberg REST catalog: http://127.0.0.1:"), lines
        block = yaml.safe_load("\n".join(lines[lines.index("sink:") : -1]))
        catalog = CatalogConfig.model_validate(block["sink"]["catalog"])
        assert catalog.type == "rest"
        lake = load_catalog(catalog.name, catalog.pyiceberg_properties())
        lake.create_namespace_if_not_exists("cli")
        assert ("cli",) in lake.list_namespaces()
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            server.kill()


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


@pytest.mark.extended  # CI's budget: test_cluster's spark-submit to a standalone cluster covers it
def test_spark_submit_of_main_py_from_a_checkout(kafka_broker: Any, tmp_path: Path) -> None:
    """`spark-submit pipeline/main.py --config …` (a bare --config means `run`)."""
    import yaml

    from lab.generator import GeneratorSpec, event_schema_fields, produce
    from pipeline.config import load_config
    from pipeline.formats.iceberg.pipeline_tables import IcebergTables

    topic = kafka_broker.new_topic("submit", 2)
    produce(kafka_broker.bootstrap_servers, topic, GeneratorSpec(count=400, seed=7))
    cfg_file = tmp_path / "p.yaml"
    cfg_file.write_text(
        yaml.safe_dump(
            {
                "id": "submit",
                "source": {"bootstrapServers": kafka_broker.bootstrap_servers, "topics": [topic]},
                "decode": {"schema": event_schema_fields()},
                "sink": {"catalog": {"warehouse": str(tmp_path / "wh")}, "table": "db.submitted"},
                "checkpointLocation": str(tmp_path / "ckpt"),
                "trigger": {"mode": "available-now"},
                "metrics": {"enabled": False},
            }
        )
    )
    submit = Path(sys.executable).parent / "spark-submit"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{submit.parent}:{env.get('PATH', '')}"  # the venv, as when activated
    r = subprocess.run(
        [
            str(submit),
            "--master",
            "local[2]",
            str(ROOT / "pipeline" / "main.py"),
            "--config",
            str(cfg_file),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    table = IcebergTables.from_config(load_config(cfg_file)).main.table()
    assert table is not None and len(table.scan().to_arrow()) == 400


def test_drill_kills_apply_to_the_fast_matrix_and_its_default_is_printed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ingest drill --kills 20` under the default (fast) matrix ran 2 kills silently."""
    import lab.drill.runner as runner
    from pipeline.cli import main

    seen: list[Any] = []

    def fake_run_drills(specs: Any, opts: Any, console: Any) -> list[Any]:
        seen.append(specs)
        return []

    monkeypatch.setattr(runner, "run_drills", fake_run_drills)
    for argv, kills in (
        (["--kills", "20"], 20),
        ([], 2),
        (["--kills", "5", "--matrix", "full"], 5),
    ):
        main(["drill", "--out", str(tmp_path / "d"), *argv])  # exit 0: returns
        assert seen[-1] and {s.kills for s in seen[-1] if s.scenario == "kill"} == {kills}, argv
    assert (
        "fast matrix: 2 SIGKILL restarts per drill (--kills N to change" in capsys.readouterr().out
    )


def test_bench_without_flags_runs_the_quick_preset(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ingest bench` without flags started the ~40-minute full preset."""
    import lab.bench.runner as runner
    from pipeline.cli import main

    presets: list[str] = []
    extras: list[list[str]] = []

    def fake(opts: Any, console: Any, extra: Any = None) -> None:
        presets.append(opts.preset)
        extras.append(sorted(extra or {}))

    monkeypatch.setattr(runner, "run_bench", fake)
    for argv in ([], ["--quick"], ["--full"]):
        main(["bench", "--out", "unused", *argv])
    assert presets == ["quick", "quick", "full"]
    # the peers and tables sections are handed in (each run when selected)
    assert extras == [["peers", "tables"]] * 3
