"""The live drill rig: broker, rate producer, driver subprocesses, commit sampler.

* ``DrillBroker`` — real Apache Kafka: a 3-node KRaft cluster started for the drill
  (``pipeline.tools.broker.KafkaCluster``: JVM processes on loopback, replication factor
  3, ``min.insync.replicas`` 2; broker faults are SIGKILL / SIGSTOP of those processes),
  or an external cluster (``--bootstrap``; broker-level faults are then unavailable).
* ``RateProducer`` — a thread writing generated events (pipeline/tools/generator.py) at a
  set rate, round-robin over partitions, idempotent with ``acks=all`` (a record counts
  once every in-sync replica has it), remembering every acknowledged (partition,
  offset): that set is what the tables must hold exactly once.
* ``DriverProcess`` — ``python -m pipeline run --config …`` in its own process group (so a
  SIGKILL takes the JVM too, like a lost pod); stdout/stderr go to files in the work dir.
* ``StandaloneCluster`` (pipeline/tools/cluster.py) — with ``DrillSpec.cluster``, a Spark
  master and two 1-core workers started per drill; drivers then run with ``spark://…``
  (``cluster_spark``) and their executors in JVMs of their own.
* ``Rig`` — ties them together and samples the table's committed offsets every
  ``SAMPLE_S`` seconds; the first increase after a (re)start closes that start's
  ``Recovery`` (time to recover = start → first new commit). With background compaction
  on (the kill and zombie drills: ``compactions.DRILL_COMPACTION``) it also collects the
  tables' compaction commits every ``compactions.SAMPLE_S`` seconds.

Invariant: the rig never reads from Kafka to decide what was produced — only the
producer's delivery reports count.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from pipeline.commit.offsets import TopicPartition
from pipeline.config import PipelineConfig, parse_config
from pipeline.errors import PipelineError
from pipeline.tools.broker import KAFKA_VERSION, KafkaCluster, await_leaders
from pipeline.tools.cluster import StandaloneCluster
from pipeline.tools.drill import compactions
from pipeline.tools.drill.model import DrillResult, DrillSpec, FaultEvent, Recovery, Sample
from pipeline.tools.objectstore import S3Server

ROOT = Path(__file__).resolve().parents[3]
# one line per recommit attempt, logged before its commit (pipeline/commit/recovery.py)
RECOMMIT_LINE = re.compile(r"instant (\d{17}) \(batch \d+\) recommitting")
SAMPLE_S = 0.5
TRIGGER = "1 second"
BATCH_LOG_MARK = "pipeline.batches: "


class DrillTimeout(PipelineError):
    code = "drill-timeout"


# Drills of driver, executor and catalog faults run on one Kafka node; drills of broker
# faults on three (replication factor 3, min.insync.replicas 2), whose start, restarts and
# replication would otherwise cost every drill (and CI) minutes.
DRILL_BROKERS = 1
BROKER_FAULT_BROKERS = 3
BROKER_FAULT_SCENARIOS = frozenset({"broker-outage"})


def nodes_for(scenario: str) -> int:
    """Kafka nodes the drill of ``scenario`` starts."""
    return BROKER_FAULT_BROKERS if scenario in BROKER_FAULT_SCENARIOS else DRILL_BROKERS


_EXTERNAL_TIMEOUT_S = 30.0


class DrillBroker:
    """A :class:`KafkaCluster` of ``brokers`` nodes started for the drill (default;
    ``kafka`` is it, for broker faults) or an external cluster given by ``bootstrap``
    (``kafka`` is None)."""

    def __init__(self, bootstrap: str | None = None, brokers: int = DRILL_BROKERS) -> None:
        self.kafka: KafkaCluster | None = None
        if bootstrap is None:
            self.kafka = KafkaCluster(brokers).start()
            self.bootstrap_servers: str = self.kafka.bootstrap_servers
        else:
            self.bootstrap_servers = bootstrap

    def create_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic``; return once every partition has a leader. On the drill's own
        cluster with its replication factor; on an external one with the cluster's
        ``default.replication.factor``."""
        if self.kafka is not None:
            self.kafka.create_topic(topic, partitions)
            return
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        new = NewTopic(topic, partitions, -1)  # -1: the broker's default replication factor
        for fut in admin.create_topics([new], operation_timeout=_EXTERNAL_TIMEOUT_S).values():
            fut.result(timeout=_EXTERNAL_TIMEOUT_S)
        try:
            await_leaders(admin, topic, partitions, _EXTERNAL_TIMEOUT_S)
        except TimeoutError:
            raise DrillTimeout(f"topic {topic}: no leader for every partition in time") from None

    def stop(self) -> None:
        """SIGKILL every node and delete the cluster's data: the drill has counted what it
        needed, and a controlled shutdown of the whole cluster only costs time."""
        if self.kafka is not None:
            if self.kafka.running:
                for node in self.kafka.node_ids():
                    self.kafka.kill(node)
            self.kafka.stop()


