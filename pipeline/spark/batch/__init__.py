"""Driver side of a batch's write: one adapter per way a batch is written, picked in one
place (:func:`pipeline.spark.batch.paths.write_path`), each behind the one interface
``write(write_id, drop_below) -> StagedBatch`` (``formats/base.py:BatchWrite``).

    WritePath.SQL_DECODE     rows.py   the batch's rows decoded by Spark SQL, then
                                       ``mapInArrow(run_task)``
    WritePath.ARROW_ROWS     rows.py   the batch's rows decoded by Arrow in ``mapInArrow``
    WritePath.READ_RANGES    ranges.py an RDD job whose tasks read the batch's packed
                                       offset ranges from Kafka and decode them by Arrow
    WritePath.FORMAT_ENGINE  the format's own engine (Hudi's Spark writer,
                             pipeline/formats/hudi_spark/batch.py)

The coordinator calls ``write`` once per attempt of a batch (``write_id`` names the
instant; ``drop_below`` the offsets the table already holds). The format's task plan says
which files the tasks write; nothing here knows the table format.
"""

from __future__ import annotations

from collections.abc import Callable

from pipeline.commit.offsets import PartitionOffsets
from pipeline.spark.writer import TaskPlan

# (write id, offsets the table already holds) -> the tasks' plan (the format's, with the
# armed fault points bound)
TaskPlanner = Callable[[str, PartitionOffsets], TaskPlan]
