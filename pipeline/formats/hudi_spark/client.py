"""A Hudi table written by Hudi's Spark write client, one instant in two phases.

    begin(T)        T REQUESTED on Hudi's timeline (the table created when missing)
    write(df, T)    data files of T written by Hudi on the executors; T INFLIGHT
                    -> Written: write statistics (JSON), conflict baseline, writer schema
    commit(T, w, m) T COMPLETED from ``w`` with ``commitStats``, ``m`` in its extra metadata
    rollback(T)     Hudi's rollback of a pending T (its files deleted)

Invariants:

* Nothing of T is visible before ``commit``: readers see completed instants only.
* ``commit`` needs only what ``write`` returned (plain JSON a journal can keep): a process
  that did not write T completes it without recomputing (the recovery recommit).
* A new client never rolls back a pending instant: failed writes are cleaned lazily
  (``hoodie.clean.failed.writes.policy=LAZY``), so recovery decides -- recommit or roll back.

The Hudi settings this protocol needs, each with its reason, are :data:`PROTOCOL_OPTIONS`;
everything else is Hudi's default (the metadata table included).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.errors import CommitError, ConfigError

__all__ = [
    "LAYOUT_OPTIONS",
    "PROTOCOL_OPTIONS",
    "S3_LOCK_OPTIONS",
    "SESSION_SETTINGS",
    "SUPPORTED_LINE",
    "HudiSparkClient",
    "Written",
    "jars",
    "table_options",
]

#: the one Spark line Hudi's Spark bundle is served for here (hudi-spark3.5-bundle_2.12)
SUPPORTED_LINE = (3, 5)

#: Hudi settings the two phases need (everything else stays Hudi's default)
PROTOCOL_OPTIONS: dict[str, str] = {
    # a pending instant survives new clients and new instants until recovery recommits or
    # rolls it back (EAGER, the default, rolls it back when the next client starts a commit)
    "hoodie.clean.failed.writes.policy": "LAZY",
    # LAZY cleaning runs under optimistic concurrency control with a lock on the table's
    # storage: the committing process may not be the writing one
    "hoodie.write.concurrency.mode": "OPTIMISTIC_CONCURRENCY_CONTROL",
    "hoodie.write.lock.provider": (
        "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider"
    ),
    # a driver SIGKILLed inside Hudi's lock leaves the lock file behind; Hudi's default
    # (0: never expires) would lock every later writer out: it expires after a minute,
    # and a writer keeps asking for longer than that (40 x 2 s)
    "hoodie.write.lock.filesystem.expire": "1",
    "hoodie.write.lock.client.num_retries": "40",
    "hoodie.write.lock.client.wait_time_ms_between_retry": "2000",
    # Hudi 1.2.0's metadata table failed every write of a restarted driver in the kill drill
    # once it had compacted (ArrayIndexOutOfBoundsException in HoodieMetadataPayload,
    # appending column_stats records, and with those off, files records): off, until that
    # is understood (docs/hudi.md)
    "hoodie.metadata.enable": "false",
}

#: Hudi's lock for a table on S3, where Hudi refuses its file-system lock (S3A has no atomic
#: create): our helper's, taken with a conditional PUT (``If-None-Match: *``), the same
#: expiry and retries
S3_LOCK_OPTIONS: dict[str, str] = {
    "hoodie.write.lock.provider": "ingest.hudi.ConditionalPutLockProvider",
}

#: Hudi settings that keep the table's layout what ``sink.hudi.partitionFields`` promises
#: (the native writer's): ``<field>=<value>`` directories, values escaped as Hive escapes them
LAYOUT_OPTIONS: dict[str, str] = {
    "hoodie.datasource.write.hive_style_partitioning": "true",
    "hoodie.datasource.write.partitionpath.urlencode": "true",
}

#: Spark settings Hudi's Spark package requires of the session
SESSION_SETTINGS: dict[str, str] = {
    "spark.serializer": "org.apache.spark.serializer.KryoSerializer",
    "spark.kryo.registrator": "org.apache.spark.HoodieSparkKryoRegistrar",
    "spark.sql.extensions": "org.apache.spark.sql.hudi.HoodieSparkSessionExtension",
}

_HELPER = "ingest.hudi.TwoPhaseWriter"


def jars() -> list[str]:
    """Hudi's Spark bundle and our helper (fetched / built once), for ``spark.jars``."""
    from pipeline import jvm

    bundle = sorted(jvm.fetch("hudi-spark").glob("*.jar"))
    return [*map(str, bundle), str(jvm.build("hudi-writer"))]


def check_line(version: tuple[int, int]) -> None:
    """One line when Hudi's Spark bundle cannot run on Spark ``version``."""
    if version[:2] != SUPPORTED_LINE:
        raise ConfigError(
            f"sink.hudi.writer: spark needs Spark {SUPPORTED_LINE[0]}.{SUPPORTED_LINE[1]} "
            f"(Hudi's Spark bundle is served for that line only: hudi-spark3.5-bundle_2.12); "
            f"this is PySpark {version[0]}.{version[1]}: use sink.hudi.writer: native"
        )