def broker_info(bootstrap: str | None) -> dict[str, Any]:
    """The broker drills run on, as the report states it: the Kafka version, the number of
    brokers, the topics' replication factor and ``min.insync.replicas`` of the cluster a
    :class:`DrillBroker` starts, or "external" for ``bootstrap``. ``description``: the
    same in one line (table caption, report)."""
    if bootstrap is not None:
        return {
            "kind": "external",
            "bootstrap_servers": bootstrap,
            "kafka_version": "external",
            "brokers": "external",
            "replication_factor": "external",
            "description": f"external Kafka cluster {bootstrap} (broker faults skipped)",
        }
    c = KafkaCluster(DRILL_BROKERS)  # not started: their settings only
    f = KafkaCluster(BROKER_FAULT_BROKERS)
    return {
        "kind": "local",
        "kafka_version": KAFKA_VERSION,
        "brokers": c.num_brokers,
        "replication_factor": c.replication_factor,
        "min_insync_replicas": c.min_insync_replicas,
        "broker_fault_brokers": f.num_brokers,
        "broker_fault_replication_factor": f.replication_factor,
        "broker_fault_min_insync_replicas": f.min_insync_replicas,
        "description": (
            f"Apache Kafka {KAFKA_VERSION} (KRaft, local JVMs): {c.num_brokers} broker; "
            f"broker faults on {f.num_brokers} brokers, replication factor "
            f"{f.replication_factor}, min.insync.replicas {f.min_insync_replicas}"
        ),
    }


