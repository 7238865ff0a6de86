"""``Rig`` — one drill's live parts: the drill's Kafka cluster (brokers.py), the rate
producer (producer.py), the driver subprocesses (driver.py), with ``DrillSpec.cluster`` a
``StandaloneCluster`` (lab/cluster.py: a Spark master and two 1-core workers
started per drill; drivers then run with ``spark://…`` and their executors in JVMs of
their own), with ``DrillSpec.storage`` "s3" a SeaweedFS server, for the registry drill
(``model.REGISTRY_SCENARIOS``) a Schema Registry whose subject the producer writes Avro to.

It samples the table's committed offsets every ``SAMPLE_S`` seconds, and every
``RECOVERY_SAMPLE_S`` through a fresh load of the table while a recovery is open; the first
increase after a (re)start or a kill closes that ``Recovery`` (time to recover = the kill
or start → the first new commit visible in the table). With background compaction on (the
kill, zombie and standby drills: ``compactions.DRILL_COMPACTION``) it also collects the
tables' compaction commits every ``compactions.SAMPLE_S`` seconds. The final count is
verdict.py's.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from lab.cluster import StandaloneCluster
from lab.drill import compactions, services, verdict
from lab.drill.brokers import DrillBroker, nodes_for
from lab.drill.count import RouteEpoch
from lab.drill.driver import DriverProcess
from lab.drill.model import (
    REGISTRY_SCENARIOS,
    DrillResult,
    DrillSpec,
    DrillTimeout,
    FaultEvent,
    Recovery,
    Sample,
)
from lab.drill.pipeline_config import drill_config
from lab.drill.producer import RateProducer
from lab.objectstore import S3Server
from lab.registry import SchemaRegistryServer
from lab.rest_catalog import RestCatalogServer
from pipeline.commit.offsets import TopicPartition
from pipeline.config import PipelineConfig, parse_config

SAMPLE_S = 0.5
RECOVERY_SAMPLE_S = 0.05  # a take-over of ~2 s is timed to its tenth of a second


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
        catalog_postgres: str | None = None,
    ) -> None:
        """``overrides``: top-level config sections replacing the drill's (e.g.
        ``maintenance``); ``producer_conf``: librdkafka settings of the rate producer;
        ``catalog_postgres``: the PostgreSQL a REST catalog (``spec.on_rest``) keeps its
        tables in (a private cluster the drill may stop)."""
        self.spec = spec
        self.overrides = dict(overrides or {})
        self.producer_conf = producer_conf
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.on_status = on_status or (lambda s: None)
        self.t0 = time.monotonic()
        self.result = DrillResult(
            scenario=spec.label, table_format=spec.table_format, started_at=time.time()
        )
        self.cluster: StandaloneCluster | None = None
        self.s3: S3Server | None = None
        self.registry: SchemaRegistryServer | None = None
        self.rest: RestCatalogServer | None = None
        self._services = contextlib.ExitStack()  # the Spark cluster, S3 server, Kafka
        try:
            if spec.cluster:
                self.on_status("starting a standalone Spark cluster")
                self.cluster = StandaloneCluster(workdir / "cluster", workers=2, cores=1).start()
                self._services.callback(self.cluster.stop)
            if spec.scenario in REGISTRY_SCENARIOS:
                self.on_status("starting a Schema Registry (Apicurio)")
                self.registry = services.start_registry(self._services, workdir / "registry")
            if spec.storage == "s3" or spec.on_rest:
                self.on_status("starting an S3 server (SeaweedFS)")
                self.s3 = services.start_s3(self._services, workdir / "s3")
            if spec.on_rest:
                self.on_status("starting Iceberg's REST catalog")
                self.rest = services.start_rest(
                    self._services, workdir / "rest-catalog", self.s3, catalog_postgres
                )
                catalog = self.rest.sink_catalog("drill")
            self._setup(spec, workdir, bootstrap, catalog)
        except BaseException:
            self._services.close()
            raise

    def _setup(
        self, spec: DrillSpec, workdir: Path, bootstrap: str | None, catalog: dict[str, Any] | None
    ) -> None:
        nodes = nodes_for(spec.scenario)
        if bootstrap is None:
            self.on_status(f"starting a {nodes}-node Kafka cluster")
        self.broker = DrillBroker(bootstrap, brokers=nodes)
        self._services.callback(self.broker.stop)  # first to go (LIFO), also on a failed setup
        base = f"drill-{spec.scenario}-{spec.table_format}-{os.getpid()}-{int(time.time())}"
        routed = spec.routed
        partitions = spec.partitions if routed is None else routed.partitions
        # a routed drill's topics, each to a table of its own (the late ones: added mid-drill)
        self.topics = (
            [base] if routed is None else [f"{base}-{i:02d}" for i in range(routed.topics)]
        )
        self.topic = self.topics[0]
        for t in self.topics:
            self.broker.create_topic(t, partitions)
        read = self.topics if routed is None else self.topics[: routed.topics - routed.late]
        self.config_dict = drill_config(
            spec,
            workdir,
            self.broker.bootstrap_servers,
            read,
            catalog,
            self.cluster.master_url if self.cluster is not None else None,
            self.s3,
            self.registry.url if self.registry is not None else None,
        )
        self.config_dict.update(self.overrides)
        self.config_path = workdir / "pipeline.yaml"
        self.config_path.write_text(yaml.safe_dump(self.config_dict))
        self.cfg: PipelineConfig = parse_config(self.config_dict)
        self.producer = RateProducer(
            self.broker.bootstrap_servers,
            read,
            partitions,
            spec.rate,
            seed=7,
            conf=self.producer_conf,
        )
        if self.registry is not None:  # Avro from the first record, the events' schema
            from lab.avro_events import AvroEventEncoder
            from pipeline.decode.registry.table_schema import resolve_registry_schema

            encoder = AvroEventEncoder(self.registry.url, self.topic)
            self.producer.encode = encoder.encode_value
            # the rig observes and counts through columns of its own (the drivers' config
            # stays unresolved: they follow the subject's versions)
            self.cfg = resolve_registry_schema(self.cfg)
        # the routes in force, oldest first, when a routed drill changed them between runs
        self.route_epochs: list[RouteEpoch] = []
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

    def reconfigure(
        self, config: dict[str, Any], routes_from: dict[TopicPartition, int] | None = None
    ) -> None:
        """The drivers started from now on run ``config``; ``routes_from``: its routes
        place every partition's records from these offsets on (the earlier ones stay
        where the routes before put them; see ``count.RouteEpoch``)."""
        cfg = parse_config(config)
        if routes_from is not None:
            if not self.route_epochs:
                self.route_epochs.append(RouteEpoch(self.cfg))
            self.route_epochs.append(RouteEpoch(cfg, dict(routes_from)))
        with self._sample_lock:
            self.config_dict = config
            self.config_path.write_text(yaml.safe_dump(config))
            self.cfg = cfg
            self._tables = None

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
        off = self.tables().commit_tables().committed_offsets(self.cfg.id)
        return dict(off or {})

    @property
    def compaction_enabled(self) -> bool:
        return self.cfg.maintenance.compaction.enabled

    def _recovering(self) -> bool:
        return any(r.first_commit is None for r in self.recoveries)

    def _sample_loop(self) -> None:
        while not self._stop.wait(RECOVERY_SAMPLE_S if self._recovering() else SAMPLE_S):
            with self._sample_lock:
                self._sample(reload=self._recovering())
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

    def _sample(self, fresh: bool = False, reload: bool = False) -> None:
        """One sample: the committed count now; a rise is a commit (and ends any pending
        recovery). ``fresh``: through new table handles; ``reload``: the same handles,
        past their cached view of the table."""
        try:
            if reload and self._tables is not None:
                self._tables.commit_tables().refresh()
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
            verdict.compaction_outcome(self.result, self.compactions)
        verdict.journal_outcomes(self.result, self.drivers, self.tables, self.cfg.id)
        verdict.hudi_services_outcome(self.result, self.cfg)

    def verify(self, lost: dict[TopicPartition, list[tuple[int, int]]] | None = None) -> None:
        """Exactly-once check: the independent verifier (``ingest verify``) and our own
        count of the producer's acknowledged offsets against the tables; the worse of the
        two numbers is reported. ``lost``: offsets the table recorded as data loss."""
        verdict.count_produced(self.result, self.cfg, self.producer, lost or {}, self.route_epochs)
        verdict.check_independently(
            self.result, self.cfg, routes_changed=len(self.route_epochs) > 1
        )
        self.count_outcomes()
