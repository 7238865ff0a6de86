"""The loopback ports the project's servers listen on (Kafka nodes, the registry,
SeaweedFS, PostgreSQL) are chosen so that nothing else can take them before they bind."""

from __future__ import annotations

import socket
from pathlib import Path

from lab.ports import free_ports


def _ephemeral_range() -> tuple[int, int]:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(low), int(high)


def test_ports_are_distinct_and_outside_the_kernels_ephemeral_range() -> None:
    # A port from the ephemeral range can be taken by any outgoing connection (one Kafka
    # node dialling another) between its choice and the server's bind: CI saw a node die
    # with "Address already in use" that way.
    low, high = _ephemeral_range()
    for _ in range(20):
        ports = free_ports(9)
        assert len(set(ports)) == 9
        assert all(not low <= p <= high for p in ports), ports
        assert all(1024 < p < 65536 for p in ports)


def test_a_port_in_use_is_never_handed_out() -> None:
    held = []
    try:
        for port in free_ports(50):
            s = socket.socket()
            s.bind(("127.0.0.1", port))
            s.listen()
            held.append(s)
        busy = {s.getsockname()[1] for s in held}
        for _ in range(20):
            assert not busy & set(free_ports(20))
    finally:
        for s in held:
            s.close()