class RateProducer:
    """Writes generated events at ``rate``/s until stopped; remembers acknowledged offsets."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        rate: float,
        seed: int,
        conf: dict[str, str] | None = None,
    ):
        self.bootstrap, self.topic, self.partitions, self.rate = bootstrap, topic, partitions, rate
        self.seed = seed
        self.conf = dict(conf or {})  # librdkafka settings over the defaults below
        self.acked: dict[int, list[int]] = {p: [] for p in range(partitions)}
        # Acknowledged without an offset, per partition: librdkafka reports a retried batch
        # the broker already had (DUPLICATE_SEQUENCE_NUMBER, e.g. after every node was
        # SIGKILLed before its acknowledgement got out) as delivered, offset unknown.
        self.unplaced: dict[int, int] = {p: 0 for p in range(partitions)}
        self._trailing: dict[int, int] = {p: 0 for p in range(partitions)}  # after the last
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._flushed = threading.Event()  # set by the producer thread once paused and flushed
        self._thread = threading.Thread(target=self._run, name="drill-producer", daemon=True)

    @property
    def produced(self) -> int:
        with self._lock:
            return sum(len(v) for v in self.acked.values()) + sum(self.unplaced.values())

    def ends(self) -> dict[TopicPartition, int]:
        """Per partition: one past the highest acknowledged offset, plus the records
        acknowledged without an offset after it (an idempotent producer's deliveries come
        in offset order per partition)."""
        with self._lock:
            ends = {
                TopicPartition(self.topic, p): (max(v) + 1 if v else 0) + self._trailing[p]
                for p, v in self.acked.items()
            }
        return {tp: end for tp, end in ends.items() if end}

    def expected(self) -> dict[TopicPartition, list[int]]:
        with self._lock:
            return {TopicPartition(self.topic, p): sorted(v) for p, v in self.acked.items() if v}

    def unplaced_counts(self) -> dict[TopicPartition, int]:
        """Per partition: records acknowledged without their offset (counted by
        :func:`~pipeline.tools.drill.count.count_against` against the tables' records at
        offsets no acknowledgement named)."""
        with self._lock:
            return {TopicPartition(self.topic, p): n for p, n in self.unplaced.items() if n}

    def delivered(self, partition: int, offset: int | None) -> None:
        """A delivery report without an error: at ``offset``, or at an offset librdkafka
        did not report (None; see ``unplaced``)."""
        with self._lock:
            if offset is None or offset < 0:
                self.unplaced[partition] += 1
                self._trailing[partition] += 1
            else:
                self.acked[partition].append(offset)
                self._trailing[partition] = 0

    def start(self) -> None:
        self._thread.start()

    def pause(self, timeout: float = 30.0) -> None:
        """Stop producing; returns once the records in flight are flushed (acknowledged)."""
        self._flushed.clear()
        self._running.clear()
        self._flushed.wait(timeout)

    def resume(self) -> None:
        self._running.set()

    def stop(self) -> None:
        self._stop.set()
        self._running.set()
        self._thread.join(timeout=120)

    def _run(self) -> None:
        from confluent_kafka import KafkaError, Message, Producer

        from pipeline.tools.generator import GeneratorSpec, generate_events, send_paced

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": "true",
                "acks": "all",
                "linger.ms": "5",
                "client.id": "drill-producer",
                "log_level": "2",  # broker outages are the point: no connection-refused spam
                **self.conf,
            }
        )

        def report(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                self.errors.append(f"{err.name()}: {err.str()}")
                return
            part = msg.partition()
            if part is not None:
                self.delivered(part, msg.offset())

        spec = GeneratorSpec(count=10**9, malformed_fraction=0.01, seed=self.seed)
        next_slot = time.monotonic()
        for i, (key, value) in enumerate(generate_events(spec)):
            if self._stop.is_set():
                break
            if not self._running.is_set():
                producer.flush(5)
                self._flushed.set()
                self._running.wait()
                next_slot = time.monotonic()
            next_slot = send_paced(
                producer, self.topic, key, value, i % self.partitions, report, next_slot, self.rate
            )
        while producer.flush(1.0) > 0:
            pass


class DriverProcess:
    """One ``ingest run`` as its own process group; output captured to files."""

    def __init__(
        self,
        n: int,
        config: Path,
        workdir: Path,
        fault: str | None = None,
        sets: Sequence[str] = (),
    ) -> None:
        self.n, self.fault = n, fault
        self.out_path = workdir / f"driver-{n:02d}.out"
        self.err_path = workdir / f"driver-{n:02d}.err"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "INGEST_SPARK_LOG_LEVEL": "ERROR"}
        env.pop("INGEST_FAULT", None)
        if fault:
            env["INGEST_FAULT"] = fault
        cmd = [sys.executable, "-m", "pipeline", "run", "--config", str(config)]
        for s in sets:
            cmd += ["--set", s]
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=err, env=env, cwd=ROOT, start_new_session=True
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole process group (driver + its JVM): a lost pod."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (graceful stop between batch steps), then SIGKILL the leftovers."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=timeout)
        self.kill()
        return self.proc.returncode

    def reap(self) -> None:
        """After the driver exited by itself: make sure no JVM of its group lingers."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def stderr(self) -> str:
        try:
            return self.err_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log(self) -> str:
        """The driver's log lines: ``ingest run`` writes them to stdout (stderr keeps the
        one-line error; with ``--verbose`` everything is on stderr)."""
        try:
            out = self.out_path.read_text(errors="replace")
        except FileNotFoundError:
            out = ""
        return out + self.stderr()

    def error_line(self) -> str:
        """The operator one-liner (``error: …``) the driver printed, if any."""
        lines = [ln for ln in self.stderr().splitlines() if ln.startswith("error: ")]
        return lines[-1] if lines else ""

    def batch_lines(self) -> list[dict[str, Any]]:
        out = []
        for ln in self.log().splitlines():
            _, mark, rest = ln.partition(BATCH_LOG_MARK)
            if mark and rest.startswith("{"):
                with contextlib.suppress(ValueError):
                    out.append(json.loads(rest))
        return out


