"""The one path by which a driver learns it was fenced and stops.

A driver is fenced three ways: a commit refused by the table or the journal (inside a
batch), the idle check that a newer writer epoch exists (an idle zombie must stop too,
not only one that tries to commit), and a standby lease another replica took. Each goes
through :meth:`FenceGuard.watch`: the run's stats say ``fenced`` and the observers hear of
it once (a batch's failure is reported by the batch path itself), then the error stops
the run. The epoch comparison itself is :func:`pipeline.commit.fence.check_fence`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from pipeline.errors import FencedError
from pipeline.observe.base import Observers
from pipeline.runtime.stats import RunStats

FENCE_CHECK_S = 5.0  # how often an idle driver checks that no newer writer took over


class FenceGuard:
    def __init__(
        self, stats: RunStats, observers: Observers, check_epoch: Callable[[], None]
    ) -> None:
        self.stats = stats
        self.observers = observers
        self._check_epoch = check_epoch
        self._next_check = 0.0

    @contextlib.contextmanager
    def watch(self, *, report: bool = True) -> Iterator[None]:
        """Mark the run fenced when the body raises ``FencedError`` (``LeaseLostError``
        included); ``report``: also tell the observers (not inside a batch: the batch
        path reports its failure)."""
        try:
            yield
        except FencedError as e:
            with self.stats.lock:
                self.stats.fenced = True
            if report:
                self.observers.failure(e, None)
            raise

    def arm(self) -> None:
        """The query started: the first idle check is one interval from now."""
        self._next_check = time.monotonic() + FENCE_CHECK_S

    def check_idle(self) -> None:
        """Every ``FENCE_CHECK_S``: stop if a newer writer epoch exists."""
        if time.monotonic() <= self._next_check:
            return
        self._next_check = time.monotonic() + FENCE_CHECK_S
        with self.watch():
            self._check_epoch()
