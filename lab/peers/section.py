"""``ingest bench --peers``: this pipeline beside what users would run instead, in one run.

Operators, in order, all against the bench's one broker and the same 2 cores:

1. **throughput** — per record size (~270 B, ~1.2 KB) one pre-produced data set; every
   system reads all of it from the earliest offset with available-now and the same records
   per trigger, in its own cgroup (:mod:`.runner`); systems in alternating order (the
   second size runs them reversed). Whole run and steady state are reported apart.
2. **freshness** — per system a fresh topic fed at ``freshness_rate`` records/s, a
   1-second trigger (or commit interval); after the warm-up, rows committed in a window
   of ``freshness_seconds``: commit visibility - Kafka timestamp, p50 / p99; data files
   added per minute and their average size over the same window.
3. **correctness** — every fault of :mod:`.faults` against every system but the raw
   consumer, counted by :mod:`.checker`.
4. **goals** — records per CPU-second at least 1.5 times the best peer's at both sizes;
   freshness p99 at most the best peer's; our correctness rows all exactly once (or a
   clear stop where data was already gone).

Invariant: every figure comes from the system's own table, read after the fact with the
format's reader, and its own cgroup; nothing the systems log is trusted for a number.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from lab.bench.dataset import BenchBroker, produce_dataset
from lab.bench.freshness import RateProducer
from lab.bench.runner import ExtraSection
from lab.peers.checker import tally
from lab.peers.faults import FAULTS, FaultRig
from lab.peers.model import PeerJob, PeerSystem
from lab.peers.report import print_peers, write_chart
from lab.peers.runner import PeerRunError, Running, run_peer

#: goal: our records per CPU-second against the best peer's, at each record size
CPU_GOAL = 1.5
PAYLOAD_BYTES = {"~270 B": 0, "~1.2 KB": 940}


#: the section's tables, each measured on its own (a re-run of one merges into a report:
#: lab/peers/merge.py)
PARTS = ("throughput", "freshness", "correctness")


@dataclass(frozen=True)
class PeersPlan:
    records: int  # per record size
    partitions: int = 8
    batch: int = 200_000  # records per trigger
    sizes: tuple[str, ...] = ("~270 B", "~1.2 KB")
    freshness_rate: float = 5_000.0
    freshness_seconds: float = 60.0
    freshness_warmup_s: float = 10.0
    faults: tuple[str, ...] = FAULTS
    kills: int = 10
    fault_records: int = 20_000
    timeout_s: float = 900.0
    systems: tuple[str, ...] = ()  # empty: all of SYSTEMS
    parts: tuple[str, ...] = PARTS  # which tables this run measures
    #: systems left out of the correctness table (time: each fault costs minutes a system)
    no_faults: tuple[str, ...] = (
        "raw-consumer",
        "ingest-iceberg-spark-reader",
        "ingest-hudi-spark-reader",
        "ingest-hudi-spark-writer",
    )


FULL_PLAN = PeersPlan(records=1_000_000)
QUICK_PLAN = PeersPlan(
    records=40_000,
    batch=10_000,
    partitions=4,
    freshness_rate=500.0,
    freshness_seconds=10.0,
    freshness_warmup_s=5.0,
    kills=2,
    fault_records=4_000,
    timeout_s=300.0,
)


def systems() -> dict[str, Callable[[], PeerSystem]]:
    """Every system by report name (constructed lazily: each imports only its own parts)."""
    from lab.peers.kafka_connect import IcebergKafkaConnectPeer
    from lab.peers.ours import IngestPeer, RawPeer
    from lab.peers.spark_sinks import SparkHudiSink, SparkIcebergSink

    return {
        "ingest-iceberg": lambda: IngestPeer("iceberg"),
        "ingest-hudi": lambda: IngestPeer("hudi"),
        "ingest-iceberg-spark-reader": lambda: IngestPeer("iceberg", "spark"),
        "ingest-hudi-spark-reader": lambda: IngestPeer("hudi", "spark"),
        "ingest-hudi-spark-writer": lambda: IngestPeer("hudi", hudi_writer="spark"),
        "spark-iceberg-sink": SparkIcebergSink,
        "spark-hudi-sink": SparkHudiSink,
        "iceberg-kafka-connect": IcebergKafkaConnectPeer,
        "raw-consumer": RawPeer,
    }


def ours(name: str) -> bool:
    return name.startswith("ingest-")


def _peer(name: str) -> bool:
    """A system users would run instead (the raw consumer is a floor, not a peer)."""
    return not ours(name) and name != "raw-consumer"


def _pick(plan: PeersPlan) -> list[PeerSystem]:
    known = systems()
    names = plan.systems or tuple(known)
    bad = [n for n in names if n not in known]
    if bad:
        raise ValueError(f"unknown peer system(s) {bad}; known: {', '.join(known)}")
    return [known[n]() for n in names]


def _job(broker: BenchBroker, **kw: Any) -> PeerJob:
    return replace(PeerJob(broker.bootstrap_servers, "", 0, False, Path(".")), **kw)


def throughput(
    broker: BenchBroker, plan: PeersPlan, chosen: list[PeerSystem], work: Path, say: Any
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for i, size in enumerate(plan.sizes):
        payload = PAYLOAD_BYTES[size]
        say(f"peers: {plan.records:,} records of {size} into {plan.partitions} partitions")
        ds = produce_dataset(broker, plan.records, plan.partitions, payload_bytes=payload)
        ranges = broker.watermarks(ds.topic, ds.partitions)
        order = chosen if i % 2 == 0 else list(reversed(chosen))
        for system in order:
            job = _job(
                broker,
                topic=ds.topic,
                partitions=ds.partitions,
                payload=payload > 0,
                work=work / "throughput" / f"{size.strip('~ ').replace(' ', '')}" / system.name,
                max_records_per_trigger=plan.batch,
            )
            system.prepare(job)
            cpu0 = broker.cpu_seconds()
            try:
                run = run_peer(system, job, ds.records, plan.timeout_s)
            except PeerRunError as e:
                rows.append({"size": size, "system": system.name, "error": str(e)})
                say(f"  {system.name:28s} {size}: FAILED: {e}")
                continue
            cpu1 = broker.cpu_seconds()
            row = {"size": size, **run.summary()}
            row["broker_cpu_s"] = None if cpu0 is None or cpu1 is None else round(cpu1 - cpu0, 2)
            row["tally"] = tally(system.rows(job), ds.topic, ranges).as_dict()
            rows.append(row)
            say(
                f"  {system.name:28s} {size}: {run.records / run.wall_s:9,.0f} rec/s whole, "
                f"{run.records / run.cpu_s:9,.0f} rec/CPU-s, start→first commit "
                f"{run.first_commit_s or 0:.1f} s, peak {run.peak_rss_bytes / 2**30:.2f} GiB"
            )
        broker.delete_topic(ds.topic)
    return rows


def freshness(
    broker: BenchBroker, plan: PeersPlan, chosen: list[PeerSystem], work: Path, say: Any
) -> list[dict[str, Any]]:
    rows = []
    for system in chosen:
        if system.name == "raw-consumer":
            continue  # commits nothing: no freshness
        topic = f"peers-fresh-{int(time.time() * 1000) % 10**9}"
        broker.create_topic(topic, plan.partitions)
        job = _job(
            broker,
            topic=topic,
            partitions=plan.partitions,
            work=work / "freshness" / system.name,
            max_records_per_trigger=None,
            trigger="1 second",
        )
        system.prepare(job)
        producer = RateProducer(
            broker.bootstrap_servers, topic, plan.partitions, plan.freshness_rate
        )
        running = Running(system, job, "fresh")
        producer.start()
        try:
            deadline = time.monotonic() + plan.timeout_s
            while system.progress(job).records == 0 and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(plan.freshness_warmup_s)
            p0, t0 = system.progress(job), time.time()
            time.sleep(plan.freshness_seconds)
            p1, t1 = system.progress(job), time.time()
        finally:
            producer.stop()
            running.stop()
        coords = system.rows(job)
        commit = coords["commit_ts_ms"].to_numpy(zero_copy_only=False)
        kafka = coords["kafka_ts_ms"].to_numpy(zero_copy_only=False)
        ok = ~np.isnan(commit.astype(float))
        inside = ok & (commit >= t0 * 1000) & (commit <= t1 * 1000)
        lag = (commit[inside] - kafka[inside]) / 1000.0
        minutes = (t1 - t0) / 60
        files = p1.data_files - p0.data_files
        row = {
            "system": system.name,
            "rate": plan.freshness_rate,
            "window_s": round(t1 - t0, 1),
            "rows_in_window": int(inside.sum()),
            "p50_s": round(float(np.percentile(lag, 50)), 3) if lag.size else None,
            "p99_s": round(float(np.percentile(lag, 99)), 3) if lag.size else None,
            "max_s": round(float(lag.max()), 3) if lag.size else None,
            # rows whose snapshot expired (this pipeline keeps sink.maxSnapshots) have no
            # commit time: the quantiles are over the rest of the window
            "rows_without_commit_time": int((~ok).sum()),
            "data_files_per_minute": round(files / minutes, 1),
            "avg_file_bytes": round((p1.data_bytes - p0.data_bytes) / files) if files > 0 else None,
        }
        rows.append(row)
        say(f"  {system.name:28s} freshness p50 {row['p50_s']} s, p99 {row['p99_s']} s")
    return rows


def correctness(
    broker: BenchBroker, plan: PeersPlan, chosen: list[PeerSystem], work: Path, say: Any
) -> list[dict[str, Any]]:
    rig = FaultRig(broker, work / "faults", plan.fault_records, plan.partitions)
    job0 = _job(broker)  # the rig sets the topic, work directory, trigger and batch size
    out = []
    for fault in plan.faults:
        for system in chosen:
            if system.name in plan.no_faults:
                continue
            try:
                row = rig.run(system, fault, job0, kills=plan.kills).as_dict()
            except Exception as e:  # the harness failed, not the system: say so, go on
                error = f"harness: {type(e).__name__}: {e}"[:400]
                row = {"fault": fault, "system": system.name, "outcome": "not measured"}
                row.update(error=error, tally=None)
            out.append(row)
            say(f"  {fault:20s} {system.name:28s} {row['outcome']}")
    return out


def goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal met or not, with the numbers (None where a side was not measured)."""
    out: list[dict[str, Any]] = []
    by_size: dict[str, list[dict[str, Any]]] = {}
    for row in report.get("throughput", []):
        by_size.setdefault(row["size"], []).append(row)
    for size, rows in by_size.items():
        for span, key in (("whole run", _whole), ("steady state", _steady)):
            mine = [key(r) for r in rows if ours(r["system"]) and "error" not in r]
            theirs = [key(r) for r in rows if _peer(r["system"]) and "error" not in r]
            best_ours = max((x for x in mine if x), default=None)
            best_peer = max((x for x in theirs if x), default=None)
            ratio = best_ours / best_peer if best_ours and best_peer else None
            out.append(
                {
                    "goal": f"records per CPU-second at least {CPU_GOAL} times the best "
                    f"peer's, {size}, {span}",
                    "ours": best_ours,
                    "best_peer": best_peer,
                    "ratio": ratio,
                    "met": None if ratio is None else ratio >= CPU_GOAL,
                }
            )
    fresh = report.get("freshness", [])
    mine_p99 = [r["p99_s"] for r in fresh if ours(r["system"]) and r["p99_s"] is not None]
    peer_p99 = [r["p99_s"] for r in fresh if _peer(r["system"]) and r["p99_s"] is not None]
    if mine_p99 and peer_p99:
        out.append(
            {
                "goal": "freshness p99 ≤ the best peer's",
                "ours": min(mine_p99),
                "best_peer": min(peer_p99),
                "met": min(mine_p99) <= min(peer_p99),
            }
        )
    faults = [r for r in report.get("correctness", []) if ours(r["system"])]
    if faults:
        bad = [
            f"{r['fault']}/{r['system']}: {r['outcome']}"
            for r in faults
            if not (r["outcome"] == "exactly once" or _clear_stop(r))
        ]
        out.append(
            {
                "goal": "0 missing / 0 duplicated in every row of our correctness column "
                "(or a clear stop where data was already gone)",
                "rows": len(faults),
                "not_met": bad,
                "met": not bad,
            }
        )
    return out


