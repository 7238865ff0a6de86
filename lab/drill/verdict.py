"""A drill's verdict: the tables counted against the producer's acknowledged offsets (our
own count, lab/drill/count.py; records at other offsets are a problem unless
Kafka holds them) and by the independent verifier (``ingest
verify``), the worse of the two reported; recommits, rollbacks and compactions seen, and
with Hudi's own writer the table services on its timeline."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from lab.drill import compactions
from lab.drill.count import RouteEpoch
from lab.drill.driver import DriverProcess
from lab.drill.model import DrillResult
from lab.drill.producer import RateProducer
from pipeline.commit.offsets import TopicPartition
from pipeline.config import PipelineConfig

# one line per recommit attempt, logged before its commit (pipeline/commit/recovery.py)
RECOMMIT_LINE = re.compile(r"instant (\d{17}) \(batch \d+\) recommitting")


def count_produced(
    result: DrillResult,
    cfg: PipelineConfig,
    producer: RateProducer,
    lost: dict[TopicPartition, list[tuple[int, int]]],
    epochs: Sequence[RouteEpoch] = (),
) -> None:
    """Our own count: every offset the producer saw acknowledged (less those the table
    recorded as ``lost``) once in the tables, in a routed set each in the table its
    route (of its time: ``epochs``) names; fills ``result``'s counts."""
    from lab.drill.count import count_against

    def recorded_lost(tp: TopicPartition, o: int) -> bool:
        return any(s <= o < e for s, e in lost.get(tp, ()))

    expected = {
        tp: [o for o in offs if not recorded_lost(tp, o)]
        for tp, offs in producer.expected().items()
    }
    unplaced = producer.unplaced_counts()
    own = count_against(cfg, expected, unplaced, epochs)
    if own.misrouted:
        result.problems.append(
            f"{own.misrouted} record(s) in a table their route does not name, e.g. "
            f"{own.misrouted_rows[0]} (table, topic, partition, offset)"
        )
    if unplaced:
        result.notes.append(
            f"producer: {sum(unplaced.values())} record(s) acknowledged without an offset "
            "(a retried batch the broker already had), counted per partition against "
            "the tables' records at offsets no acknowledgement named"
        )
    result.committed = own.present
    result.missing = own.missing
    result.duplicated = own.duplicated
    result.lost = sum(e - s for ivs in lost.values() for s, e in ivs)
    result.verifier = "drill count"
    if own.unexpected:
        absent = not_in_kafka(cfg, own.unacknowledged)
        if absent:
            result.problems.append(
                f"{own.unexpected} records in the tables not produced "
                f"({len(absent)} at offsets Kafka does not hold, e.g. {absent[0]})"
            )
        else:  # written by Kafka all the same: ingested once, as every record must be
            result.notes.append(
                f"{own.unexpected} record(s) Kafka holds at offsets no delivery report "
                "named (the outage lost their acknowledgement), each in the tables once"
            )
    # Records whose delivery failed are not expected; one Kafka wrote all the same (a
    # timeout after the write) would show as unexpected above. Outages here last
    # seconds, far inside the producer's 300 s delivery timeout.
    if producer.errors:
        errors = producer.errors
        result.notes.append(
            f"producer: {len(errors)} record(s) not acknowledged, e.g. {errors[0][:160]}"
        )


