"""A private PostgreSQL cluster that tests and drills may stop and start at will.

Catalog-outage tests must never stop the machine's shared server (other tests use it), so
they create their own cluster with Debian's ``postgresql-common`` tools
(``pg_createcluster`` / ``pg_ctlcluster`` / ``pg_dropcluster``) on a free port, with trust
authentication on 127.0.0.1 only.

Invariants
  * :meth:`PgCluster.create` returns a cluster that accepts connections; :meth:`stop`
    returns once the server no longer does; :meth:`start` once it does again.
  * :meth:`drop` removes the cluster and its data directory (also when it is stopped);
    it is safe to call twice.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from lab.ports import free_port

__all__ = [
    "PgCluster",
    "PgClusterUnavailable",
    "available",
    "project_server_uri",
    "shared_server_uri",
]

_PG_ETC = Path("/etc/postgresql")


class PgClusterUnavailable(RuntimeError):
    """The machine lacks what a private cluster needs (tools, a server version, rights)."""


def available() -> str | None:
    """Why no private cluster can be made here, or None when one can."""
    for tool in ("pg_createcluster", "pg_ctlcluster", "pg_dropcluster"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian package postgresql-common)"
    if not _versions():
        return f"no PostgreSQL server version under {_PG_ETC}"
    return None


def _versions() -> list[str]:
    if not _PG_ETC.is_dir():
        return []
    return sorted((p.name for p in _PG_ETC.iterdir() if p.name.isdigit()), key=int)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _run(*cmd: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise PgClusterUnavailable(f"{' '.join(cmd)} failed: {(r.stderr or r.stdout).strip()}")


@dataclass(frozen=True)
class PgCluster:
    version: str
    name: str
    port: int

    @classmethod
    def create(cls, name: str | None = None, port: int | None = None) -> PgCluster:
        why = available()
        if why is not None:
            raise PgClusterUnavailable(why)
        cluster = cls(
            _versions()[-1], name or f"ingest_{uuid.uuid4().hex[:8]}", port or free_port()
        )
        _run(
            "pg_createcluster", cluster.version, cluster.name, "-p", str(cluster.port),
            "--start", "--", "--auth=trust",
        )  # fmt: skip
        try:
            cluster._wait(up=True)
        except BaseException:
            cluster.drop()
            raise
        return cluster

    @property
    def uri(self) -> str:
        """libpq URI of the ``postgres`` database as the ``postgres`` superuser."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def sqlalchemy_uri(self) -> str:
        """The same database for pyiceberg's SQL catalog."""
        return self.uri.replace("postgresql://", "postgresql+psycopg2://", 1)

    @property
    def running(self) -> bool:
        return _accepts(self.port)

    def stop(self) -> None:
        """Fast shutdown: open connections are closed, new ones refused."""
        _run("pg_ctlcluster", self.version, self.name, "stop", "--mode", "fast")
        self._wait(up=False)

    def start(self) -> None:
        _run("pg_ctlcluster", self.version, self.name, "start")
        self._wait(up=True)

    def drop(self) -> None:
        subprocess.run(
            ["pg_dropcluster", "--stop", self.version, self.name],
            capture_output=True,
            timeout=120,
        )

    def _wait(self, *, up: bool, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if up and self._ready():
                return
            if not up and not _accepts(self.port):
                return
            time.sleep(0.1)
        state = "accept connections" if up else "stop"
        raise PgClusterUnavailable(f"cluster {self.version}/{self.name} did not {state}")

    def _ready(self) -> bool:
        try:
            import psycopg2
        except ImportError:  # port open is the best we can tell without a client
            return _accepts(self.port)
        try:
            psycopg2.connect(self.uri, connect_timeout=2).close()
            return True
        except Exception:
            return False


def shared_server_uri() -> str | None:
    """SQLAlchemy URI of the machine's PostgreSQL (``INGEST_TEST_POSTGRES``, default trust
    auth on 127.0.0.1:5432, database ``test``) when it answers, else None."""
    import os

    try:
        import psycopg2
    except ImportError:
        return None
    uri = os.environ.get("INGEST_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
    try:
        psycopg2.connect(uri, connect_timeout=3).close()
    except Exception:
        return None
    return uri.replace("postgresql://", "postgresql+psycopg2://", 1)


def project_server_uri() -> str:
    """SQLAlchemy URI of the project's own PostgreSQL, installed and started when missing by
    ``scripts/postgres.sh`` (port 54329, trust on 127.0.0.1, database ``test``); the
    machine's (:func:`shared_server_uri`) when it answers. PgClusterUnavailable: neither."""
    found = shared_server_uri()
    if found is not None:
        return found
    script = Path(__file__).resolve().parents[1] / "scripts" / "postgres.sh"
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise PgClusterUnavailable(
            f"scripts/postgres.sh failed: {(done.stderr or done.stdout).strip()[-200:]}"
        )
    return lines[-1].replace("postgresql://", "postgresql+psycopg2://", 1)