def table_options(
    table_name: str,
    record_key_fields: Sequence[str],
    partition_fields: Sequence[str],
    on_s3: bool = False,
) -> dict[str, str]:
    """Hudi write options of a copy-on-write table keyed and partitioned by the given
    columns, with the protocol's settings (``on_s3``: the table is on S3)."""
    if not record_key_fields:
        raise ConfigError("a Hudi table needs at least one record key field")
    if not partition_fields:
        keygen = "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
    elif len(record_key_fields) == 1 and len(partition_fields) == 1:
        keygen = "org.apache.hudi.keygen.SimpleKeyGenerator"
    else:
        keygen = "org.apache.hudi.keygen.ComplexKeyGenerator"
    return {
        "hoodie.table.name": table_name,
        "hoodie.datasource.write.recordkey.field": ",".join(record_key_fields),
        "hoodie.datasource.write.partitionpath.field": ",".join(partition_fields),
        "hoodie.datasource.write.keygenerator.class": keygen,
        **LAYOUT_OPTIONS,
        **PROTOCOL_OPTIONS,
        **(S3_LOCK_OPTIONS if on_s3 else {}),
    }


@dataclass(frozen=True)
class Written:
    """What a write of an instant leaves for its commit (plain JSON: journal-able)."""

    stats: list[str]  # one HoodieWriteStat (JSON) per file written
    baseline: str  # the optimistic-concurrency baseline of the write (JSON)
    schema: str  # Hudi's writer schema (Avro JSON)

    def as_json(self) -> dict[str, Any]:
        return {"stats": self.stats, "baseline": self.baseline, "schema": self.schema}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Written:
        return cls(list(doc["stats"]), str(doc["baseline"]), str(doc["schema"]))

    @property
    def records(self) -> int:
        """Records this write added: a file ``insert`` rewrote (Hudi packs new records
        into small files) also holds the records of earlier commits."""
        return sum(int(json.loads(s).get("numInserts", 0)) for s in self.stats)

    @property
    def paths(self) -> list[str]:
        return [str(json.loads(s)["path"]) for s in self.stats]


class HudiSparkClient:
    """One table at ``base_path`` through our helper on the session's JVM. ``spark``: the
    session, or a function returning it (tables are opened before the session is built)."""

    def __init__(
        self, spark: Any | Callable[[], Any], base_path: str, options: Mapping[str, str]
    ) -> None:
        self._spark = spark
        self.base_path = base_path
        self.options = dict(options)

    def session(self) -> Any:
        return self._spark() if callable(self._spark) else self._spark

    @property
    def spark(self) -> Any:
        return self.session()

    @property
    def _jvm(self) -> Any:
        return self.spark.sparkContext._jvm

    @property
    def _helper(self) -> Any:
        return self._jvm.ingest.hudi.TwoPhaseWriter

    def _map(self, values: Mapping[str, str]) -> Any:
        out = self._jvm.java.util.HashMap()
        for k, v in values.items():
            out.put(k, v)
        return out

    def _list(self, values: Sequence[str]) -> Any:
        out = self._jvm.java.util.ArrayList()
        for v in values:
            out.add(v)
        return out

    def begin(self, instant: str) -> None:
        self._helper.begin(
            self.spark._jsparkSession, self.base_path, self._map(self.options), instant
        )

    def schema_of(self, df: Any) -> str:
        """Hudi's writer schema (Avro JSON) of ``df``'s rows in this table."""
        return str(self._helper.schemaOf(df._jdf, self.options["hoodie.table.name"]))

    def write(self, df: Any, instant: str, operation: str = "insert") -> Written:
        w = self._helper.write(
            self.spark._jsparkSession,
            df._jdf,
            self.base_path,
            self._map(self.options),
            instant,
            operation,
        )
        return Written([str(s) for s in w.stats()], str(w.baseline()), str(w.schema()))

    def commit(self, instant: str, written: Written, extra_metadata: Mapping[str, str]) -> None:
        done = self._helper.commit(
            self.spark._jsparkSession,
            self.base_path,
            self._map(self.options),
            instant,
            self._list(written.stats),
            written.schema,
            self._map(extra_metadata),
            written.baseline,
        )
        if not done:
            raise CommitError(f"Hudi did not complete instant {instant} of {self.base_path}")

    def rollback(self, instant: str) -> bool:
        return bool(
            self._helper.rollback(
                self.spark._jsparkSession, self.base_path, self._map(self.options), instant
            )
        )

    def timeline(self) -> list[str]:
        """``"<instant> <action> <STATE>"`` per instant of the active timeline."""
        return [str(s) for s in self._helper.timeline(self.spark._jsparkSession, self.base_path)]
