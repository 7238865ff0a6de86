"""Long-lived Python processes (reused Spark workers, the driver) settle once, not per task.

PySpark's daemon runs a full ``gc.collect()`` after every task of a reused worker. A full
collection walks every object the collector tracks, and a worker that has imported
pyiceberg, pydantic, pyarrow and confluent-kafka tracks hundreds of thousands of them,
almost all module-level and immortal: most of a small batch's cost in the worker went to
it (docs/bench.md, "Figures behind the code's choices").

:func:`settle` moves everything alive at the end of a worker's first task setup into the
collector's permanent generation (``gc.freeze``), so the per-task collections only walk
what later tasks allocate. It runs once per process; what it freezes (module state plus one
task's plan) is never collected, which is what a long-lived worker keeps anyway. The
driver settles after its first batch, for the collections its own allocations trigger
(Iceberg commits copy the table metadata every batch).
"""

from __future__ import annotations

import gc

_settled = False


def settle() -> None:
    """Freeze the objects alive now (once per process; later calls do nothing)."""
    global _settled
    if _settled:
        return
    _settled = True
    gc.collect()  # what is garbage now is not frozen with the rest
    gc.freeze()
