"""``ingest bench --only tables``: many tables from one pipeline against one table, and
against Iceberg's Kafka Connect sink routing the same topics (docs/bench.md, *Many
tables*).

Data, produced once: ``topics`` topics of ~270 B events (lab/generator.py), ``partitions``
each, ``records`` in all; the same number of records in ONE topic of ``partitions``
partitions; ``topics - 1`` empty topics beside that one.

Runs, in this order, each in its own cgroup through the peers harness
(:func:`~lab.peers.runner.run_peer`: CPU of the whole process tree, peak resident memory),
available-now from the earliest offsets, ``batch`` records per trigger, exactly-once, the
default decode engine:

1. *one table*: the one topic into one table (no routes): the baseline;
2. *many tables*: the topics into a table each (``sink.routes`` by topic);
3. *idle tables*: the one topic and the empty ones routed alike: every batch's records go
   to one table of ``topics``, the others commit it empty (the set's rule: every main table
   commits every batch). Its commit phase beside the baseline's is the price of the idle
   tables' metadata-only commits;
4. *Connect*: Iceberg's Kafka Connect sink over the many topics into a table each
   (:func:`~lab.peers.connect_tables.run_connect_tables`), Iceberg only.

Every run is counted: each produced (topic, partition, offset) once, in its topic's
table. Goals (each met or not, with its numbers, in ``by_format.<format>.goals``): CPU of
the many-table run ÷ the one-table run ≤ 1.3; commit phase of a batch (median after the
first batch) ≤ 3 times; peak memory ≤ 1.5 times; records per CPU-second ≥ 1.5 times
Connect's.

A format is one part of the section (``by_format``): the data sets are shared, the runs
and goals are the format's own.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from lab.bench.dataset import BenchBroker, produce_dataset
from lab.bench.driver import BatchLine
from lab.bench.runner import ExtraSection
from lab.peers.checker import tally_routed, total
from lab.peers.connect_tables import Ranges, run_connect_tables, watermarks
from lab.peers.model import PeerJob
from lab.peers.report import print_tables
from lab.peers.routed import RoutedIngestPeer, TableCommit
from lab.peers.runner import run_peer
from pipeline.errors import PipelineError

Say = Callable[[str], None]

CPU_RATIO_GOAL = 1.3  # CPU-s, many tables ÷ one table
COMMIT_RATIO_GOAL = 3.0  # commit phase of a batch, many tables ÷ one table
PEAK_RATIO_GOAL = 1.5  # peak resident memory, many tables ÷ one table
CONNECT_GOAL = 1.5  # records per CPU-second, ours ÷ Connect's, many tables
CONNECT_BATCH = 200_000  # Connect's max.poll.records, as in the peers section


@dataclass(frozen=True)
class TablesPlan:
    topics: int  # of the many-tables data set: a table each
    records: int  # in all (the one-topic data set holds as many)
    partitions: int = 8  # per topic
    batch: int = 100_000  # records per trigger
    formats: tuple[str, ...] = ("iceberg",)
    connect: bool = True  # Iceberg's Kafka Connect sink over the same topics
    idle: bool = True  # the idle-tables run
    cores: int = 2
    timeout_s: float = 900.0


FULL_PLAN = TablesPlan(topics=20, records=1_000_000)
QUICK_PLAN = TablesPlan(topics=5, records=50_000, partitions=4, batch=10_000, timeout_s=300.0)


@dataclass(frozen=True)
class DataSets:
    many: tuple[str, ...]  # a table each
    one: str  # as many records, one table
    empty: tuple[str, ...]  # beside ``one`` in the idle-tables run
    ranges: Ranges  # every topic's (low, high) per partition, read after producing
    produce_seconds: float

    def records(self, topics: Sequence[str]) -> int:
        return sum(hi - lo for t in topics for lo, hi in self.ranges[t].values())


def produce_sets(broker: BenchBroker, plan: TablesPlan, say: Say) -> DataSets:
    if plan.topics < 2 or plan.records < plan.topics:
        raise PipelineError(f"tables: {plan.topics} topics of {plan.records} records: too few")
    say(
        f"tables: {plan.records:,} records into {plan.topics} topics of {plan.partitions} "
        f"partitions, and again into one topic"
    )
    t0 = time.monotonic()
    share, extra = divmod(plan.records, plan.topics)
    many = tuple(
        produce_dataset(broker, share + (i < extra), plan.partitions, seed=100 + i).topic
        for i in range(plan.topics)
    )
    one = produce_dataset(broker, plan.records, plan.partitions).topic
    empty: list[str] = []
    for _ in range(plan.topics - 1 if plan.idle else 0):
        name = f"{one}-idle-{len(empty):02d}"
        broker.create_topic(name, plan.partitions)
        empty.append(name)
    topics = [*many, one, *empty]
    return DataSets(
        many, one, tuple(empty), watermarks(broker.bootstrap_servers, topics), time.monotonic() - t0
    )


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _phase(batches: list[BatchLine], phase: str) -> dict[str, Any]:
    """A phase's seconds over the committed batches after the first (its workers and
    tables are cold), median and max."""
    done = [b for b in batches if b.outcome in ("committed", "recommitted")][1:]
    values = [b.phases[phase] for b in done if phase in b.phases]
    return {
        "batches": len(values),
        "p50_s": _r(_median(values)),
        "max_s": _r(max(values, default=None)),
        "values_s": [round(v, 4) for v in values],
    }


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


def _table_commits(commits: list[TableCommit]) -> dict[str, Any]:
    """Each table's own commit, after the first batch: with files and empty (an idle
    table's metadata-only commit), p50 of each."""
    later = [c for c in commits if c.batch_id > 0]
    empty = [c.seconds for c in later if c.files == 0]
    data = [c.seconds for c in later if c.files > 0]
    return {
        "commits": len(later),
        "empty": len(empty),
        "empty_p50_s": _r(_median(empty)),
        "with_files_p50_s": _r(_median(data)),
    }


