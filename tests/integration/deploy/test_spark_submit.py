"""scripts/build-pyfiles.sh and scripts/spark-submit.sh: the command lines each mode builds,
and a real submission with the zip shipped by --py-files against local[2] (the `spark-submit`
that pyspark installs), which must commit to Iceberg."""

from __future__ import annotations

import hashlib
import os
import subprocess
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SUBMIT = ROOT / "scripts" / "spark-submit.sh"
BUILD = ROOT / "scripts" / "build-pyfiles.sh"
EXAMPLE = ROOT / "conf" / "pipeline.example.yaml"


def submit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SUBMIT), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def dry(*args: str) -> list[str]:
    args_ = list(args)
    at = args_.index("--") if "--" in args_ else len(args_)
    r = submit(*args_[:at], "--dry-run", *args_[at:])
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def opt(argv: list[str], name: str) -> list[str]:
    """Every value given to spark-submit option NAME (before the application)."""
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == name]


def app_and_args(argv: list[str]) -> tuple[str, list[str]]:
    i = next(i for i, a in enumerate(argv) if a.endswith("ingest_submit.py"))
    return argv[i], argv[i + 1 :]


# -- packaging ---------------------------------------------------------------------------


def test_build_pyfiles_zip_is_complete_and_reproducible(tmp_path: Path) -> None:
    digests = []
    for out in (tmp_path / "a", tmp_path / "b"):
        r = subprocess.run(
            ["bash", str(BUILD), "--out", str(out)], capture_output=True, text=True, timeout=120
        )
        assert r.returncode == 0, r.stderr
        digests.append(hashlib.sha256((out / "pipeline.zip").read_bytes()).hexdigest())
        assert (out / "ingest_submit.py").read_text() == (
            ROOT / "scripts" / "ingest_submit.py"
        ).read_text()
    assert digests[0] == digests[1]
    with zipfile.ZipFile(tmp_path / "a" / "pipeline.zip") as z:
        names = z.namelist()
    assert names == sorted(names)
    expected = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "pipeline").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    }
    assert set(names) == expected
    assert "pipeline/main.py" in names and "pipeline/resources/log4j2.properties" in names


# -- the command line of each mode ------------------------------------------------------------


def test_local_mode(tmp_path: Path) -> None:
    argv = dry("local", "--config", str(EXAMPLE), "--", "--set", "trigger.mode=once")
    assert opt(argv, "--master") == ["local[*]"] and opt(argv, "--deploy-mode") == ["client"]
    assert opt(argv, "--py-files") == [str(ROOT / "dist" / "spark" / "pipeline.zip")]
    assert opt(argv, "--properties-file") == [str(ROOT / "conf" / "spark-defaults.conf")]
    app, args = app_and_args(argv)
    assert app == str(ROOT / "dist" / "spark" / "ingest_submit.py")
    assert args == ["--config", str(EXAMPLE), "--set", "trigger.mode=once"]


def test_standalone_needs_a_master_and_runs_the_driver_here() -> None:
    r = submit("standalone", "--config", str(EXAMPLE), "--dry-run")
    assert r.returncode == 2 and "standalone needs --master spark://HOST:PORT" in r.stderr
    argv = dry("standalone", "--master", "spark://m:7077", "--config", str(EXAMPLE))
    assert opt(argv, "--master") == ["spark://m:7077"]
    assert opt(argv, "--deploy-mode") == ["client"]


