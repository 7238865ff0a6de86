"""The runtime's wheel alone (``pyproject.toml``: ``include = ["pipeline*"]``): it carries no
lab, and from a fresh virtualenv without the lab ``python -m pipeline run`` and
``spark-submit pipeline/main.py`` (the installed package's) ingest a topic exactly once,
against a broker the lab starts from the checkout (the session's ``kafka_broker``).

The fresh venv borrows the dependencies (PySpark, pyiceberg, …) of the running venv without
downloading them: a ``.pth`` line names a directory of links to its site-packages entries,
leaving out this project's distributions and editable finders, so neither ``lab`` nor the
checkout's ``pipeline`` can leak in (a ``.pth`` file in a directory that a ``.pth`` line
adds is never executed; the leftovers are checked anyway).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
import yaml
from support.drivers import iceberg_table_coords, pipeline_config, produced

from lab.generator import GeneratorSpec, produce

ROOT = Path(__file__).resolve().parents[3]
# this project's own entries in a site-packages (its distributions, editable finders)
OWN = ("kafka_lakehouse_ingest", "__editable__", "pipeline", "lab")


@pytest.fixture(scope="module")
def runtime_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The runtime's wheel, built from a copy of what the Dockerfile copies (the build
    leaves build/ and *.egg-info behind, not in the checkout)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "pipeline", src / "pipeline", ignore=shutil.ignore_patterns("__pycache__")
    )
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = out.glob("kafka_lakehouse_ingest-*.whl")
    return wheel


def test_runtime_wheel_carries_no_lab(runtime_wheel: Path) -> None:
    with zipfile.ZipFile(runtime_wheel) as z:
        names = z.namelist()
    assert "pipeline/main.py" in names and "pipeline/ops/verify/__init__.py" in names
    assert not [n for n in names if n.startswith(("lab/", "pipeline/tools/"))], names
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"pipeline"}, tops
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    with zipfile.ZipFile(runtime_wheel) as z:
        text = z.read(entry_points).decode()
    assert "ingest = pipeline.cli:main" in text and "ingest.commands" not in text, text


def _fresh_venv(where: Path, wheel: Path) -> Path:
    """A venv at ``where`` with the runtime's wheel and the running venv's dependencies
    (linked, minus this project's entries); its python."""
    venv.EnvBuilder(with_pip=False).create(where)
    python = where / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    deps = where / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not entry.name.startswith(OWN):
            (deps / entry.name).symlink_to(entry)
    (site / "deps.pth").write_text(f"{deps}\n")
    r = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         "--no-index", str(wheel)],
        capture_output=True, text=True, timeout=300, env=_env(python),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    return python


def _env(python: Path) -> dict[str, str]:
    """The environment of a process on the fresh venv: nothing of the checkout on the path
    (it holds the editable installs' *.egg-info, which pip would take for installed)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    bin_dir = str(python.parent)
    return {
        **env,
        "PATH": f"{bin_dir}:{env.get('PATH', '')}",
        "VIRTUAL_ENV": str(python.parent.parent),
        "PYSPARK_PYTHON": str(python),
        "PYSPARK_DRIVER_PYTHON": str(python),
        "INGEST_SPARK_LOG_LEVEL": "ERROR",
    }


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_runtime_wheel_alone_runs_a_pipeline(
    runtime_wheel: Path, tmp_path: Path, kafka_broker: object
) -> None:
    bootstrap: str = kafka_broker.bootstrap_servers  # type: ignore[attr-defined]
    python = _fresh_venv(tmp_path / "venv", runtime_wheel)
    env = _env(python)
    work = tmp_path / "work"  # the working directory: not the checkout
    work.mkdir()

    def run(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, env=env, cwd=work
        )

    # the lab is not there, the package is the wheel's, and the lab's commands say so
    probe = run(str(python), "-c", "import pipeline; print(pipeline.__file__); import lab")
    assert "No module named 'lab'" in probe.stderr, probe.stderr[-2000:]
    installed = Path(probe.stdout.strip())
    assert installed.is_relative_to(tmp_path / "venv") and not installed.is_relative_to(ROOT)
    bench = run(str(python), "-m", "pipeline", "bench", "--quick")
    assert bench.returncode == 2 and "part of the lab" in bench.stderr, bench.stderr
    assert len(bench.stderr.strip().splitlines()) == 1, bench.stderr

    topic = kafka_broker.new_topic("wheel", 2)  # type: ignore[attr-defined]
    sink = {"catalog": {"warehouse": str(tmp_path / "warehouse")}, "table": "db.events"}
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump(pipeline_config(tmp_path, bootstrap, topic, sink)))

    first = produce(bootstrap, topic, GeneratorSpec(count=400, seed=1))
    r = run(str(python), "-m", "pipeline", "run", "--config", str(config))
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert iceberg_table_coords(tmp_path / "warehouse", "db.events") == produced(first)

    # spark-submit of the installed package's main.py: the same table, the next records
    second = produce(bootstrap, topic, GeneratorSpec(count=300, seed=2))
    spark_home = Path(
        run(
            str(python), "-c", "import os, pyspark; print(os.path.dirname(pyspark.__file__))"
        ).stdout.strip()
    ).resolve()
    env["SPARK_HOME"] = str(spark_home)
    r = run(
        str(spark_home / "bin" / "spark-submit"), "--master", "local[2]",
        str(installed.parent / "main.py"), "--config", str(config),
    )  # fmt: skip
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert iceberg_table_coords(tmp_path / "warehouse", "db.events") == produced(first, second)
    assert sum(produced(first, second).values()) == 700
