"""Read-only access to Spark's streaming checkpoint through the Hadoop FileSystem API.

The coordinator needs two facts Spark keeps there: the query id (our checkpoint
incarnation id: a new or deleted checkpoint directory gets a new one) and the offset log
(``offsets/<batch>``: the end offsets of each planned batch; the previous entry is the
batch's start). Going through Hadoop keeps this working for HDFS, S3A and local paths.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import SparkSession

from pipeline.commit.offsets import PartitionOffsets


class SparkOffsetLog:
    def __init__(self, spark: SparkSession, location: str) -> None:
        self._spark = spark
        self.location = location.rstrip("/")

    def _read(self, relative: str) -> str | None:
        jvm: Any = self._spark._jvm
        conf = self._spark._jsc.hadoopConfiguration()
        path = jvm.org.apache.hadoop.fs.Path(f"{self.location}/{relative}")
        fs = path.getFileSystem(conf)
        if not fs.exists(path):
            return None
        stream = fs.open(path)
        try:
            return str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def query_id(self) -> str:
        text = self._read("metadata")
        if text is None:
            raise RuntimeError(f"no Spark checkpoint metadata under {self.location}")
        return str(json.loads(text.splitlines()[0])["id"])

    def offsets(self, batch_id: int) -> PartitionOffsets | None:
        """End offsets Spark logged for ``batch_id`` (None if not logged / purged)."""
        if batch_id < 0:
            return None
        text = self._read(f"offsets/{batch_id}")
        if text is None:
            return None
        lines = text.splitlines()
        # v1 / metadata JSON / one line per source ("-" when a source had no offset)
        if len(lines) < 3 or lines[2].strip() in ("", "-"):
            return None
        return PartitionOffsets.from_json(lines[2])
