"""What a reader gives the arrow engine (:class:`ArrowInput`): the one fact about a reader
the write path is chosen from (pipeline/spark/batch/paths.py)."""

from __future__ import annotations

from enum import Enum


class ArrowInput(Enum):
    """What a reader gives the arrow engine's tasks of a batch whose start is known."""

    # the batch DataFrame's rows: the reader read the records (Spark's Kafka source, in the
    # JVM) and the tasks decode them in ``mapInArrow``
    BATCH_ROWS = "batch-rows"
    # the batch's offset ranges: the tasks read them from Kafka themselves and the reader
    # only planned the offsets (our data source: its DataFrame is never scanned then)
    OFFSET_RANGES = "offset-ranges"
