"""``source.reader: spark``: Spark's own Kafka source (``format("kafka")``) as our reader.

What it is given, and why each choice keeps docs/design.md's invariants:

  * **Explicit assignment** (invariant 1). ``topics``, ``assign`` and ``topicPattern`` all
    become Spark's ``assign`` JSON, the partitions resolved from the broker when the query
    starts. Spark's source never joins a group or commits to Kafka, and keeps its offsets
    in the checkpoint's offset log in the form the coordinator already reads
    (``{"topic": {"partition": next}}``). A fixed assignment also keeps Spark's own rule
    for partitions new to a running query out of play: it would read them from an
    earliest offset fetched while planning and logged nowhere, so a replay could read
    other records. Partitions added to a topic are taken up by the next start of the query.
  * **Where a new checkpoint starts** (invariant 6). ``startingOffsets`` is always explicit
    numbers over every assigned partition (Spark refuses a partial map): the table's
    committed offsets, a partition the table does not list at its log start, and
    ``earliest``/``latest`` resolved when the query starts, so the coordinator knows where
    a checkpoint's first batch starts, as with explicit offsets on the Python reader.
  * **Admission**: our names, Spark's meaning: ``maxRecordsPerTrigger`` ->
    ``maxOffsetsPerTrigger``, ``minRecordsPerTrigger`` -> ``minOffsetsPerTrigger``;
    ``maxTriggerDelay``, ``minPartitions``, ``includeHeaders`` and ``failOnDataLoss``
    are the same; ``isolationLevel`` -> ``kafka.isolation.level`` (``read_committed`` by
    default, as on the Python reader). ``brokerRetrySeconds`` bounds the consumer's
    blocking calls (``kafka.default.api.timeout.ms``).
  * **Consumer settings** are librdkafka names in the config (the driver's own calls use
    them); the security ones are translated to the Java client's (:func:`java_client_settings`),
    the rest must mean the same in both clients or are refused in one line.
  * **Data loss** (failOnDataLoss). ``true``: Spark stops the query when offsets it must
    read are gone (retention), a partition vanished, or a partition's offsets went back
    (a truncated or re-created topic); :func:`explain_failure` turns that into
    ``[ingest:data-loss]``. Spark keeps no topic ids, so a re-created topic whose offsets
    did not go back below ours is not told apart (the Python reader tells it by id).
    ``false``: Spark skips what is gone and the coordinator records the lost ranges, as
    on the Python reader.

Spark's source decodes nothing: the batch's rows (key, value, topic, partition, offset,
timestamp, timestampType[, headers]) are what the tasks read and decode, with either engine
(``ArrowInput.BATCH_ROWS``; pipeline/spark/batch/rows.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.errors import ConfigError, DataLossError, PipelineError, exception_texts
from pipeline.source.arrow_input import ArrowInput

FORMAT = "kafka"
# the manifest's set per Spark line (pipeline/resources/pom.xml)
JAR_SETS = {
    (3, 5): "spark-kafka-3.5",
    (4, 0): "spark-kafka-4.0",
    (4, 1): "spark-kafka-4.1",
    (4, 2): "spark-kafka-4.2",
}
# An executor's pool of Kafka consumers, one per partition it reads, closes its oldest idle
# consumers whenever it holds this many (Spark's default 64): past that many partitions
# every batch connected new ones (at 128 partitions it doubled a batch's fixed cost). More
# idle consumers than partitions never pile up (they are closed after 5 idle minutes).
CONSUMER_POOL_KEY = "spark.kafka.consumer.cache.capacity"
CONSUMER_POOL_CAPACITY = 4096
# the newest jar set: 4.3 runs the 4.2 jars (why: docs/bench.md, "Figures behind the
# code's choices")
NEWEST_JAR_LINE = (4, 2)
# the jars Spark does not ship itself (the set's other jars are Spark's own)
_OWN_JARS = ("spark-sql-kafka-", "spark-token-provider-kafka-", "kafka-clients-", "commons-pool2-")

# librdkafka setting -> the Java client's, where both clients spell it the same way
_SAME = {
    "security.protocol",
    "client.id",
    "client.rack",
    "fetch.min.bytes",
    "fetch.max.bytes",
    "max.partition.fetch.bytes",
    "receive.buffer.bytes",
    "send.buffer.bytes",
    "request.timeout.ms",
    "reconnect.backoff.ms",
    "reconnect.backoff.max.ms",
    "retry.backoff.ms",
    "metadata.max.age.ms",
    "connections.max.idle.ms",
    "ssl.endpoint.identification.algorithm",
}
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def jar_set(version: tuple[int, int]) -> str:
    """The manifest's jar set for Spark ``version`` (major, minor); refused in one line for
    a line no served jar is built for."""
    name = JAR_SETS.get(min(version, NEWEST_JAR_LINE))
    if name is None:
        lines = ", ".join(f"{a}.{b}" for a, b in sorted(JAR_SETS)) + " and newer"
        raise ConfigError(
            f"source.reader: spark: no Spark Kafka source is pinned for Spark "
            f"{version[0]}.{version[1]}; supported Spark lines: {lines}"
        )
    return name


def own_jars(directory: Path) -> list[str]:
    """The jars of a fetched set that go on the session's class path."""
    return sorted(str(p) for p in directory.glob("*.jar") if p.name.startswith(_OWN_JARS))