def test_yarn_cluster_ships_config_and_environment() -> None:
    argv = dry("yarn", "--config", str(EXAMPLE), "--env-archive", "hdfs:///envs/ingest.tar.gz")
    assert opt(argv, "--master") == ["yarn"] and opt(argv, "--deploy-mode") == ["cluster"]
    assert opt(argv, "--files") == [str(EXAMPLE)]
    assert opt(argv, "--archives") == ["hdfs:///envs/ingest.tar.gz#environment"]
    confs = opt(argv, "--conf")
    assert "spark.pyspark.python=./environment/bin/python" in confs
    assert "spark.yarn.appMasterEnv.PYSPARK_PYTHON=./environment/bin/python" in confs
    _, args = app_and_args(argv)
    assert args == ["--config", "pipeline.example.yaml"]  # localized into the working dir
    # client mode: the driver reads the file where it is
    argv = dry("yarn", "--deploy-mode", "client", "--config", str(EXAMPLE))
    assert not opt(argv, "--files")
    assert app_and_args(argv)[1] == ["--config", str(EXAMPLE)]


def test_k8s_cluster_uses_the_image(tmp_path: Path) -> None:
    argv = dry(
        "k8s-cluster",
        "--master", "k8s://https://api.example:6443",
        "--image", "registry.example/ingest:0.1.0",
        "--namespace", "data",
        "--service-account", "ingest-driver",
        "--config", "local:///etc/ingest/pipeline.yaml",
        "--conf", "spark.executor.instances=4",
    )  # fmt: skip
    assert opt(argv, "--deploy-mode") == ["cluster"]
    confs = opt(argv, "--conf")
    assert "spark.kubernetes.container.image=registry.example/ingest:0.1.0" in confs
    assert "spark.kubernetes.namespace=data" in confs
    assert "spark.kubernetes.authenticate.driver.serviceAccountName=ingest-driver" in confs
    assert "spark.executor.instances=4" in confs
    assert not opt(argv, "--py-files")  # the package is in the image
    app, args = app_and_args(argv)
    assert app == "local:///opt/ingest/app/ingest_submit.py"
    assert args == ["--config", "/etc/ingest/pipeline.yaml"]
    # k8s settings are added to the project's defaults
    props = Path(opt(argv, "--properties-file")[0])
    assert props.name.startswith("ingest-spark-defaults.")
    # a local config needs somewhere to upload it
    r = submit(
        "k8s-cluster", "--master", "k8s://https://a:6443", "--image", "i",
        "--config", str(EXAMPLE), "--dry-run",
    )  # fmt: skip
    assert r.returncode == 2 and "--upload-path" in r.stderr
    argv = dry(
        "k8s-cluster", "--master", "k8s://https://a:6443", "--image", "i",
        "--config", str(EXAMPLE), "--upload-path", "s3a://bucket/uploads",
    )  # fmt: skip
    assert "spark.kubernetes.file.upload.path=s3a://bucket/uploads" in opt(argv, "--conf")
    assert opt(argv, "--files") == [str(EXAMPLE)]
    assert app_and_args(argv)[1] == ["--config", "pipeline.example.yaml"]


def test_k8s_client_needs_an_image() -> None:
    r = submit("k8s-client", "--master", "k8s://https://a:6443", "--config", str(EXAMPLE))
    assert r.returncode == 2 and "k8s-client needs --image" in r.stderr
    argv = dry(
        "k8s-client", "--master", "k8s://https://a:6443", "--image", "i", "--config", str(EXAMPLE)
    )
    assert opt(argv, "--deploy-mode") == ["client"]
    assert app_and_args(argv)[1] == ["--config", str(EXAMPLE)]


def test_k8s_defaults_file_is_valid_spark_properties() -> None:
    props = {}
    for line in (ROOT / "conf" / "spark-defaults.k8s.conf").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, value = line.split(None, 1)
            assert key.startswith("spark."), key
            props[key] = value
    assert props["spark.pyspark.python"] == "/opt/ingest/venv/bin/python"


def test_unknown_mode_and_option_are_named() -> None:
    r = submit("mesos", "--config", str(EXAMPLE))
    assert r.returncode == 2 and "unknown mode 'mesos'" in r.stderr
    r = submit("local", "--config", str(EXAMPLE), "--set", "a=b")
    assert r.returncode == 2 and "unknown option --set (pipeline options go after --)" in r.stderr


# A real submission to a standalone master: tests/integration/deploy/test_cluster.py (slow).
