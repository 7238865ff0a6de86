"""A real Schema Registry on this host: Apicurio Registry, whose Confluent-compatible API
(``/apis/ccompat/v7``) the registry formats (``decode.format: avro | protobuf | json-schema``)
talk to. For the tests and ``ingest demo --format avro``; production points at its own.

The server is the runnable distribution Apicurio publishes on Maven Central
(``apicurio-registry-app`` ``tar.gz`` classifier ``all``: the manifest's ``registry`` set),
unpacked once next to the fetched archive. It runs in its own JVM on loopback ports with its
default storage (H2 in memory: a restart forgets every schema) and Confluent id semantics
(ids are content ids: one schema under two subjects has one id).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.broker.node import find_java
from lab.ports import free_port
from lab.processes import die_with_parent, stop_process
from pipeline import jvm
from pipeline.errors import EnvironmentProblem

__all__ = ["RegistryStartError", "SchemaRegistryServer", "distribution", "start_registry"]

REGISTRY_SET = "registry"
CCOMPAT_PATH = "/apis/ccompat/v7"
_UNPACKED = "dist"


class RegistryStartError(EnvironmentProblem):
    """The Schema Registry did not start (no Java, no distribution, no answer in time)."""


def distribution() -> Path:
    """The unpacked registry distribution (the directory holding its runner jar)."""
    home = jvm.fetch(REGISTRY_SET)
    target = home / _UNPACKED
    if not target.is_dir():
        archives = sorted(home.glob("*.tar.gz"))
        if not archives:
            raise RegistryStartError(f"no registry archive in {home} (manifest set 'registry')")
        staging = Path(tempfile.mkdtemp(prefix=".dist-", dir=home))
        try:
            with tarfile.open(archives[0]) as tar:
                _extract(tar, staging)
            with contextlib.suppress(OSError):  # another process unpacked it first
                staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _extract(tar: tarfile.TarFile, dest: Path) -> None:
    """Unpack ``tar`` under ``dest`` only: Python's ``tar`` extraction filter where it has
    one (3.11.4+), else :func:`extract_checked` (Debian 12 has 3.11.2)."""
    if hasattr(tarfile, "tar_filter"):
        tar.extractall(dest, filter="tar")
    else:
        extract_checked(tar, dest)


def extract_checked(tar: tarfile.TarFile, dest: Path) -> None:
    """Unpack ``tar`` under ``dest`` after checking every member: no device file, no path
    or link that leads out of ``dest``."""
    root = dest.resolve()
    for member in tar.getmembers():
        target = (root / member.name).resolve()
        pointed = [target]
        if member.issym():
            pointed.append((target.parent / member.linkname).resolve())
        elif member.islnk():
            pointed.append((root / member.linkname).resolve())
        if member.isdev() or not all(p.is_relative_to(root) for p in pointed):
            raise RegistryStartError(
                f"the registry archive's member {member.name!r} leads out of {dest}"
            )
    tar.extractall(dest)  # every member checked above


def _runner(dist: Path) -> Path:
    """3.0.x ships a legacy ``*-runner.jar``, 3.1+ Quarkus's fast-jar ``quarkus-run.jar``."""
    found = sorted(dist.rglob("*-runner.jar")) or sorted(dist.rglob("quarkus-run.jar"))
    if not found:
        raise RegistryStartError(f"no runner jar in the registry distribution {dist}")
    return found[0]


@dataclass
class SchemaRegistryServer:
    """One registry process; ``url`` is what ``decode.registry.url`` takes."""

    port: int
    management_port: int
    home: Path
    process: subprocess.Popen[bytes] | None = None
    log_file: Any = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{CCOMPAT_PATH}"

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/subjects", timeout=2) as r:
                return bool(r.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def start(self, timeout_s: float = 120.0) -> None:
        """Start the process (again, on the same ports) and wait until it answers."""
        dist = distribution()
        runner = _runner(dist)
        if self.log_file is None:
            self.log_file = open(self.home / "registry.log", "ab")  # noqa: SIM115 - kept open
        self.process = subprocess.Popen(
            [
                find_java(),
                "-Xms64m",
                "-Xmx384m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",  # starts in half the time; the load is light
                "-Dquarkus.http.host=127.0.0.1",
                f"-Dquarkus.http.port={self.port}",
                "-Dquarkus.management.host=127.0.0.1",
                f"-Dquarkus.management.port={self.management_port}",
                "-Dquarkus.http.access-log.enabled=false",
                "-jar",
                str(runner),
            ],
            cwd=runner.parent,
            stdin=subprocess.DEVNULL,
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent(),
            start_new_session=True,
            env={**os.environ, "QUARKUS_LOG_CONSOLE_JSON": "false"},
        )
        deadline = time.monotonic() + timeout_s
        while not self.answers():
            if self.process.poll() is not None:
                raise RegistryStartError(
                    f"the Schema Registry exited with {self.process.returncode} at start; "
                    f"see {self.home / 'registry.log'}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RegistryStartError(
                    f"the Schema Registry did not answer within {timeout_s:.0f}s; "
                    f"see {self.home / 'registry.log'}"
                )
            time.sleep(0.5)

    def stop(self) -> None:
        stop_process(self.process)
        self.process = None

    def close(self) -> None:
        self.stop()
        if self.log_file is not None:
            self.log_file.close()
            self.log_file = None


def start_registry(home: Path, timeout_s: float = 120.0) -> SchemaRegistryServer:
    """A running registry with its log in ``home`` (created)."""
    home.mkdir(parents=True, exist_ok=True)
    server = SchemaRegistryServer(port=free_port(), management_port=free_port(), home=home)
    server.start(timeout_s)
    return server