class SkipDrill(Exception):
    """The drill cannot run here (reason in the message): reported as skipped."""


def drill_config(
    spec: DrillSpec,
    workdir: Path,
    bootstrap: str,
    topic: str,
    catalog: dict[str, Any] | None,
    master: str | None = None,
    s3: S3Server | None = None,
) -> dict[str, Any]:
    """Pipeline config of a drill: 1 s processing-time trigger, metrics on a free port;
    ``master``: a standalone cluster's URL (else local[2,4]); ``s3``: tables in a new
    bucket of that server. The kill and zombie drills run with background compaction
    (:data:`compactions.DRILL_COMPACTION`)."""
    from pipeline.tools.generator import event_schema_fields

    sink: dict[str, Any] = {"table": "drill.events", "format": spec.table_format}
    lake = f"s3://{s3.new_bucket('drill')}" if s3 is not None else str(workdir)
    if spec.table_format in ("hudi", "both"):
        sink["hudi"] = {"basePath": f"{lake}/hudi/events"}
        if s3 is not None:
            sink["hudi"]["properties"] = s3.properties()
    if spec.table_format in ("iceberg", "both"):
        sink["catalog"] = catalog or {"warehouse": f"{lake}/warehouse"}
        if s3 is not None:  # the SQLite catalog file stays local, the warehouse on S3
            sink["catalog"] = {
                **sink["catalog"],
                "uri": sink["catalog"].get("uri", f"sqlite:///{workdir}/catalog.db"),
                "properties": {**sink["catalog"].get("properties", {}), **s3.properties()},
            }
        sink["partitionBy"] = ["day(ts)"]
    config: dict[str, Any] = {
        "id": f"drill-{spec.scenario}",
        "source": {"bootstrapServers": bootstrap, "topics": [topic]},
        "decode": {"format": "json", "schema": event_schema_fields()},
        "sink": sink,
        "checkpointLocation": str(workdir / "checkpoint"),
        "trigger": {"mode": "processing-time", "interval": TRIGGER},
        # local[2,4]: task failures are retried (4 attempts), as on a cluster
        "spark": {"master": "local[2,4]"} if master is None else cluster_spark(master, workdir),
        "metrics": {"enabled": True, "port": 0},
    }
    if spec.scenario in compactions.COMPACTION_SCENARIOS:
        config["maintenance"] = {"compaction": dict(compactions.DRILL_COMPACTION)}
    return config


def cluster_spark(master: str, workdir: Path) -> dict[str, Any]:
    """The ``spark`` section for a drill on the standalone cluster."""
    events = workdir / "spark-events"  # the driver's event log: task attempts lost, retried
    events.mkdir(parents=True, exist_ok=True)
    return {
        "master": master,
        "conf": {
            "spark.driver.host": "127.0.0.1",
            "spark.executor.memory": "512m",
            # a batch waits (≤ 30 s) for both executors: one task on each
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            # Spark's default (INFO) executor log: "Running task …" / "Finished task …"
            # tell the executor-loss drill which executor runs a task right now
            "spark.executor.extraJavaOptions": "-Dingest.drill=1",
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": events.as_uri(),
            "spark.eventLog.compress": "false",
        },
    }


