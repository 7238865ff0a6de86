"""The writer-epoch comparison every fence check makes (docs/design.md invariant 7).

A writer holds the epoch it acquired; an epoch seen anywhere else (the journal's epochs,
a table's newest commit of the pipeline) that is higher means a newer writer took over,
and this one must stop before it changes anything. The coordinator checks the journal
and the main table with it; a compaction run checks the table it is about to commit to
(``WriterFence.check``).
"""

from __future__ import annotations

from pipeline.errors import FencedError


def check_fence(pipeline_id: str, held: int, seen: int | None, where: str = "") -> None:
    """Raise ``FencedError`` when epoch ``seen`` is above the ``held`` writer epoch.
    ``where``: what was about to happen (the message starts with it)."""
    if seen is not None and seen > held:
        prefix = f"{where}: " if where else ""
        raise FencedError(
            f"{prefix}pipeline {pipeline_id!r}: writer epoch {held} was superseded by epoch "
            f"{seen} (another writer took over); stopping"
        )