def java_client_settings(kafka: Mapping[str, str]) -> dict[str, str]:
    """``source.kafka`` (librdkafka names) as the Java client's settings; a setting with no
    Java meaning is refused in one line naming it."""
    out: dict[str, str] = {}
    rest = dict(kafka)
    mechanism = rest.pop("sasl.mechanism", None) or rest.pop("sasl.mechanisms", None)
    user, password = rest.pop("sasl.username", None), rest.pop("sasl.password", None)
    if mechanism:
        out["sasl.mechanism"] = mechanism
        if user is not None:
            module = _LOGIN_MODULES.get(mechanism.upper())
            if module is None:
                raise ConfigError(
                    f"source.kafka.sasl.mechanism {mechanism!r}: source.reader spark logs in "
                    f"with username/password only for {', '.join(sorted(_LOGIN_MODULES))}"
                )
            secret = json.dumps(password or "")
            out["sasl.jaas.config"] = (
                f"{module} required username={json.dumps(user)} password={secret};"
            )
    if (ca := rest.pop("ssl.ca.location", None)) is not None:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = ca
    for key, value in rest.items():
        if key not in _SAME:
            raise ConfigError(
                f"source.kafka.{key}: not passed to Spark's Kafka source (source.reader: spark "
                f"translates {', '.join(sorted(_SAME | {'sasl.*', 'ssl.ca.location'}))})"
            )
        out[key] = value
    return out


