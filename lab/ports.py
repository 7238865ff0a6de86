"""Loopback ports for the servers the tools start: Kafka nodes, the schema registry,
SeaweedFS, PostgreSQL, test HTTP servers.

Not ``bind(("127.0.0.1", 0))``: that draws from the kernel's ephemeral range, the range
every outgoing connection draws its local port from. A JVM takes seconds to bind the port
it was given, and in between a client connection (one Kafka node dialling another's
controller) can take it; CI saw a node die with "Address already in use" so. Ports here
come from below that range, which outgoing connections never use; the ports of one call
are held together while they are chosen, so they are distinct, and a port something
already listens on (or lingers on in TIME_WAIT) fails the trial bind and is passed over.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_port", "free_ports"]

_LOWEST = 10_000
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_random = random.SystemRandom()


def _below_ephemeral() -> int:
    """The first port of the kernel's ephemeral range (Linux's default 32768)."""
    try:
        return int(_EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports that nothing listens on, outside the ephemeral range."""
    if n <= 0:
        return []
    top = _below_ephemeral()
    if top - _LOWEST < 1_000:  # a host with an unusual range: let the kernel choose
        return _kernel_ports(n)
    held: list[socket.socket] = []
    try:
        for _ in range(n * 50):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", _random.randrange(_LOWEST, top)))
            except OSError:
                s.close()
                continue
            held.append(s)
            if len(held) == n:
                break
        else:
            raise OSError(f"no {n} free loopback ports between {_LOWEST} and {top}")
        return [int(s.getsockname()[1]) for s in held]
    finally:
        for s in held:
            s.close()


def free_port() -> int:
    """One port, as :func:`free_ports`."""
    return free_ports(1)[0]


def _kernel_ports(n: int) -> list[int]:
    held = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    try:
        for s in held:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in held]
    finally:
        for s in held:
            s.close()