def _measure(
    broker: BenchBroker,
    peer: RoutedIngestPeer,
    sets: DataSets,
    plan: TablesPlan,
    work: Path,
    say: Say,
) -> dict[str, Any]:
    """One run of ``peer`` in its cgroup, its batch log's phases and its count."""
    job = PeerJob(
        bootstrap=broker.bootstrap_servers,
        topic=peer.topics[0],
        partitions=plan.partitions,
        payload=False,
        work=work / peer.name,
        max_records_per_trigger=plan.batch,
        cores=plan.cores,
        topics=peer.topics,
    )
    peer.prepare(job)
    load_before = os.getloadavg()[0]
    cpu0 = broker.cpu_seconds()
    run = run_peer(peer, job, peer.expected, plan.timeout_s, tag="tables")
    cpu1 = broker.cpu_seconds()
    batches = peer.batches(job)
    tallies = tally_routed(peer.table_rows(job), {t: sets.ranges[t] for t in peer.topics})
    checkpoints = peer.checkpoint_batches(job)
    last = max((b.batch_id for b in batches if b.outcome == "committed"), default=None)
    row = run.summary()
    row.update(
        topics=len(peer.topics),
        tables=len(checkpoints),
        table_commit_threads=peer.commit_threads(job),
        cores_used=_r(run.cpu_s / run.wall_s, 2) if run.wall_s else None,
        committed_batches=sum(1 for b in batches if b.outcome in ("committed", "recommitted")),
        commit_phase=_phase(batches, "commit"),
        precommit_phase=_phase(batches, "precommit"),
        write_phase=_phase(batches, "write"),
        table_commits=_table_commits(peer.table_commits(job)),
        # every table of the set at the last batch: the idle ones committed it too
        tables_at_last_batch=sum(1 for b in checkpoints.values() if b == last),
        tally=total(tallies).as_dict(),
        exactly_once=all(t.exactly_once for t in tallies.values()),
        topics_not_exactly_once=[t for t, x in tallies.items() if not x.exactly_once],
        broker_cpu_s=None if cpu0 is None or cpu1 is None else round(cpu1 - cpu0, 2),
        load_average_before=round(load_before, 2),
        load_average_after=round(os.getloadavg()[0], 2),
    )
    say(
        f"  {peer.name:34s} {run.records:,} records, {len(checkpoints)} table(s): "
        f"{row['cpu_s']:.1f} CPU-s, {row['cores_used']} cores, peak "
        f"{run.peak_rss_bytes / 2**30:.2f} GiB, commit phase p50 "
        f"{row['commit_phase']['p50_s']} s, exactly once: {row['exactly_once']}"
    )
    return row


