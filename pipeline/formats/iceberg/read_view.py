"""The Iceberg adapter's shared read view of one table: it only moves forward.

The read-only checks of a batch and the commit share the last loaded table (or the
catalog's answer to our own last append) for up to ``max_age`` seconds. Loads happen on
more than one thread (the stream thread's batches, the main thread's idle fence check),
so an answer can arrive after a newer one was stored. Each view is therefore stamped with
the time its state is known to be current at -- a load's *start*, an append's *return* --
and an answer stamped before the current view, or before the view was last dropped, is
never stored (docs/design.md invariant 14). So the view always holds every commit this
process made; what it can miss is another writer's commit.
"""

from __future__ import annotations

import threading
import time
from typing import Generic, TypeVar

_V = TypeVar("_V")


class ReadView(Generic[_V]):
    def __init__(self) -> None:
        self._view: tuple[float, _V] | None = None
        self._floor = 0.0  # no answer stamped before this may become the view
        self._lock = threading.Lock()

    def offer(self, as_of: float, value: _V) -> None:
        """``value``, current as of monotonic time ``as_of``, becomes the view unless the
        view already holds a newer state or was dropped after ``as_of``."""
        with self._lock:
            view = self._view
            if as_of >= self._floor and (view is None or as_of >= view[0]):
                self._view = (as_of, value)

    def get(self, max_age: float) -> tuple[bool, _V | None]:
        """(found, value): the view if younger than ``max_age`` seconds."""
        view = self._view
        if view is not None and time.monotonic() - view[0] < max_age:
            return True, view[1]
        return False, None

    def drop(self) -> None:
        """Forget the view; no answer whose state predates now may bring it back."""
        with self._lock:
            self._view = None
            self._floor = time.monotonic()