def assign_json(partitions: Iterable[TopicPartition]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(set(partitions)):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return json.dumps(by_topic, sort_keys=True)


def starting_json(starting: str, bounds: Mapping[TopicPartition, tuple[int, int]]) -> str:
    """``startingOffsets`` over exactly the partitions of ``bounds`` (their (log start, end)):
    ``earliest``/``latest`` as those numbers, a JSON map (the table's offsets, or the
    config's) kept for the partitions it lists and the log start for the others (-2/-1 in
    it resolved the same way); partitions not assigned are left out (Spark refuses them)."""
    tps = sorted(bounds)
    if starting in ("earliest", "latest"):
        pick = 0 if starting == "earliest" else 1
        return PartitionOffsets({tp: bounds[tp][pick] for tp in tps}).to_json()
    given = PartitionOffsets.from_json(starting)
    out = {}
    for tp in tps:
        spec = given.get(tp, -2)
        out[tp] = bounds[tp][0] if spec == -2 else bounds[tp][1] if spec == -1 else spec
    return PartitionOffsets(out).to_json()


def spark_options(
    options: Mapping[str, str], bounds: Mapping[TopicPartition, tuple[int, int]]
) -> dict[str, str]:
    """The Python reader's option strings (``SourceSettings.options``) as Spark's Kafka
    source's, over the resolved partitions and their (log start, end) ``bounds``; see the
    module docstring."""
    tps = sorted(bounds)
    if not tps:
        raise ConfigError("source.reader: spark: the source's topics have no partitions")
    rest = dict(options)
    out = {"kafka.bootstrap.servers": rest.pop("kafka.bootstrap.servers")}
    kafka = {k[len("kafka.") :]: rest.pop(k) for k in list(rest) if k.startswith("kafka.")}
    out.update({f"kafka.{k}": v for k, v in java_client_settings(kafka).items()})
    for subscription in ("topics", "assign", "topicPattern"):
        rest.pop(subscription, None)
    out["assign"] = assign_json(tps)
    out["startingOffsets"] = starting_json(rest.pop("startingOffsets", "earliest"), bounds)
    renamed = {
        "maxRecordsPerTrigger": "maxOffsetsPerTrigger",
        "minRecordsPerTrigger": "minOffsetsPerTrigger",
        "isolationLevel": "kafka.isolation.level",
    }
    for ours, theirs in renamed.items():
        if ours in rest:
            out[theirs] = rest.pop(ours)
    retry = rest.pop("brokerRetrySeconds", None)
    if retry is not None:
        out["kafka.default.api.timeout.ms"] = str(max(int(float(retry)), 1) * 1000)
    same = (
        "startingTimestamp",
        "startingOffsetsByTimestampStrategy",
        "maxTriggerDelay",
        "minPartitions",
        "failOnDataLoss",
        "includeHeaders",
    )
    for name in same:
        if name in rest:
            out[name] = rest.pop(name)
    if "startingTimestamp" in out:  # Spark: a timestamp wins only without startingOffsets
        out.pop("startingOffsets")
    if rest:
        raise ConfigError(f"source.reader: spark: option(s) {', '.join(sorted(rest))} not mapped")
    return out


_REASON = re.compile(r"Reason: ([^\n]+)")
_CANNOT_FETCH = re.compile(r"Cannot fetch offset (\d+) \(GroupId: [^,]*, TopicPartition: ([^)]+)\)")
_LOSS_MARKERS = (
    "Some data may have been lost",
    "not available in Kafka any more",
    "offset was changed from",
    "are gone",
    "Cannot fetch offset",
)


def explain_failure(error: BaseException) -> PipelineError | None:
    """The one-line error for a failure of Spark's Kafka source that we can name (data
    loss under failOnDataLoss=true); None for anything else."""
    text = "\n".join(exception_texts(error))
    if not any(marker in text for marker in _LOSS_MARKERS):
        return None
    # Spark 3.5+: "Some data may have been lost … Reason: Could not read records in offset …"
    lost_at = text.find("Some data may have been lost")
    reason = _REASON.search(text, max(lost_at, 0))
    fetch = _CANNOT_FETCH.search(text)  # Spark 3.5's words for it
    if reason is not None:
        line = reason.group(1).strip()
    elif fetch is not None:
        line = f"cannot fetch offset {fetch.group(1)} of {fetch.group(2)}"
    else:  # the sentence that says it, without the exceptions wrapped around it
        at = next(text.find(m) for m in _LOSS_MARKERS if m in text)
        after_exception = text.rfind("Exception: ", 0, at) + len("Exception: ")
        start = max(after_exception, text.rfind("\n", 0, at) + 1)
        end = text.find("\n", at)
        line = text[start : end if end >= 0 else None].strip()
    return DataLossError(
        f"Spark's Kafka source stopped: {line[:300]} (records were deleted before they "
        "were ingested: by retention, or the topic was truncated or re-created; set "
        "failOnDataLoss=false to skip them and record the loss in the table)"
    )


class SparkKafkaReader:
    """The reader interface of pipeline/source/choice.py over Spark's Kafka source."""

    name = "spark"
    format = FORMAT
    arrow_input = ArrowInput.BATCH_ROWS

    def __init__(self, version: tuple[int, int]) -> None:
        self.version = version

    def batch_rows(self, df: Any, min_partitions: int | None) -> Any:
        """Spark's Kafka source plans a task per Kafka partition (or per ``minPartitions``
        piece): coalesced to the cores (or ``minPartitions``), as our data source packs its
        ranges, a batch pays a Python task per core, not per partition (no shuffle: a task
        reads several partitions' ranges in turn)."""
        cores = df.sparkSession.sparkContext.defaultParallelism
        return df.coalesce(max(cores, min_partitions or 0))

    def jars(self) -> list[str]:
        from pipeline import jvm

        return own_jars(jvm.fetch(jar_set(self.version)))

    def session_defaults(self) -> dict[str, str]:
        return {CONSUMER_POOL_KEY: str(CONSUMER_POOL_CAPACITY)}

    def register(self, spark: Any) -> None:
        return None  # a built-in format once its jars are on the class path

    def query_options(
        self,
        options: Mapping[str, str],
        bounds: Callable[[], Mapping[TopicPartition, tuple[int, int]]],
    ) -> dict[str, str]:
        return spark_options(options, bounds())

    def explain_failure(self, error: BaseException) -> PipelineError | None:
        return explain_failure(error)


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.source.spark_kafka jars``: the jars of Spark's Kafka source for
    the installed PySpark, comma-separated (spark-submit's ``--jars``; fetched once)."""
    import sys

    from pipeline.source.spark_line import spark_version

    args = sys.argv[1:] if argv is None else argv
    if args != ["jars"]:
        print("usage: python -m pipeline.source.spark_kafka jars", file=sys.stderr)
        return 2
    try:
        print(",".join(SparkKafkaReader(spark_version()).jars()))
    except PipelineError as e:
        print(e, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
