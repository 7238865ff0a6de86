"""``KafkaCluster``: ``num_brokers`` KRaft nodes (lab/broker/node.py) started,
faulted and stopped together, with the admin operations of lab/broker/admin.py
as methods."""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from confluent_kafka.admin import AdminClient

from lab.broker import admin as admin_api
from lab.broker.node import (
    LOG4J2,
    BrokerStartError,
    Node,
    find_java,
    last_line,
    random_cluster_id,
    server_properties,
    spawn,
    start_format,
)
from lab.ports import free_ports
from pipeline import jvm

_READY_TIMEOUT_S = 60.0


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
        self._nodes: dict[int, Node] = {}
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
            self._java = find_java()
            ports = iter(free_ports(3 * self.num_brokers))
            nodes = {
                i: Node(i, next(ports), next(ports), next(ports), self._dir / f"node-{i}")
                for i in range(1, self.num_brokers + 1)
            }
            voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in nodes.values())
            cluster_id = random_cluster_id()
            formats = []
            for node in nodes.values():
                node.home.mkdir(parents=True, exist_ok=True)
                properties = server_properties(
                    node, voters, self.replication_factor, self.min_insync_replicas, self._extra
                )
                (node.home / "server.properties").write_text(properties)
                (node.home / "log4j2.properties").write_text(LOG4J2)
                formats.append(start_format(node, self._java, classpath, cluster_id))
            for proc in formats:
                out, _ = proc.communicate(timeout=120)
                if proc.returncode != 0:
                    detail = last_line(out.decode(errors="replace"))
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
        """Create ``topic`` (with the cluster's replication factor unless given) and return
        once every partition has a leader. An existing topic raises ``KafkaException``
        (TOPIC_ALREADY_EXISTS)."""
        rf = replication_factor or self.replication_factor
        admin_api.create_topic(self.admin(), topic, partitions, rf, config)

    def delete_topic(self, topic: str) -> None:
        """Delete ``topic`` and return once no broker lists it."""
        admin_api.delete_topic(self.admin(), topic)

    def add_partitions(self, topic: str, total: int) -> None:
        """Grow ``topic`` to ``total`` partitions (Kafka never shrinks one)."""
        admin_api.add_partitions(self.admin(), topic, total)

    def delete_records(self, topic: str, partition: int, before_offset: int) -> None:
        """Move the log start of ``topic``/``partition`` up to ``before_offset``
        (the admin API's DeleteRecords: what retention does, on demand)."""
        admin_api.delete_records(self.admin(), topic, partition, before_offset)

    def set_topic_config(self, topic: str, config: Mapping[str, str]) -> None:
        """Set topic-level configs (``retention.ms``, ``segment.ms`` ...) incrementally."""
        admin_api.set_topic_config(self.admin(), topic, config)

    def add_scram_user(self, user: str, password: str) -> None:
        """Create (or update) a SCRAM-SHA-256 and -512 user for the SASL listeners."""
        admin_api.add_scram_user(self.admin(), user, password)

    def leader(self, topic: str, partition: int) -> int:
        """Node id leading ``topic``/``partition`` now (-1: none)."""
        return admin_api.leader(self.admin(), topic, partition)

    def replicas(self, topic: str, partition: int) -> tuple[list[int], list[int]]:
        """(replicas, in-sync replicas) of ``topic``/``partition`` now."""
        return admin_api.replicas(self.admin(), topic, partition)

    def elect_unclean(self, topic: str, partition: int) -> None:
        """Unclean leader election: an out-of-sync live replica leads, truncating the log.
        Returns once a running node leads it (a node killed a moment ago may still be
        named leader until the controller fences it)."""
        running = {
            i
            for i, n in self._started().items()
            if n.process is not None and n.process.poll() is None
        }
        admin_api.elect_unclean(self.admin(), topic, partition, running)

    # ------------------------------------------------------------------ internals
    def _started(self) -> dict[int, Node]:
        if not self._nodes:
            raise RuntimeError("KafkaCluster is not started")
        return self._nodes

    def _node(self, node_id: int) -> Node:
        nodes = self._started()
        if node_id not in nodes:
            raise ValueError(f"no node {node_id} (nodes: {sorted(nodes)})")
        return nodes[node_id]

    def _spawn(self, node: Node) -> None:
        spawn(node, self._java, self._classpath, self._heap_mb)

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
                        f"{last_line(self.log_of(i).read_text(errors='replace'))}"
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
