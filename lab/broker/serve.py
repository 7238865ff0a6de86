"""``run_broker_forever``: a :class:`KafkaCluster` with its topics until SIGINT / SIGTERM
(``ingest broker``)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from lab.broker.cluster import KafkaCluster


def run_broker_forever(
    num_brokers: int,
    topics: dict[str, int],
    on_ready: Callable[[KafkaCluster], None] | None = None,
    *,
    data_dir: Path | None = None,
    stop_event: threading.Event | None = None,
) -> None:
    """Start a :class:`KafkaCluster`, create ``topics`` (name -> partitions), call
    ``on_ready(cluster)`` and block until SIGINT/SIGTERM (or ``stop_event``), then stop
    the cluster cleanly. Signal handlers are installed only from the main thread and are
    restored afterwards."""
    stop = stop_event if stop_event is not None else threading.Event()
    previous: dict[signal.Signals, Any] = {}

    def _handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, _handler)
    try:
        with KafkaCluster(num_brokers, data_dir=data_dir) as cluster:
            for name, partitions in topics.items():
                cluster.create_topic(name, partitions)
            if on_ready is not None:
                on_ready(cluster)
            while not stop.wait(0.5):
                pass
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
