"""The driver's HTTP endpoint: ``/metrics``, ``/healthz`` and ``/readyz`` on one port.

A small WSGI app on ``wsgiref`` (thread per request, daemon threads) so Kubernetes
probes and Prometheus scrapes never wait behind each other:

* ``GET /metrics`` -- Prometheus exposition of one registry (text or OpenMetrics,
  negotiated by prometheus-client; gzip when asked).
* ``GET /healthz`` -- ``200 ok`` while the process serves requests (liveness).
* ``GET /readyz``  -- ``200 ready`` or ``503 not ready: <reason>`` from a callback
  (readiness: query active, last batch not failed, writer not fenced).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.registry import Collector

from pipeline.errors import ConfigError

log = logging.getLogger(__name__)

Readiness = Callable[[], tuple[bool, str]]
StartResponse = Callable[..., Any]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Probes every few seconds would flood the log: log nothing."""


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _ThreadingServerV6(_ThreadingServer):
    address_family = socket.AF_INET6


def health_app(registry: Collector, readiness: Readiness) -> Callable[..., Iterable[bytes]]:
    """The WSGI app serving the three endpoints (usable under any WSGI server)."""
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            return metrics_app(environ, start_response)
        text = [("Content-Type", "text/plain; charset=utf-8")]
        if path == "/healthz":
            start_response("200 OK", text)
            return [b"ok\n"]
        if path == "/readyz":
            try:
                ready, reason = readiness()
            except Exception as e:  # a broken check must not look like "ready"
                ready, reason = False, f"readiness check failed: {e}"
            if ready:
                start_response("200 OK", text)
                return [b"ready\n"]
            start_response("503 Service Unavailable", text)
            return [f"not ready: {reason}\n".encode()]
        if path == "/":
            start_response("200 OK", text)
            return [b"kafka-lakehouse-ingest driver: /metrics /healthz /readyz\n"]
        start_response("404 Not Found", text)
        return [b"not found: /metrics /healthz /readyz\n"]

    return app


class HealthServer:
    """Serves :func:`health_app` from a daemon thread; ``port=0`` binds a free port."""

    def __init__(
        self, registry: Collector, readiness: Readiness, host: str = "0.0.0.0", port: int = 9108
    ) -> None:
        self.host = host
        self.requested_port = port
        self._app = health_app(registry, readiness)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._port = 0

    @property
    def port(self) -> int:
        """The bound port (the free port picked for ``port=0``); 0 before ``start()``."""
        return self._port

    @property
    def url(self) -> str:
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        if self._server is not None:
            return
        server_class = _ThreadingServerV6 if ":" in self.host else _ThreadingServer
        try:
            server = make_server(
                self.host,
                self.requested_port,
                self._app,
                server_class=server_class,
                handler_class=_QuietHandler,
            )
        except OSError as e:
            raise ConfigError(
                f"metrics: cannot listen on {self.host}:{self.requested_port} ({e.strerror or e}); "
                "set metrics.port to a free port (0 picks one) or metrics.enabled=false"
            ) from None
        self._server = server
        self._port = int(server.server_port)
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="ingest-metrics-http",
            daemon=True,
        )
        self._thread.start()
        log.info("metrics and health endpoints on %s (/metrics /healthz /readyz)", self.url)

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server, self._thread = None, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)
