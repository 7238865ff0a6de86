"""A real Iceberg REST catalog on this host, for the tests and drills: Iceberg's own REST
servlet and adapter over a ``JdbcCatalog`` on PostgreSQL, the warehouse on S3 (SeaweedFS),
OAuth2 client credentials turned on, and fault hooks on commit requests.

The server is the manifest's ``rest-catalog`` set and a launcher of our own
(``RestCatalogServer.java`` beside this module, compiled once into the JVM home). It runs in
its own JVM on a loopback port; each server has its own PostgreSQL database, created at start
and dropped at :meth:`RestCatalogServer.close`, so runs never share a catalog.

Invariants:

1. A restart (:meth:`RestCatalogServer.restart`) keeps the port, the database and the
   warehouse, and forgets every issued token (tokens live in the server's memory).
2. A fault armed with :meth:`RestCatalogServer.arm` fires on the next authorised commit
   request (``POST .../namespaces/{ns}/tables/{t}``, ``POST .../transactions/commit``), once:
   the server removes the fault file when it fires, before it acts. ``expire-tokens`` fires
   before the request's token is checked, so that request is refused with 401.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import os
import secrets
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from lab.broker.node import find_java
from lab.ports import free_port
from lab.processes import die_with_parent, stop_process
from pipeline import jvm
from pipeline.errors import EnvironmentProblem

__all__ = [
    "REST_CATALOG_SET",
    "Fault",
    "OAuthClient",
    "ObjectStore",
    "RestCatalogServer",
    "RestCatalogStartError",
    "TokenPolicy",
    "launcher_classes",
    "start_rest_catalog",
]

REST_CATALOG_SET = "rest-catalog"
LAUNCHER = Path(__file__).with_name("RestCatalogServer.java")
_MAIN_CLASS = "RestCatalogServer"
_S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"


class RestCatalogStartError(EnvironmentProblem):
    """The REST catalog did not start (no Java, no set, no database, no answer in time)."""


class Fault(enum.Enum):
    """What the server does on the next commit request once armed (invariant 2)."""

    HALT_BEFORE_APPLY = "halt-before-apply"  # process gone, nothing committed
    HALT_AFTER_APPLY = "halt-after-apply"  # committed in PostgreSQL, process gone unanswered
    HALT_AFTER_ANSWER = "halt-after-answer"  # committed and answered, then process gone
    ANSWER_502_AFTER_APPLY = "answer-502-after-apply"  # committed, answered 502
    HANG_AFTER_APPLY = "hang-after-apply"  # committed, answer held back 120 s
    EXPIRE_TOKENS = "expire-tokens"  # every token forgotten: this request gets 401


class ObjectStore(Protocol):
    """The S3-compatible store the warehouse lives on (:class:`lab.objectstore.S3Server`)."""

    @property
    def endpoint(self) -> str: ...
    @property
    def access_key(self) -> str: ...
    @property
    def secret_key(self) -> str: ...
    @property
    def region(self) -> str: ...


@dataclass(frozen=True)
class OAuthClient:
    """The one OAuth2 client the server knows (client-credentials grant)."""

    client_id: str = "ingest-lab"
    client_secret: str = field(default_factory=lambda: secrets.token_hex(16))
    scope: str = "catalog"

    @property
    def credential(self) -> str:
        """pyiceberg's and Iceberg's ``credential`` property: ``id:secret``."""
        return f"{self.client_id}:{self.client_secret}"


@dataclass(frozen=True)
class TokenPolicy:
    """How long the server honours a token, and what it tells the client (``expires_in``):
    they differ when a test wants a token to die while its client still trusts it."""

    lifetime_s: int = 3600
    advertised_expires_in_s: int = 3600
    static_token: str | None = None  # also accepted as a bearer token, never expires


def launcher_classes() -> Path:
    """The directory of the compiled launcher, compiled once per source and set."""
    home = jvm.fetch(REST_CATALOG_SET)
    digest = hashlib.sha256(LAUNCHER.read_bytes() + str(home).encode()).hexdigest()[:12]
    target = jvm.jvm_home() / f"rest-catalog-launcher-{digest}"
    if (target / f"{_MAIN_CLASS}.class").is_file():
        return target
    javac = shutil.which("javac")
    if javac is None:
        raise RestCatalogStartError(
            "javac (a JDK 17) is needed to compile the REST catalog launcher"
        )
    staging = Path(tempfile.mkdtemp(prefix=".rest-catalog-launcher-", dir=target.parent))
    try:
        done = subprocess.run(
            [javac, "-nowarn", "-d", str(staging), "-cp", str(home / "*"), str(LAUNCHER)],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RestCatalogStartError(
                f"could not compile {LAUNCHER.name}: {(done.stderr or done.stdout).strip()[:400]}"
            )
        staging.chmod(0o755)
        try:
            staging.rename(target)
        except OSError:  # another process compiled it first
            if not (target / f"{_MAIN_CLASS}.class").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


@dataclass(frozen=True)
class PostgresServer:
    """Where the catalog databases are created: a libpq URI's server and role."""

    host: str
    port: int
    user: str
    password: str | None

    @classmethod
    def parse(cls, uri: str) -> PostgresServer:
        """From ``postgresql://user[:password]@host:port/db`` (SQLAlchemy's
        ``postgresql+psycopg2://`` too); the database part is not used."""
        parts = urllib.parse.urlsplit(uri.replace("postgresql+psycopg2://", "postgresql://", 1))
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 5432,
            user=urllib.parse.unquote(parts.username or "postgres"),
            password=urllib.parse.unquote(parts.password) if parts.password else None,
        )

    def jdbc_url(self, database: str) -> str:
        return f"jdbc:postgresql://{self.host}:{self.port}/{database}"

    def _execute(self, statement: str) -> None:
        """Run ``statement`` outside a transaction on the server's ``postgres`` database."""
        import psycopg2

        conn = psycopg2.connect(
            host=self.host, port=self.port, user=self.user, password=self.password,
            dbname="postgres", connect_timeout=5,
        )  # fmt: skip
        try:
            conn.autocommit = True  # CREATE / DROP DATABASE refuse a transaction
            with conn.cursor() as cur:
                cur.execute(statement)
        finally:
            conn.close()

    def create_database(self, name: str) -> None:
        try:
            self._execute(f'CREATE DATABASE "{name}"')
        except Exception as e:
            raise RestCatalogStartError(
                f"no PostgreSQL for the REST catalog at {self.host}:{self.port}: {e}"
            ) from None

    def drop_database(self, name: str) -> None:
        with contextlib.suppress(Exception):  # a server already gone drops nothing
            self._execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class RestCatalogServer:
    """One REST catalog process; ``uri`` is what ``sink.catalog.uri`` takes."""

    port: int
    home: Path
    postgres: PostgresServer
    database: str
    store: ObjectStore
    warehouse: str  # s3://bucket/prefix
    client: OAuthClient
    tokens: TokenPolicy
    process: subprocess.Popen[bytes] | None = None
    started_at: float | None = None  # time.time() of the last start
    log_file: IO[bytes] | None = field(default=None, repr=False)

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token_uri(self) -> str:
        return f"{self.uri}/v1/oauth/tokens"

    @property
    def fault_file(self) -> Path:
        return self.home / "fault"

    @property
    def log_path(self) -> Path:
        return self.home / "rest-catalog.log"

    def config_path(self) -> Path:
        return self.home / "server.properties"

    def arm(self, fault: Fault) -> None:
        """Fire ``fault`` on the next commit request (invariant 2)."""
        tmp = self.fault_file.with_suffix(".tmp")
        tmp.write_text(fault.value)
        tmp.replace(self.fault_file)

    def disarm(self) -> None:
        self.fault_file.unlink(missing_ok=True)

    def armed(self) -> bool:
        return self.fault_file.exists()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def config_status(self, token: str | None = None) -> int:
        """The HTTP status of ``GET /v1/config`` (0: no answer)."""
        request = urllib.request.Request(f"{self.uri}/v1/config")
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=2) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)
        except (OSError, urllib.error.URLError):
            return 0

    def _write_config(self) -> None:
        lines = {
            "server.host": "127.0.0.1",
            "server.port": str(self.port),
            "auth.client-id": self.client.client_id,
            "auth.client-secret": self.client.client_secret,
            "auth.token-lifetime-seconds": str(self.tokens.lifetime_s),
            "auth.advertised-expires-in": str(self.tokens.advertised_expires_in_s),
            "auth.static-token": self.tokens.static_token or "",
            "faults.file": str(self.fault_file),
            "catalog.name": "lab",
            "catalog.uri": self.postgres.jdbc_url(self.database),
            "catalog.jdbc.user": self.postgres.user,
            "catalog.jdbc.password": self.postgres.password or "",
            "catalog.jdbc.schema-version": "V1",
            "catalog.warehouse": self.warehouse,
            "catalog.io-impl": _S3_FILE_IO,
            "catalog.s3.endpoint": self.store.endpoint,
            "catalog.s3.path-style-access": "true",
            "catalog.s3.access-key-id": self.store.access_key,
            "catalog.s3.secret-access-key": self.store.secret_key,
            "catalog.client.region": self.store.region,
        }
        text = "".join(f"{k}={_escape(v)}\n" for k, v in lines.items())
        self.config_path().write_text(text)
        self.config_path().chmod(0o600)

    def start(self, timeout_s: float = 90.0) -> None:
        """Start the process (again, on the same port and database) and wait until it
        answers ``GET /v1/config`` with 401 (auth is on)."""
        classes = launcher_classes()
        self._write_config()
        if self.log_file is None:
            self.log_file = open(self.log_path, "ab")  # noqa: SIM115 - kept open
        env = {
            **os.environ,
            # SeaweedFS and other S3-compatible stores: checksums only where S3 needs them
            "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
            "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required",
            "AWS_REGION": self.store.region,
        }
        self.process = subprocess.Popen(
            [
                find_java(),
                "-Xms64m",
                "-Xmx384m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",  # starts faster; the load is light
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp",
                f"{jvm.fetch(REST_CATALOG_SET) / '*'}{os.pathsep}{classes}",
                _MAIN_CLASS,
                str(self.config_path()),
            ],
            cwd=self.home,
            stdin=subprocess.DEVNULL,
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent(),
            start_new_session=True,
            env=env,
        )
        self.started_at = time.time()
        deadline = time.monotonic() + timeout_s
        while self.config_status() != 401:
            if self.process.poll() is not None:
                raise RestCatalogStartError(
                    f"the REST catalog exited with {self.process.returncode} at start; "
                    f"see {self.log_path}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise RestCatalogStartError(
                    f"the REST catalog did not answer within {timeout_s:.0f}s; see {self.log_path}"
                )
            time.sleep(0.2)

    def wait_exit(self, timeout_s: float = 30.0) -> int | None:
        """The process's exit status once it exits (a fault's halt), None if it did not."""
        if self.process is None:
            return None
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 20 s."""
        stop_process(self.process)
        self.process = None

    def kill(self) -> None:
        """SIGKILL: the catalog dies mid-whatever, as in an outage."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def restart(self, timeout_s: float = 90.0) -> None:
        """Stop (if running) and start again: same port, database and warehouse; every
        issued token forgotten (invariant 1)."""
        self.stop()
        self.start(timeout_s)

    def close(self) -> None:
        """Stop, drop the database, close the log."""
        self.stop()
        self.postgres.drop_database(self.database)
        if self.log_file is not None:
            self.log_file.close()
            self.log_file = None

    def fetch_token(self) -> str:
        """A bearer token from the server's token endpoint (client credentials)."""
        import json

        data = urllib.parse.urlencode(
            {
                "grant_type": "client_credentials",
                "client_id": self.client.client_id,
                "client_secret": self.client.client_secret,
                "scope": self.client.scope,
            }
        ).encode()
        with urllib.request.urlopen(self.token_uri, data=data, timeout=10) as r:
            return str(json.load(r)["access_token"])

    def file_io_properties(self) -> dict[str, str]:
        """pyiceberg's ``s3.*`` FileIO properties for the warehouse (static credentials:
        the server vends none)."""
        return {
            "s3.endpoint": self.store.endpoint,
            "s3.access-key-id": self.store.access_key,
            "s3.secret-access-key": self.store.secret_key,
            "s3.region": self.store.region,
            "s3.path-style-access": "true",
        }

    def pyiceberg_properties(self) -> dict[str, str]:
        """The properties of a pyiceberg ``RestCatalog`` on this server: ``credential`` and
        ``oauth2-server-uri`` (flat strings, so ``sink.catalog.properties`` takes them)."""
        return {
            "type": "rest",
            "uri": self.uri,
            "warehouse": self.warehouse,
            "credential": self.client.credential,
            "oauth2-server-uri": self.token_uri,
            "scope": self.client.scope,
            **self.file_io_properties(),
        }

    def sink_catalog(self, name: str = "lake") -> dict[str, object]:
        """The ``sink.catalog`` block of a pipeline config on this server."""
        props = self.pyiceberg_properties()
        for key in ("type", "uri", "warehouse"):
            props.pop(key)
        return {
            "name": name,
            "type": "rest",
            "uri": self.uri,
            "warehouse": self.warehouse,
            "properties": props,
        }


def _escape(value: str) -> str:
    """A value as ``java.util.Properties`` reads it back."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\:").replace("=", "\\=")


def start_rest_catalog(
    home: Path,
    *,
    postgres_uri: str,
    store: ObjectStore,
    bucket: str,
    client: OAuthClient | None = None,
    tokens: TokenPolicy | None = None,
    timeout_s: float = 90.0,
) -> RestCatalogServer:
    """A running REST catalog with its config and log in ``home`` (created), its own
    database on the PostgreSQL server of ``postgres_uri``, the warehouse at
    ``s3://bucket/warehouse`` on ``store``."""
    home.mkdir(parents=True, exist_ok=True)
    postgres = PostgresServer.parse(postgres_uri)
    database = f"rest_catalog_{secrets.token_hex(6)}"
    postgres.create_database(database)
    server = RestCatalogServer(
        port=free_port(),
        home=home,
        postgres=postgres,
        database=database,
        store=store,
        warehouse=f"s3://{bucket}/warehouse",
        client=client or OAuthClient(),
        tokens=tokens or TokenPolicy(),
    )
    try:
        server.start(timeout_s)
    except BaseException:
        server.close()
        raise
    return server
