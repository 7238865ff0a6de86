"""Kafka consumers a Python worker process keeps from one task to the next.

Creating a consumer, connecting it to the brokers, looking up topic metadata and closing it
again costs a task about twice the CPU of re-assigning a kept one (docs/bench.md, "Figures
behind the code's choices"). A reused Spark Python worker runs one task at a time, so a
small per-process pool is enough.

Rules
  * A consumer is keyed by its whole configuration but the placeholder ``group.id``: a
    changed setting gets a new one.
  * It is handed back only after a read that ended normally, with every partition
    unassigned (librdkafka drops what it had fetched for them); a read that raised or was
    abandoned closes it, so a consumer in an unknown state is never reused.
  * At most ``max_idle`` idle consumers are kept; the least recently used is closed.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException

ConfKey = tuple[tuple[str, str], ...]


class ConsumerPool:
    def __init__(self, max_idle: int = 2) -> None:
        self.max_idle = max_idle
        self._idle: OrderedDict[ConfKey, list[Consumer]] = OrderedDict()
        self._lock = threading.Lock()
        self.created = 0  # consumers created over the pool's life (tests, diagnostics)

    @staticmethod
    def key(conf: Mapping[str, Any]) -> ConfKey:
        # group.id is a random placeholder per consumer_config() call (assign-only: no group
        # request is ever made); keyed by it, no batch would find the previous one's consumer
        return tuple(sorted((str(k), str(v)) for k, v in conf.items() if k != "group.id"))

    @contextlib.contextmanager
    def lease(self, conf: Mapping[str, Any]) -> Iterator[Consumer]:
        """A consumer for ``conf``: reused when one is idle, returned afterwards only if
        the ``with`` block ended normally."""
        key = self.key(conf)
        kept = self._take(key)
        if kept is None:
            kept = Consumer(dict(conf))
            self.created += 1
        ok = False
        try:
            yield kept
            ok = True
        finally:
            if ok and self._reset(kept):
                self._give_back(key, kept)
            else:
                _close(kept)

    def close(self) -> None:
        with self._lock:
            idle = [k for ks in self._idle.values() for k in ks]
            self._idle.clear()
        for k in idle:
            _close(k)

    def _take(self, key: ConfKey) -> Consumer | None:
        with self._lock:
            ks = self._idle.get(key)
            if not ks:
                return None
            kept = ks.pop()
            if not ks:
                del self._idle[key]
            return kept

    def _give_back(self, key: ConfKey, kept: Consumer) -> None:
        evicted = []
        with self._lock:
            self._idle.setdefault(key, []).append(kept)
            self._idle.move_to_end(key)
            while sum(len(ks) for ks in self._idle.values()) > self.max_idle:
                oldest = next(iter(self._idle))
                evicted.append(self._idle[oldest].pop(0))
                if not self._idle[oldest]:
                    del self._idle[oldest]
        for k in evicted:
            _close(k)

    @staticmethod
    def _reset(kept: Consumer) -> bool:
        try:
            kept.unassign()
            return True
        except (KafkaException, RuntimeError):
            return False


def _close(consumer: Consumer) -> None:
    with contextlib.suppress(KafkaException, RuntimeError):
        consumer.close()


# One pool per process: Spark's reused Python workers, or the driver in tests.
POOL = ConsumerPool()
