"""The fast path of a take-over: a standby holds a TCP connection to the active's
liveness port and learns of its death when the connection closes.

    active:  LivenessBeacon  listens, accepts, holds; never reads or writes a byte
    standby: HolderLink      connects to the address in the lease's claim and waits on it

A killed process's sockets are closed by its kernel at once, so a SIGKILLed (or crashed)
active is noticed in milliseconds instead of after ``ha.leaseSeconds``. "Gone" needs two
facts: a connection this standby held closed *and* a new connection to the same address
is refused (the port has no listener). A first connection that is refused proves nothing
(a wrong advertised address is refused by the wrong host), nor does a reset by the
network alone (the new connection succeeds) or an unreachable host (it times out): the
lease's expiry decides then, as it does for a paused or partitioned active, whose
connection stays open.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import threading
import time

from pipeline.errors import ConfigError

log = logging.getLogger(__name__)

MAX_PEERS = 64  # connections an active holds (standbys); more are closed at once
CONNECT_S = 1.0  # a standby's connect timeout


def advertised_host(spark_conf: dict[str, str]) -> str:
    """The host standbys reach this replica's liveness port at: ``INGEST_ADVERTISE_HOST``
    (Helm sets the pod IP), else ``spark.driver.host``, else this host's address."""
    host = os.environ.get("INGEST_ADVERTISE_HOST") or spark_conf.get("spark.driver.host")
    if host:
        return host
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class LivenessBeacon:
    """The active side: a listening socket whose connections close when this process dies."""

    def __init__(self, host: str, port: int = 0) -> None:
        try:
            self._listener = socket.create_server(("", port))
        except OSError as e:
            raise ConfigError(f"ha.port {port}: cannot listen for standbys ({e})") from None
        self.address = f"{host}:{self._listener.getsockname()[1]}"
        self._peers: list[socket.socket] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="ha-beacon", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                ready, _, _ = select.select([self._listener, *self._peers], [], [], 0.5)
            except (OSError, ValueError):  # closed under us
                return
            for s in ready:
                if s is self._listener:
                    self._accept()
                else:  # a standby went away (EOF) or wrote something: drop it
                    self._drop(s)

    def _accept(self) -> None:
        try:
            conn, _ = self._listener.accept()
        except OSError:
            return
        if len(self._peers) >= MAX_PEERS:
            conn.close()
        else:
            self._peers.append(conn)

    def _drop(self, s: socket.socket) -> None:
        with contextlib.suppress(ValueError):
            self._peers.remove(s)
        s.close()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        self._thread.join(timeout=2)
        for s in self._peers:
            s.close()
        self._peers.clear()


def _split(address: str) -> tuple[str, int] | None:
    host, _, port = address.rpartition(":")
    return (host.strip("[]"), int(port)) if host and port.isdigit() else None


class HolderLink:
    """The standby side: a connection to the lease holder of one generation."""

    def __init__(self) -> None:
        self.generation: int | None = None
        self._target: tuple[str, int] | None = None
        self._sock: socket.socket | None = None
        self._gone = False

    @property
    def linked(self) -> bool:
        return self._sock is not None

    def follow(self, generation: int | None, address: str | None) -> None:
        """Link to the holder of ``generation`` at ``address`` (no-op if already linked
        to it). None: nobody to follow (no lease, released, or no address published)."""
        if generation == self.generation and (self._sock is not None or self._gone):
            return
        self.close()
        self.generation = generation
        self._target = _split(address) if generation is not None and address else None
        if self._target is not None:
            # A refusal now proves nothing: a wrong advertised address (another host's
            # loopback) refuses too, and trusting it would take over from a live active
            # again and again. Only a held connection that closed counts; else the lease.
            self._sock, _ = self._connect()

    def _connect(self) -> tuple[socket.socket | None, bool]:
        """(connection, refused): refused means no process listens there."""
        assert self._target is not None
        try:
            return socket.create_connection(self._target, timeout=CONNECT_S), False
        except ConnectionRefusedError:
            return None, True
        except OSError as e:  # unreachable, timed out: the lease decides
            log.debug("liveness link to %s:%d failed: %s", *self._target, e)
            return None, False

    def gone(self, wait_s: float) -> bool:
        """Wait up to ``wait_s`` for the holder's connection to close; True when the holder
        is known to be gone (closed, and its port refuses a new connection).

        A dying process may send its connections' FIN a moment before its listening
        socket is released, so a reconnect can still succeed; that connection is reset
        when the listener goes, and we wait on it for the rest of ``wait_s``."""
        if self._gone:
            return True
        deadline = time.monotonic() + wait_s
        for _ in range(3):  # reconnects per call: a peer that accepts and closes is not ours
            if self._sock is None:
                break
            left = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._sock], [], [], left)
            if not ready:
                return False
            try:
                closed = self._sock.recv(1) == b""
            except OSError:
                closed = True
            if not closed:  # a beacon never writes: not ours to judge
                return False
            self._sock.close()
            self._sock, self._gone = self._connect()
            if self._gone:
                log.info("the lease holder's liveness port closed: it is gone")
                return True
        left = deadline - time.monotonic()
        if left > 0:
            time.sleep(left)
        return False

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock, self._gone, self.generation = None, False, None