def _connect(
    broker: BenchBroker, sets: DataSets, plan: TablesPlan, work: Path, say: Say
) -> dict[str, Any]:
    say(f"tables: Iceberg's Kafka Connect sink, {len(sets.many)} topics into a table each")
    load_before = os.getloadavg()[0]
    try:
        result = run_connect_tables(
            broker.bootstrap_servers,
            sets.many,
            work / "connect",
            batch=CONNECT_BATCH,
            timeout_s=plan.timeout_s,
        )
    except PipelineError as e:  # the peer did not finish: the goal is not measured
        say(f"  iceberg-kafka-connect FAILED: {e}")
        return {"error": str(e)[:400]}
    row = result.summary()
    row.update(
        max_poll_records=CONNECT_BATCH,
        cores_used=_r(row["cpu_s"] / row["wall_s"], 2) if row["wall_s"] else None,
        load_average_before=round(load_before, 2),
        load_average_after=round(os.getloadavg()[0], 2),
    )
    say(
        f"  {'iceberg-kafka-connect':34s} {row['records']:,} records: {row['cpu_s']:.1f} CPU-s, "
        f"{row['cores_used']} cores, exactly once: {row['exactly_once']}"
    )
    return row


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)


def _goal(
    name: str, ratio: float | None, goal: float, at_most: bool, **numbers: Any
) -> dict[str, Any]:
    met = None if ratio is None else (ratio <= goal if at_most else ratio >= goal)
    return {"goal": name, "ratio": ratio, "target": goal, "met": met, **numbers}


def goals(runs: dict[str, dict[str, Any]], connect: dict[str, Any] | None) -> list[dict[str, Any]]:
    one, many = runs["one_table"], runs["many_tables"]
    c1, cn = one["commit_phase"]["p50_s"], many["commit_phase"]["p50_s"]
    out = [
        _goal(
            f"CPU-s of the run, many tables ÷ one table ≤ {CPU_RATIO_GOAL}",
            _ratio(many["cpu_s"], one["cpu_s"]),
            CPU_RATIO_GOAL,
            True,
            many_tables=many["cpu_s"],
            one_table=one["cpu_s"],
            one_table_cores_used=one["cores_used"],
            many_tables_cores_used=many["cores_used"],
            # from each run's first commit on (start-up left out)
            steady_ratio=_ratio(
                many["steady"]["cpu_s_per_million"], one["steady"]["cpu_s_per_million"]
            ),
        ),
        _goal(
            f"commit phase of a batch (p50), many tables ÷ one table ≤ {COMMIT_RATIO_GOAL}",
            _ratio(cn, c1),
            COMMIT_RATIO_GOAL,
            True,
            many_tables_s=cn,
            one_table_s=c1,
        ),
        _goal(
            f"peak memory, many tables ÷ one table ≤ {PEAK_RATIO_GOAL}",
            _ratio(many["peak_rss_bytes"], one["peak_rss_bytes"]),
            PEAK_RATIO_GOAL,
            True,
            many_tables_bytes=many["peak_rss_bytes"],
            one_table_bytes=one["peak_rss_bytes"],
        ),
    ]
    measured = connect if connect is not None and "error" not in connect else None
    theirs = None if measured is None else measured["records_per_cpu_s"]
    out.append(
        _goal(
            f"records per CPU-second, many tables, ≥ {CONNECT_GOAL} times Iceberg's Kafka Connect "
            "sink routing the same topics",
            _ratio(many["records_per_cpu_s"], theirs),
            CONNECT_GOAL,
            False,
            ours=_r(many["records_per_cpu_s"], 1),
            connect=_r(theirs, 1),
            connect_cores_used=None if measured is None else measured["cores_used"],
        )
    )
    out.append(
        {
            "goal": "every produced (topic, partition, offset) once, in its topic's table",
            "met": all(r["exactly_once"] for r in runs.values())
            and (measured is None or bool(measured["exactly_once"])),
            "runs": {k: r["exactly_once"] for k, r in runs.items()},
            "connect": None if measured is None else measured["exactly_once"],
        }
    )
    return out