class Rig:
    """One drill's live parts. Use as a context manager; ``close()`` tears everything down."""

    def __init__(
        self,
        spec: DrillSpec,
        workdir: Path,
        bootstrap: str | None = None,
        catalog: dict[str, Any] | None = None,
        on_status: Callable[[str], None] | None = None,
        overrides: dict[str, Any] | None = None,
        producer_conf: dict[str, str] | None = None,
    ) -> None:
        """``overrides``: top-level config sections replacing the drill's (e.g.
        ``maintenance``); ``producer_conf``: librdkafka settings of the rate producer."""
        self.spec = spec
        self.overrides = dict(overrides or {})
        self.producer_conf = producer_conf
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.on_status = on_status or (lambda s: None)
        self.t0 = time.monotonic()
        self.result = DrillResult(scenario=spec.label, table_format=spec.table_format)
        self.cluster: StandaloneCluster | None = None
        self.s3: S3Server | None = None
        self._services = contextlib.ExitStack()  # the Spark cluster, S3 server, Kafka
        try:
            if spec.cluster:
                self.on_status("starting a standalone Spark cluster")
                self.cluster = StandaloneCluster(workdir / "cluster", workers=2, cores=1).start()
                self._services.callback(self.cluster.stop)
            if spec.storage == "s3":
                self.on_status("starting an S3 server (SeaweedFS)")
                self.s3 = self._start_s3(workdir / "s3")
            self._setup(spec, workdir, bootstrap, catalog)
        except BaseException:
            self._services.close()
            raise

    def _start_s3(self, where: Path) -> S3Server:
        from pipeline.tools.objectstore import S3Unavailable, start_seaweedfs

        server = start_seaweedfs(where)
        try:
            up = next(server)
        except S3Unavailable as e:
            raise SkipDrill(f"no S3-compatible server: {e}") from None
        self._services.callback(server.close)
        return up

    def _setup(
        self, spec: DrillSpec, workdir: Path, bootstrap: str | None, catalog: dict[str, Any] | None
    ) -> None:
        nodes = nodes_for(spec.scenario)
        if bootstrap is None:
            self.on_status(f"starting a {nodes}-node Kafka cluster")
        self.broker = DrillBroker(bootstrap, brokers=nodes)
        self._services.callback(self.broker.stop)  # first to go (LIFO), also on a failed setup
        self.topic = f"drill-{spec.scenario}-{spec.table_format}-{os.getpid()}-{int(time.time())}"
        self.broker.create_topic(self.topic, spec.partitions)
        self.config_dict = drill_config(
            spec,
            workdir,
            self.broker.bootstrap_servers,
            self.topic,
            catalog,
            self.cluster.master_url if self.cluster is not None else None,
            self.s3,
        )
        self.config_dict.update(self.overrides)
        self.config_path = workdir / "pipeline.yaml"
        self.config_path.write_text(yaml.safe_dump(self.config_dict))
        self.cfg: PipelineConfig = parse_config(self.config_dict)
        self.producer = RateProducer(
            self.broker.bootstrap_servers,
            self.topic,
            spec.partitions,
            spec.rate,
            seed=7,
            conf=self.producer_conf,
        )
        self.drivers: list[DriverProcess] = []
        self.extra: dict[str, Any] = {}  # scenario resources (e.g. a private PostgreSQL)
        self.recoveries: list[Recovery] = []
        self.committed = 0
        self.commit_count = 0  # increases of the committed offsets seen by the sampler
        self._tables: Any = None
        # compaction commits seen in the tables (union: expiry and trimming drop old ones)
        self.compactions: set[str] = set()
        self._compactions_at = 0.0
        self._stop = threading.Event()
        # samples (the loop's, a restart's) and fresh reads never interleave
        self._sample_lock = threading.RLock()
        self._sampler = threading.Thread(
            target=self._sample_loop, name="drill-sampler", daemon=True
        )

    # -- life cycle -------------------------------------------------------------------
    def __enter__(self) -> Rig:
        self.producer.start()
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for d in self.drivers:
            if d.alive():
                d.kill()
            else:
                d.reap()
        self.producer.stop()
        self._stop.set()
        self._sampler.join(timeout=10)
        self._services.close()  # the broker, the S3 server, the Spark cluster
        self.result.duration_s = round(self.now(), 2)
        self.result.produced = self.producer.produced

    def now(self) -> float:
        return time.monotonic() - self.t0

    # -- events ---------------------------------------------------------------------------
    def event(self, kind: str, detail: str = "") -> None:
        self.result.events.append(FaultEvent(round(self.now(), 2), kind, detail))
        if kind not in ("recovered", "start", "stop", "drain"):
            self.result.faults += 1
        self.on_status(f"{kind} {detail}".strip())

    def recovery_from_now(self, since: float | None = None) -> Recovery:
        """Time to recover is measured from now (or ``since``, e.g. the moment of a kill
        already done) to the next new commit. A start that saw no commit before this one
        (killed first) is abandoned, not counted twice."""
        self.recoveries = [r for r in self.recoveries if r.first_commit is not None]
        # A sample through fresh handles first: a commit the old driver made on its way
        # out, not yet sampled, is the old driver's, not the new one's first commit.
        with self._sample_lock:
            self._sample(fresh=True)
        recovery = Recovery(started=self.now() if since is None else since)
        self.recoveries.append(recovery)
        return recovery

    # -- the driver -------------------------------------------------------------------------
    @property
    def driver(self) -> DriverProcess | None:
        return self.drivers[-1] if self.drivers else None

    def start_driver(
        self, fault: str | None = None, sets: Sequence[str] = (), restart: bool = True
    ) -> DriverProcess:
        if restart and self.drivers:
            self.result.restarts += 1
            self.recovery_from_now()
        d = DriverProcess(len(self.drivers), self.config_path, self.workdir, fault, sets)
        self.drivers.append(d)
        self.event("start", f"driver {d.n}" + (f" armed {fault}" if fault else ""))
        return d

    def kill_driver(self, detail: str = "") -> None:
        d = self.driver
        if d is not None:
            d.kill()
            self.event("kill", detail or f"SIGKILL driver {d.n}")

    # -- observation ------------------------------------------------------------------
    def tables(self) -> Any:
        """Read-only table handles for observing. They try the catalog once (no
        ``catalogRetrySeconds`` patience): the drill must keep its clock and schedule
        while the catalog is down, not wait with the driver."""
        if self._tables is None:
            cfg = self.cfg.model_copy(
                update={"commit": self.cfg.commit.model_copy(update={"catalog_retry_seconds": 0})}
            )
            from pipeline.formats.registry import open_tables

            self._tables = open_tables(cfg)
        return self._tables

    def committed_offsets(self, fresh: bool = False) -> dict[TopicPartition, int]:
        """The main table's committed end offsets; ``fresh``: through new table handles,
        not a view cached for up to a second."""
        if fresh:
            with self._sample_lock:
                self._tables = None
                return self.committed_offsets()
        off = self.tables().main.committed_offsets(self.cfg.id)
        return dict(off or {})

    @property
    def compaction_enabled(self) -> bool:
        return self.cfg.maintenance.compaction.enabled

    def _sample_loop(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            with self._sample_lock:
                self._sample()
                if self.compaction_enabled and self.now() >= self._compactions_at:
                    self._compactions_at = self.now() + compactions.SAMPLE_S
                    self.sample_compactions()

    def sample_compactions(self) -> int:
        """Add the compaction commits the tables hold now; the number seen so far."""
        with self._sample_lock:
            try:
                self.compactions |= compactions.compaction_commits(self.tables())
            except Exception:  # catalog down or table mid-creation: the next sample
                self._tables = None
            return len(self.compactions)

    def await_compaction(self, timeout: float = 120.0) -> None:
        """With compaction on: wait (bounded) until a compaction commit was seen, so a
        short drill does not end before the drivers' first one. A drill that saw none
        fails in :meth:`count_outcomes`."""
        if not self.compaction_enabled:
            return
        with contextlib.suppress(DrillTimeout):
            self.wait_until(
                lambda: bool(self.compactions), timeout, "for a background compaction commit"
            )

    def _sample(self, fresh: bool = False) -> None:
        """One sample: the committed count now; a rise is a commit (and ends any pending
        recovery)."""
        try:
            committed = sum(self.committed_offsets(fresh).values())
        except Exception:  # catalog down or table mid-creation: keep the last value
            self._tables = None
            committed = self.committed
        t = round(self.now(), 2)
        if committed > self.committed:
            self.commit_count += 1
            for r in self.recoveries:
                if r.first_commit is None:
                    r.first_commit = t
                    self.result.recover_s.append(round(r.first_commit - r.started, 2))
                    self.result.events.append(FaultEvent(t, "recovered", f"{r.seconds:.1f}s"))
        self.committed = committed
        self.result.samples.append(Sample(t, self.producer.produced, committed))

    def wait_until(self, pred: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline:
                raise DrillTimeout(f"{self.spec.scenario}: timed out after {timeout:.0f}s {what}")
            time.sleep(0.2)

    def wait_commits(
        self, n: int = 1, timeout: float = 180.0, driver_must_live: bool = True
    ) -> None:
        """Wait for ``n`` new commits; fail early if the driver died meanwhile."""
        target = self.commit_count + n
        d = self.driver

        def done() -> bool:
            if driver_must_live and d is not None and not d.alive():
                raise DrillTimeout(
                    f"{self.spec.scenario}: driver {d.n} exited ({d.poll()}) while waiting "
                    f"for a commit: {d.error_line() or d.stderr()[-400:]}"
                )
            return self.commit_count >= target

        self.wait_until(done, timeout, f"waiting for {n} new commit(s)")

    def caught_up(self) -> bool:
        ends = self.producer.ends()
        committed = self.committed_offsets()
        return all(committed.get(tp, 0) >= end for tp, end in ends.items())

    def drain(self, timeout: float = 480.0) -> None:
        """Stop producing, let a healthy driver commit everything acknowledged, stop it."""
        self.producer.stop()
        self.event("drain", "producer stopped")
        if self.driver is None or not self.driver.alive():
            self.start_driver()
        self.wait_until(self.caught_up, timeout, "draining to the produced end offsets")
        assert self.driver is not None
        self.driver.stop()
        self.event("stop", f"driver {self.driver.n} stopped")
        time.sleep(SAMPLE_S * 2)

    # -- final accounting -------------------------------------------------------------
    def count_outcomes(self) -> None:
        if self.compaction_enabled:
            self.sample_compactions()
            self.result.compactions = len(self.compactions)
            self.result.notes.append(compactions.compaction_note(self.compactions))
            if not self.compactions:
                self.result.problems.append(
                    "background compaction was on but the tables got no compaction commit: "
                    "the drill proves nothing about compaction (driver logs: 'background "
                    "maintenance not started' / 'background compaction failed'?)"
                )
        # Recovery logs each recommit before committing, so an instant whose recommit was
        # itself killed (the next run finishes it) still counts once; batch log lines
        # alone undercount kill drills.
        recommitted = {m[1] for d in self.drivers for m in RECOMMIT_LINE.finditer(d.log())}
        self.result.recommits = len(recommitted)
        try:
            from pipeline.commit.instant import InstantState

            timeline = self.tables().timeline(self.cfg.id)
            self.result.rollbacks = sum(
                1 for i in timeline.instants() if i.state is InstantState.ROLLED_BACK
            )
        except Exception as e:  # the journal is optional for the verdict
            self.result.notes.append(f"journal not readable: {e}")

    def verify(self, lost: dict[TopicPartition, list[tuple[int, int]]] | None = None) -> None:
        """Exactly-once check: the independent verifier (``ingest verify``) and our own
        count of the producer's acknowledged offsets against the tables; the worse of the
        two numbers is reported. ``lost``: offsets the table recorded as data loss."""
        from pipeline.tools.drill.count import count_against

        lost = lost or {}

        def recorded_lost(tp: TopicPartition, o: int) -> bool:
            return any(s <= o < e for s, e in lost.get(tp, ()))

        expected = {
            tp: [o for o in offs if not recorded_lost(tp, o)]
            for tp, offs in self.producer.expected().items()
        }
        unplaced = self.producer.unplaced_counts()
        own = count_against(self.cfg, expected, unplaced)
        if unplaced:
            self.result.notes.append(
                f"producer: {sum(unplaced.values())} record(s) acknowledged without an offset "
                "(a retried batch the broker already had), counted per partition against "
                "the tables' records at offsets no acknowledgement named"
            )
        self.result.committed = own.present
        self.result.missing = own.missing
        self.result.duplicated = own.duplicated
        self.result.lost = sum(e - s for ivs in lost.values() for s, e in ivs)
        self.result.verifier = "drill count"
        if own.unexpected:
            self.result.problems.append(f"{own.unexpected} records in the tables not produced")
        # Records whose delivery failed are not expected; one Kafka wrote all the same (a
        # timeout after the write) would show as unexpected above. Outages here last
        # seconds, far inside the producer's 300 s delivery timeout.
        if self.producer.errors:
            errors = self.producer.errors
            self.result.notes.append(
                f"producer: {len(errors)} record(s) not acknowledged, e.g. {errors[0][:160]}"
            )
        try:
            totals = independent_verifier_totals(self.cfg)
        except Exception as e:  # the verifier failing is a failed check, not a crash
            self.result.problems.append(f"ingest verify failed: {type(e).__name__}: {e}")
        else:
            self.result.verifier = "ingest verify + drill count"
            self.result.missing = max(self.result.missing, int(totals.get("missing", 0)))
            self.result.duplicated = max(self.result.duplicated, int(totals.get("duplicated", 0)))
            if not totals["ok"]:
                self.result.problems.append(
                    f"ingest verify not ok: {totals.get('mismatched', 0)} mismatched, "
                    f"{totals.get('unexpected', 0)} unexpected, {totals.get('missing', 0)} "
                    f"missing, {totals.get('duplicated', 0)} duplicated"
                )
            if any(n != self.result.lost for n in totals["lost_per_table"]):
                self.result.problems.append(
                    f"ingest verify reports {totals['lost_per_table']} lost, "
                    f"the drill {self.result.lost}"
                )
        self.count_outcomes()


TOTALS = ("expected", "present", "missing", "duplicated", "mismatched", "unexpected", "lost")


def independent_verifier_totals(cfg: PipelineConfig) -> dict[str, Any]:
    """Totals of ``verify_pipeline`` over the pipeline's table(s), plus ``ok`` and the
    records each table recorded as lost (both tables of the ``both`` format record the
    same loss)."""
    from pipeline.tools.verify import verify_pipeline

    reports = verify_pipeline(cfg)
    totals: dict[str, Any] = {
        "ok": all(r.ok for r in reports),
        "lost_per_table": [int(r.totals().lost or 0) for r in reports],
    }
    for r in reports:
        t = r.totals()
        for k in TOTALS:
            totals[k] = totals.get(k, 0) + int(getattr(t, k, 0) or 0)
    return totals
