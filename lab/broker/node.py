"""One KRaft node of a :class:`~lab.broker.KafkaCluster`: its ports and home
directory, its ``server.properties``, the JVM command lines that format its storage and run
it, and the start-up diagnostics (Java missing, the last error line of its log)."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.processes import die_with_parent
from pipeline import jvm
from pipeline.errors import EnvironmentProblem

LOG4J2 = """\
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = out
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
logger.state.name = state.change.logger
logger.state.level = ERROR
"""


def _kafka_version() -> str:
    for coords in jvm.manifest_sets().get("kafka", []):
        _group, artifact, version = coords.split(":")
        if artifact.startswith("kafka_"):
            return version
    return "unknown"


KAFKA_VERSION = _kafka_version()


class BrokerStartError(EnvironmentProblem):
    """A Kafka node did not start (Java missing, a port taken, a bad setting)."""


@dataclass
class Node:
    node_id: int
    port: int
    sasl_port: int
    controller_port: int
    home: Path
    process: subprocess.Popen[bytes] | None = None
    paused: bool = False
    log_file: Any = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def server_properties(
    node: Node,
    voters: str,
    replication_factor: int,
    min_insync_replicas: int,
    extra: Mapping[str, str],
) -> str:
    """``server.properties`` of ``node``; ``extra`` (the cluster's ``broker_config``)
    overrides any of them."""
    rf, isr = replication_factor, min_insync_replicas
    jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": (
            f"PLAINTEXT://127.0.0.1:{node.port},SASL_PLAINTEXT://127.0.0.1:{node.sasl_port},"
            f"CONTROLLER://127.0.0.1:{node.controller_port}"
        ),
        "advertised.listeners": (
            f"PLAINTEXT://127.0.0.1:{node.port},SASL_PLAINTEXT://127.0.0.1:{node.sasl_port}"
        ),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": (
            "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
        ),
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": jaas,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": jaas,
        "log.dirs": str(node.home / "data"),
        "num.partitions": "1",
        "default.replication.factor": str(rf),
        "min.insync.replicas": str(isr),
        "offsets.topic.replication.factor": str(rf),
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.replication.factor": str(rf),
        "transaction.state.log.min.isr": str(isr),
        "transaction.state.log.num.partitions": "5",
        "share.coordinator.state.topic.replication.factor": str(rf),
        "share.coordinator.state.topic.min.isr": str(isr),
        "group.initial.rebalance.delay.ms": "0",
        "unclean.leader.election.enable": "false",
        # faults show within seconds, not the production minutes
        "broker.heartbeat.interval.ms": "1000",
        "broker.session.timeout.ms": "4000",
        "log.retention.check.interval.ms": "1000",
        "log.initial.task.delay.ms": "1000",
        "log.cleaner.backoff.ms": "1000",
        "num.network.threads": "2",
        "num.io.threads": "4",
        **extra,
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


def jvm_options(node: Node, *, heap_mb: int) -> list[str]:
    return [
        f"-Xms{min(heap_mb, 256)}m",
        f"-Xmx{heap_mb}m",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={node.home / 'log4j2.properties'}",
        f"-Dkafka.logs.dir={node.home}",
    ]


def start_format(node: Node, java: str, classpath: str, cluster_id: str) -> subprocess.Popen[bytes]:
    """Start formatting ``node``'s storage (``kafka.tools.StorageTool format``); the caller
    waits for it. Its ``server.properties`` must be written."""
    return subprocess.Popen(
        [
            java,
            *jvm_options(node, heap_mb=128),
            "-cp",
            classpath,
            "kafka.tools.StorageTool",
            "format",
            "--ignore-formatted",
            f"--cluster-id={cluster_id}",
            "-c",
            str(node.home / "server.properties"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def spawn(node: Node, java: str, classpath: str, heap_mb: int) -> None:
    """Start ``node``'s broker process; its output is appended to ``broker.log``."""
    if node.log_file is None:
        node.log_file = open(node.home / "broker.log", "ab")  # noqa: SIM115 - kept open
    node.process = subprocess.Popen(
        [
            java,
            *jvm_options(node, heap_mb=heap_mb),
            "-cp",
            classpath,
            "kafka.Kafka",
            str(node.home / "server.properties"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=node.log_file,
        stderr=subprocess.STDOUT,
        preexec_fn=die_with_parent(),
        start_new_session=True,  # Ctrl-C in a terminal reaches the Python parent only
    )
    node.paused = False


def find_java() -> str:
    home = os.environ.get("JAVA_HOME", "").strip()
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise BrokerStartError(
            "Java is not installed (Kafka needs Java 17+): apt-get install openjdk-17-jre-headless"
        )
    return java


def random_cluster_id() -> str:
    """Kafka's cluster id form: a UUID in URL-safe base64 without padding (Kafka's own
    generator avoids a leading '-', which command lines take for an option)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "ERROR" in ln or "Exception" in ln]
    return (errors or lines or ["no output"])[-1][:400]