def _whole(r: dict[str, Any]) -> float | None:
    return r.get("records_per_cpu_s")


def _steady(r: dict[str, Any]) -> float | None:
    per_million = (r.get("steady") or {}).get("cpu_s_per_million")
    return 1e6 / per_million if per_million else None


def _clear_stop(r: dict[str, Any]) -> bool:
    t = r.get("tally") or {}
    return (
        r["fault"] == "retention"
        and r["outcome"].startswith("stopped with an error")
        and not t.get("duplicated")
        and "[ingest:data-loss]" in (r.get("error") or "")
    )


def run_peers(
    broker: BenchBroker, plan: PeersPlan, work: Path, say: Callable[[str], None]
) -> dict[str, Any]:
    chosen = _pick(plan)
    report: dict[str, Any] = {
        "plan": {k: v for k, v in plan.__dict__.items()},
        "systems": {s.name: s.describe() for s in chosen},
    }
    say(f"peers: {', '.join(s.name for s in chosen)}")
    if "throughput" in plan.parts:
        report["throughput"] = throughput(broker, plan, chosen, work, say)
    if "freshness" in plan.parts and plan.freshness_seconds > 0:
        say(f"peers: freshness at {plan.freshness_rate:,.0f} records/s, 1 s trigger")
        report["freshness"] = freshness(broker, plan, chosen, work, say)
    if "correctness" in plan.parts and plan.faults:
        say(f"peers: correctness under faults ({', '.join(plan.faults)})")
        report["correctness"] = correctness(broker, plan, chosen, work, say)
    report["goals"] = goals(report)
    return report