def not_in_kafka(
    cfg: PipelineConfig, coords: Sequence[tuple[str, int, int]], timeout_s: float = 30.0
) -> list[tuple[str, int, int]]:
    """The coordinates at which Kafka holds no record: the only read of Kafka a drill
    makes, and only to tell a record the pipeline invented (a problem) from one Kafka
    wrote without the producer ever seeing its acknowledgement (possible when every node
    is SIGKILLed with sends in flight)."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KTopicPartition

    from pipeline.kafka.client import consumer_config

    s = cfg.source
    conf = consumer_config(s.bootstrap_servers, s.kafka, isolation_level="read_uncommitted")
    consumer = Consumer({**conf, "enable.partition.eof": True})
    absent = []
    try:
        for topic, partition, offset in coords:  # every one: an unchecked one would pass
            consumer.assign([KTopicPartition(topic, partition, offset)])
            msg = consumer.poll(timeout_s)
            if msg is None or msg.error() is not None or msg.offset() != offset:
                absent.append((topic, partition, offset))
    finally:
        consumer.close()
    return absent


def check_independently(
    result: DrillResult, cfg: PipelineConfig, *, routes_changed: bool = False
) -> None:
    """The independent verifier over the tables: the worse of its numbers and ours
    (:func:`count_produced`, run first) is reported; any disagreement is a problem.
    Routes changed between runs are left to the drill's own count: the verifier holds
    every row to the routes configured now, not to those of the run that wrote it."""
    if routes_changed:
        result.notes.append("routes changed between runs: counted by the drill's own count")
        return
    try:
        totals = independent_verifier_totals(cfg)
    except Exception as e:  # the verifier failing is a failed check, not a crash
        result.problems.append(f"ingest verify failed: {type(e).__name__}: {e}")
        return
    result.verifier = "ingest verify + drill count"
    result.missing = max(result.missing, int(totals.get("missing", 0)))
    result.duplicated = max(result.duplicated, int(totals.get("duplicated", 0)))
    if not totals["ok"]:
        result.problems.append(
            f"ingest verify not ok: {totals.get('mismatched', 0)} mismatched, "
            f"{totals.get('unexpected', 0)} unexpected, {totals.get('missing', 0)} "
            f"missing, {totals.get('duplicated', 0)} duplicated"
        )
    if any(n != result.lost for n in totals["lost_per_table"]):
        result.problems.append(
            f"ingest verify reports {totals['lost_per_table']} lost, the drill {result.lost}"
        )


def compaction_outcome(result: DrillResult, seen: set[str]) -> None:
    """With background compaction on: the compaction commits seen; none is a problem."""
    result.compactions = len(seen)
    result.notes.append(compactions.compaction_note(seen))
    if not seen:
        result.problems.append(
            "background compaction was on but the tables got no compaction commit: "
            "the drill proves nothing about compaction (driver logs: 'background "
            "maintenance not started' / 'background compaction failed'?)"
        )


def journal_outcomes(
    result: DrillResult,
    drivers: Sequence[DriverProcess],
    tables: Callable[[], Any],
    pipeline_id: str,
) -> None:
    """Recommits (from the drivers' logs) and rollbacks (from the journal of
    ``tables()``; a journal that cannot be read is a note)."""
    # Recovery logs each recommit before committing, so an instant whose recommit was
    # itself killed (the next run finishes it) still counts once; batch log lines
    # alone undercount kill drills.
    recommitted = {m[1] for d in drivers for m in RECOMMIT_LINE.finditer(d.log())}
    result.recommits = len(recommitted)
    try:
        from pipeline.commit.instant import InstantState

        timeline = tables().timeline(pipeline_id)
        result.rollbacks = sum(
            1 for i in timeline.instants() if i.state is InstantState.ROLLED_BACK
        )
    except Exception as e:  # the journal is optional for the verdict
        result.notes.append(f"journal not readable: {e}")


def hudi_services_outcome(result: DrillResult, cfg: PipelineConfig) -> None:
    """With Hudi's own writer: the actions on the main table's timeline (its cleans and
    rollbacks, the instants its archiver moved to the history) as a note."""
    hudi = cfg.sink.hudi
    if hudi is None or hudi.writer != "spark":
        return
    from pipeline.formats.hudi.instant import Instant
    from pipeline.formats.hudi.layout import META_DIR
    from pipeline.formats.hudi.storage import open_location

    files = open_location(hudi.base_path, hudi.properties)
    try:
        names = files.listdir(f"{META_DIR}/timeline") or []
        history = files.listdir(f"{META_DIR}/timeline/history") or []
    except Exception as e:  # the note is optional for the verdict
        result.notes.append(f"Hudi timeline not listable: {e}")
        return
    # only completed instants count (a killed writer may leave a temporary <name>.<uuid>)
    found = (i for i in map(Instant.parse, names) if i is not None and i.completion_time)
    done = Counter(str(i.action) for i in found)
    actions = ", ".join(f"{done[a]} {a}" for a in sorted(done)) or "none"
    result.notes.append(
        f"Hudi's timeline of the main table: completed {actions}; "
        f"{len([n for n in history if not n.startswith('.')])} archived-history files"
    )


TOTALS = ("expected", "present", "missing", "duplicated", "mismatched", "unexpected", "lost")


def independent_verifier_totals(cfg: PipelineConfig) -> dict[str, Any]:
    """Totals of ``verify_pipeline`` over the pipeline's table(s), plus ``ok`` and the
    records each table recorded as lost (both tables of the ``both`` format record the
    same loss)."""
    from pipeline.ops.verify import verify_pipeline

    reports = verify_pipeline(cfg)
    totals: dict[str, Any] = {
        "ok": all(r.ok for r in reports),
        "lost_per_table": [int(r.totals().lost or 0) for r in reports],
    }
    for r in reports:
        t = r.totals()
        for k in TOTALS:
            totals[k] = totals.get(k, 0) + int(getattr(t, k, 0) or 0)
    return totals
