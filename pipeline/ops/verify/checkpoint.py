"""The pipeline's Spark checkpoint as ``ingest verify`` sees it: where the next batch
starts, compared with the table (docs/design.md invariant 8).

A checkpoint ahead of the table (table rolled back, checkpoint from elsewhere) makes the
pipeline refuse its next batch with ``[ingest:gap]``; verify names the same ranges, found
by the same function (:func:`pipeline.commit.coverage.gaps`). Local checkpoints only (a
plain path or ``file://``); others are noted as not checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pipeline.commit.coverage import gaps
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.ops.verify.model import RangeIssue

DETAIL = (
    "the Spark checkpoint starts its next batch here, above the table: "
    "the pipeline refuses it ([ingest:gap])"
)


def next_start(location: str) -> PartitionOffsets | None:
    """End offsets of the newest batch in Spark's commit log (where the next one starts);
    None: no local checkpoint or no finished batch."""
    if "://" in location and not location.startswith("file://"):
        return None
    root = Path(location.removeprefix("file://"))
    done = [int(p.name) for p in (root / "commits").glob("[0-9]*") if p.name.isdigit()]
    if not done:
        return None
    lines = (root / "offsets" / str(max(done))).read_text().splitlines()
    if len(lines) < 3 or lines[2].strip() in ("", "-"):
        return None
    return PartitionOffsets.from_json(lines[2])


def checkpoint_gaps(location: str, committed: Mapping[TopicPartition, int]) -> list[RangeIssue]:
    start = next_start(location)
    found = gaps(start, committed) if start is not None else {}
    return [RangeIssue("gap", tp, s, e, DETAIL) for tp, (s, e) in sorted(found.items())]