def check_choice(peer: Sequence[str], parts: Sequence[str]) -> None:
    """Refuse unknown system or part names, in one line, before anything starts."""
    choices = (("--peer", peer, tuple(systems())), ("--peers-part", parts, PARTS))
    for kind, names, known in choices:
        bad = [n for n in names if n not in known]
        if bad:
            raise ValueError(f"{kind} {', '.join(bad)}: allowed: {', '.join(known)}")


def bench_section(peer: Sequence[str] = (), parts: Sequence[str] = ()) -> ExtraSection:
    """This section for ``ingest bench``: the full plan with ``--full``, else the quick
    one; ``--records`` scales it; ``peer`` and ``parts`` narrow it (empty: all)."""

    def run(
        broker: BenchBroker, preset: str, records: int | None, work: Path, say: Any
    ) -> dict[str, Any]:
        plan = FULL_PLAN if preset == "full" else QUICK_PLAN
        plan = replace(plan, systems=tuple(peer), parts=tuple(parts) or PARTS)
        if records is not None:
            plan = replace(plan, records=records, batch=max(1, min(plan.batch, records // 5)))
        return run_peers(broker, plan, work, say)

    def publish(part: dict[str, Any], out: Path, console: Any) -> None:
        write_chart(part, out)
        print_peers(part, console)

    return ExtraSection(run=run, publish=publish)
