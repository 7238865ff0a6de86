"""A real Apache Kafka cluster on loopback: KRaft nodes as separate JVM processes.

Every node is a combined broker and controller (``process.roles=broker,controller``) with a
static controller quorum of all nodes, started from the ``kafka`` JVM set of the project's
manifest (``pipeline/tools/jvm.py``). ``num_brokers`` nodes give replication factor
``min(N, 3)`` and ``min.insync.replicas`` 2 from three nodes on; transactions work on any
size (their state log is sized to the cluster).

Each node listens on three loopback ports: PLAINTEXT (clients and inter-broker),
SASL_PLAINTEXT with SCRAM-SHA-256/512 (users added by :meth:`KafkaCluster.add_scram_user`)
and its controller port. The cluster owns its data directory (a temporary one unless
given) and deletes it on :meth:`stop` only when it created it.

Faults are real: :meth:`kill` (SIGKILL), :meth:`pause` / :meth:`resume` (SIGSTOP /
SIGCONT), :meth:`restart`, and the admin API for records, topics and configs. The broker
timings are shortened for tests (a dead broker is noticed in ~4 s, retention and the log
cleaner look every second); they change when faults show, never what Kafka guarantees.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from confluent_kafka import KafkaError
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from pipeline.errors import EnvironmentProblem
from pipeline.tools import jvm

__all__ = ["KAFKA_VERSION", "KafkaCluster", "await_leaders", "run_broker_forever"]

_READY_TIMEOUT_S = 60.0
_ADMIN_TIMEOUT_S = 30.0
_LOG4J2 = """\
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
class _Node:
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """Linux: the broker gets SIGKILL when the process that started it dies, so a killed
    test run or drill never leaves brokers behind."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class KafkaCluster:
    """``num_brokers`` KRaft nodes (ids ``1..num_brokers``) on loopback ports."""

    def __init__(
        self,
        num_brokers: int = 1,
        *,
        data_dir: Path | str | None = None,
        heap_mb: int = 512,
        broker_config: Mapping[str, str] | None = None,
    ) -> None:
        if num_brokers < 1:
            raise ValueError("num_brokers must be >= 1")
        self.num_brokers = num_brokers
        self.replication_factor = min(num_brokers, 3)
        self.min_insync_replicas = 2 if num_brokers >= 3 else 1
        self._owns_dir = data_dir is None
        self._dir = Path(data_dir) if data_dir is not None else None
        self._heap_mb = heap_mb
        self._extra = dict(broker_config or {})
        self._nodes: dict[int, _Node] = {}
        self._lock = threading.RLock()
        self._admin: AdminClient | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> KafkaCluster:
        """Format and start every node; return once all are registered (a no-op when
        already started). One node is ready in ~4 s on a 2-core host."""
        with self._lock:
            if self._nodes:
                return self
            if self._dir is None:
                self._dir = Path(tempfile.mkdtemp(prefix="ingest-kafka-"))
            self._dir.mkdir(parents=True, exist_ok=True)
            classpath = jvm.classpath("kafka")
            self._java = _java()
            nodes = {
                i: _Node(i, _free_port(), _free_port(), _free_port(), self._dir / f"node-{i}")
                for i in range(1, self.num_brokers + 1)
            }
            voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in nodes.values())
            cluster_id = _random_cluster_id()
            formats = []
            for node in nodes.values():
                node.home.mkdir(parents=True, exist_ok=True)
                (node.home / "server.properties").write_text(self._properties(node, voters))
                (node.home / "log4j2.properties").write_text(_LOG4J2)
                formats.append(
                    subprocess.Popen(
                        [
                            self._java,
                            *self._jvm_options(node, heap_mb=128),
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
                )
            for proc in formats:
                out, _ = proc.communicate(timeout=120)
                if proc.returncode != 0:
                    detail = _last_line(out.decode(errors="replace"))
                    raise BrokerStartError(f"formatting Kafka storage failed: {detail}")
            self._classpath = classpath
            self._nodes = nodes
            try:
                for node in nodes.values():
                    self._spawn(node)
                self._await_registered(set(nodes))
            except BaseException:
                self.stop()
                raise
            return self

    def stop(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL after 15 s) and remove the data
        directory when the cluster created it; a no-op when not started."""
        with self._lock:
            nodes, self._nodes = list(self._nodes.values()), {}
            if self._admin is not None:
                self._admin = None
            for node in nodes:
                if node.process is not None and node.process.poll() is None:
                    if node.paused:
                        with contextlib.suppress(ProcessLookupError):
                            node.process.send_signal(signal.SIGCONT)
                    node.process.terminate()
            deadline = time.monotonic() + 15
            for node in nodes:
                if node.process is None:
                    continue
                try:
                    node.process.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    node.process.kill()
                    node.process.wait()
                if node.log_file is not None:
                    node.log_file.close()
            if self._owns_dir and self._dir is not None and nodes:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None

    @property
    def running(self) -> bool:
        return bool(self._nodes)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ addresses
    @property
    def bootstrap_servers(self) -> str:
        """PLAINTEXT ``host:port`` of every node."""
        return ",".join(n.address for n in self._started().values())

    @property
    def sasl_bootstrap_servers(self) -> str:
        """SASL_PLAINTEXT (SCRAM) ``host:port`` of every node."""
        return ",".join(f"127.0.0.1:{n.sasl_port}" for n in self._started().values())

    @property
    def data_dir(self) -> Path:
        if self._dir is None:
            raise RuntimeError("KafkaCluster is not started")
        return self._dir

    def node_ids(self) -> list[int]:
        return sorted(self._started())

    def log_of(self, node_id: int) -> Path:
        return self._node(node_id).home / "broker.log"

    # ------------------------------------------------------------------ process faults
    def kill(self, node_id: int) -> None:
        """SIGKILL node ``node_id`` (no controlled shutdown; its log stays as it was)."""
        node = self._node(node_id)
        if node.process is not None and node.process.poll() is None:
            if node.paused:
                node.process.send_signal(signal.SIGCONT)
                node.paused = False
            node.process.kill()
            node.process.wait()

    def pause(self, node_id: int) -> None:
        """SIGSTOP node ``node_id``: connections stay open and nothing answers."""
        node = self._node(node_id)
        if node.process is not None and node.process.poll() is None:
            node.process.send_signal(signal.SIGSTOP)
            node.paused = True

    def resume(self, node_id: int) -> None:
        node = self._node(node_id)
        if node.process is not None and node.paused:
            node.process.send_signal(signal.SIGCONT)
            node.paused = False

    def restart(self, node_id: int, *, wait: bool = True) -> None:
        """Start a killed (or stopped) node again on its ports and data."""
        node = self._node(node_id)
        if node.process is not None and node.process.poll() is None:
            return
        self._spawn(node)
        if wait:
            self._await_registered({node_id})

    def restart_all(self) -> None:
        """Resume paused nodes and start every stopped one, together (after a full outage
        a lone node cannot form the controller quorum), then wait until all serve."""
        nodes = self._started()
        for i in nodes:
            self.resume(i)
        down = [n for n in nodes.values() if n.process is None or n.process.poll() is not None]
        for node in down:
            self._spawn(node)
        if down:
            self._await_registered({n.node_id for n in down})

    def alive(self, node_id: int) -> bool:
        node = self._node(node_id)
        return node.process is not None and node.process.poll() is None and not node.paused

    # ------------------------------------------------------------------ admin
    def admin(self) -> AdminClient:
        with self._lock:
            if self._admin is None:
                # log_level 2: refused connections while a node is down are expected here
                self._admin = AdminClient(
                    {"bootstrap.servers": self.bootstrap_servers, "log_level": 2}
                )
            return self._admin

    def create_topic(
        self,
        topic: str,
        partitions: int,
        replication_factor: int | None = None,
        config: Mapping[str, str] | None = None,
    ) -> None:
        """Create ``topic`` and return once every partition has a leader. An existing
        topic raises ``KafkaException`` (TOPIC_ALREADY_EXISTS)."""
        rf = replication_factor or self.replication_factor
        new = NewTopic(topic, partitions, rf, config=dict(config or {}))
        _result(self.admin().create_topics([new], operation_timeout=_ADMIN_TIMEOUT_S)[topic])
        self._await_topic(topic, lambda t: t is not None and _led(t, partitions))

    def delete_topic(self, topic: str) -> None:
        """Delete ``topic`` and return once no broker lists it."""
        _result(self.admin().delete_topics([topic], operation_timeout=_ADMIN_TIMEOUT_S)[topic])
        self._await_topic(topic, lambda t: t is None)

    def add_partitions(self, topic: str, total: int) -> None:
        """Grow ``topic`` to ``total`` partitions (Kafka never shrinks one)."""
        _result(self.admin().create_partitions([NewPartitions(topic, total)])[topic])
        self._await_topic(topic, lambda t: t is not None and _led(t, total))

    def delete_records(self, topic: str, partition: int, before_offset: int) -> None:
        """Move the log start of ``topic``/``partition`` up to ``before_offset``
        (the admin API's DeleteRecords: what retention does, on demand)."""
        tp = KTopicPartition(topic, partition, before_offset)
        _result(next(iter(self.admin().delete_records([tp]).values())))

    def set_topic_config(self, topic: str, config: Mapping[str, str]) -> None:
        """Set topic-level configs (``retention.ms``, ``segment.ms`` ...) incrementally."""
        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in config.items()
        ]
        res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
        for fut in self.admin().incremental_alter_configs([res]).values():
            _result(fut)

    def add_scram_user(self, user: str, password: str) -> None:
        """Create (or update) a SCRAM-SHA-256 and -512 user for the SASL listeners."""
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            # one alteration per user and request (DUPLICATE_RESOURCE otherwise)
            upsert: list[UserScramCredentialAlteration] = [
                UserScramCredentialUpsertion(
                    user, ScramCredentialInfo(mechanism, 4096), password.encode()
                )
            ]
            for fut in self.admin().alter_user_scram_credentials(upsert).values():
                _result(fut)

    def leader(self, topic: str, partition: int) -> int:
        """Node id leading ``topic``/``partition`` now (-1: none)."""
        md = self.admin().list_topics(topic, timeout=_ADMIN_TIMEOUT_S)
        t = md.topics.get(topic)
        if t is None or partition not in t.partitions:
            return -1
        return int(t.partitions[partition].leader)

    # ------------------------------------------------------------------ internals
    def _started(self) -> dict[int, _Node]:
        if not self._nodes:
            raise RuntimeError("KafkaCluster is not started")
        return self._nodes

    def _node(self, node_id: int) -> _Node:
        nodes = self._started()
        if node_id not in nodes:
            raise ValueError(f"no node {node_id} (nodes: {sorted(nodes)})")
        return nodes[node_id]

    def _properties(self, node: _Node, voters: str) -> str:
        rf, isr = self.replication_factor, self.min_insync_replicas
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
            **self._extra,
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _jvm_options(self, node: _Node, *, heap_mb: int) -> list[str]:
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

    def _spawn(self, node: _Node) -> None:
        if node.log_file is None:
            node.log_file = open(node.home / "broker.log", "ab")  # noqa: SIM115 - kept open
        node.process = subprocess.Popen(
            [
                self._java,
                *self._jvm_options(node, heap_mb=self._heap_mb),
                "-cp",
                self._classpath,
                "kafka.Kafka",
                str(node.home / "server.properties"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=node.log_file,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
            start_new_session=True,  # Ctrl-C in a terminal reaches the Python parent only
        )
        node.paused = False

    def _await_registered(self, ids: set[int]) -> None:
        """Return once each node of ``ids`` answers on its own port and the cluster it
        sees lists it. Asked through the node itself: a node killed a moment ago is still
        listed by the others until its session times out (~4 s), which made a restart
        look finished before the new process served anything."""
        deadline = time.monotonic() + _READY_TIMEOUT_S
        pending = set(ids)
        while pending:
            for i in sorted(pending):
                proc = self._nodes[i].process
                if proc is not None and proc.poll() is not None:
                    raise BrokerStartError(
                        f"Kafka node {i} exited with status {proc.returncode} while starting: "
                        f"{_last_line(self.log_of(i).read_text(errors='replace'))}"
                    )
                if self._serves(i):
                    pending.discard(i)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise BrokerStartError(
                    f"Kafka nodes {sorted(pending)} not registered within "
                    f"{_READY_TIMEOUT_S:.0f}s (logs under {self._dir})"
                )
            time.sleep(0.2)

    def _serves(self, node_id: int) -> bool:
        node = self._nodes[node_id]
        try:
            with socket.create_connection(("127.0.0.1", node.port), timeout=0.5):
                pass
        except OSError:
            return False
        own = AdminClient({"bootstrap.servers": node.address, "log_level": 0})
        try:
            described = own.describe_cluster(request_timeout=5).result(5)
            return node_id in {int(n.id) for n in described.nodes}
        except Exception:
            return False

    def _await_topic(self, topic: str, done: Callable[[Any], bool]) -> None:
        deadline = time.monotonic() + _ADMIN_TIMEOUT_S
        while True:
            md = self.admin().list_topics(timeout=_ADMIN_TIMEOUT_S)
            t = md.topics.get(topic)
            if (
                t is not None
                and t.error is not None
                and t.error.code()
                in (
                    KafkaError.UNKNOWN_TOPIC_OR_PART,
                    KafkaError._UNKNOWN_TOPIC,
                )
            ):
                t = None
            if done(t):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {topic!r} did not reach the wanted state in time")
            time.sleep(0.1)


def _led(t: Any, partitions: int) -> bool:
    return (
        t.error is None
        and len(t.partitions) >= partitions
        and all(p.leader >= 0 and p.error is None for p in t.partitions.values())
    )


def await_leaders(
    admin: AdminClient, topic: str, partitions: int, timeout_s: float = _ADMIN_TIMEOUT_S
) -> None:
    """Return once ``topic`` has at least ``partitions`` partitions, each with a leader (any
    cluster: ours or an external one); ``TimeoutError`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        t = admin.list_topics(topic, timeout=10).topics.get(topic)
        if t is not None and _led(t, partitions):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"topic {topic!r}: no leader for every partition after {timeout_s:.0f}s"
            )
        time.sleep(0.1)


def _result(fut: Any) -> Any:
    return fut.result(timeout=_ADMIN_TIMEOUT_S)


def _java() -> str:
    home = os.environ.get("JAVA_HOME", "").strip()
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise BrokerStartError(
            "Java is not installed (Kafka needs Java 17+): apt-get install openjdk-17-jre-headless"
        )
    return java


def _random_cluster_id() -> str:
    """Kafka's cluster id form: a UUID in URL-safe base64 without padding (Kafka's own
    generator avoids a leading '-', which command lines take for an option)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "ERROR" in ln or "Exception" in ln]
    return (errors or lines or ["no output"])[-1][:400]


def run_broker_forever(
    num_brokers: int,
    topics: dict[str, int],
    on_ready: Callable[[KafkaCluster], None] | None = None,
    *,
    data_dir: Path | None = None,
    stop_event: threading.Event | None = None,
) -> None:
    """Start a :class:`KafkaCluster`, create ``topics`` (name -> partitions), call
    ``on_ready(cluster)`` and block until SIGINT/SIGTERM (or ``stop_event``), then stop
    the cluster cleanly. Signal handlers are installed only from the main thread and are
    restored afterwards."""
    stop = stop_event if stop_event is not None else threading.Event()
    previous: dict[signal.Signals, Any] = {}

    def _handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, _handler)
    try:
        with KafkaCluster(num_brokers, data_dir=data_dir) as cluster:
            for name, partitions in topics.items():
                cluster.create_topic(name, partitions)
            if on_ready is not None:
                on_ready(cluster)
            while not stop.wait(0.5):
                pass
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