def idle_cost(runs: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """What the idle tables' empty commits add per batch: the idle-tables run (the
    baseline's records, every batch into one table of ``n``) beside the baseline."""
    idle, one = runs.get("idle_tables"), runs["one_table"]
    if idle is None:
        return None
    n = idle["tables"] - 1
    c1, ci = one["commit_phase"]["p50_s"], idle["commit_phase"]["p50_s"]
    extra = None if c1 is None or ci is None else ci - c1
    batches = idle["committed_batches"]
    cpu_extra = (idle["cpu_s"] - one["cpu_s"]) / batches if batches else None
    return {
        "idle_tables": n,
        "commit_phase_p50_one_table_s": c1,
        "commit_phase_p50_one_of_n_receiving_s": ci,
        "commit_phase_p50_all_receiving_s": runs["many_tables"]["commit_phase"]["p50_s"],
        "extra_commit_phase_per_batch_s": _r(extra),
        "per_idle_table_ms": None if extra is None else round(extra / n * 1000, 2),
        # one idle table's own metadata-only commit, beside the others on the commit
        # threads (the pipeline's log line of each table commit)
        "empty_commit_p50_s": idle["table_commits"]["empty_p50_s"],
        "receiving_table_commit_p50_s": idle["table_commits"]["with_files_p50_s"],
        "one_table_commit_p50_s": one["table_commits"]["with_files_p50_s"],
        # the run's CPU beyond the baseline's, per batch; it also reads the empty topics'
        # partitions, so this bounds the empty commits' CPU from above
        "extra_cpu_per_batch_s": _r(cpu_extra),
        "cpu_per_idle_table_per_batch_ms": None
        if cpu_extra is None
        else round(cpu_extra / n * 1000, 2),
    }


def run_format(
    broker: BenchBroker, plan: TablesPlan, sets: DataSets, fmt: str, work: Path, say: Say
) -> dict[str, Any]:
    say(f"tables: {fmt}, one table, {len(sets.many)} tables, idle tables")
    n = sets.records([sets.one])
    peers = {
        "one_table": RoutedIngestPeer(
            [sets.one], n, fmt, routed=False, name=f"ingest-{fmt}-one-table"
        ),
        "many_tables": RoutedIngestPeer(
            sets.many, sets.records(sets.many), fmt, name=f"ingest-{fmt}-tables"
        ),
    }
    if plan.idle:
        peers["idle_tables"] = RoutedIngestPeer(
            [sets.one, *sets.empty], n, fmt, name=f"ingest-{fmt}-idle-tables"
        )
    runs = {key: _measure(broker, peer, sets, plan, work / fmt, say) for key, peer in peers.items()}
    connect = (
        _connect(broker, sets, plan, work / fmt, say) if plan.connect and fmt == "iceberg" else None
    )
    return {
        "systems": {k: p.describe() for k, p in peers.items()},
        "runs": runs,
        "connect": connect if connect is not None else {"skipped": "not in the plan"},
        "idle_table_commit": idle_cost(runs),
        "goals": goals(runs, connect),
    }


def run_tables(broker: BenchBroker, plan: TablesPlan, work: Path, say: Say) -> dict[str, Any]:
    load_start = list(os.getloadavg())
    sets = produce_sets(broker, plan, say)
    report: dict[str, Any] = {
        "plan": asdict(plan),
        "data_sets": {
            "many_topics": list(sets.many),
            "one_topic": sets.one,
            "empty_topics": list(sets.empty),
            "records_many": sets.records(sets.many),
            "records_one": sets.records([sets.one]),
            "record_bytes": "~270 B (lab/generator.py events)",
            "produce_seconds": round(sets.produce_seconds, 1),
        },
        "load_average_at_start": load_start,
        "by_format": {fmt: run_format(broker, plan, sets, fmt, work, say) for fmt in plan.formats},
    }
    report["load_average_at_end"] = list(os.getloadavg())
    for topic in (*sets.many, sets.one, *sets.empty):
        broker.delete_topic(topic)
    return report


def bench_section(formats: Sequence[str] = ("iceberg",)) -> ExtraSection:
    """This section for ``ingest bench``: the full plan with ``--full``, else the quick
    one; ``--records`` scales it (records in all, a fifth of them per batch at most)."""

    def run(
        broker: BenchBroker, preset: str, records: int | None, work: Path, say: Say
    ) -> dict[str, Any]:
        plan = replace(FULL_PLAN if preset == "full" else QUICK_PLAN, formats=tuple(formats))
        if records is not None:
            plan = replace(plan, records=records, batch=max(1, min(plan.batch, records // 5)))
        return run_tables(broker, plan, work, say)

    def publish(section: dict[str, Any], out: Path, console: Console) -> None:
        print_tables(section, console)

    return ExtraSection(run=run, publish=publish)
