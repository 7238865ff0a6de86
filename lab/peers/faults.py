"""The correctness table: every peer under the same faults, counted by one checker.

Each fault gets a fresh topic (a small pre-produced data set) and a fresh work directory,
runs the system with a 1-second trigger, injects the fault through the harness only (the
cgroup's SIGKILL, deleting the system's checkpoint, a second copy, the broker's
``delete_records``) — never through the system's own code — then *drains*: the system runs
until its table holds at least every produced record and no new commit came for
``SETTLE_S``, or until it exits. The verdict counts (topic, partition, offset) against the
topic's offsets (:mod:`lab.peers.checker`):

* ``kills`` — ``kills`` SIGKILLs under a live producer, each at a random moment after the
  restarted system's first new commit;
* ``checkpoint-lost`` — killed after its first commits, its checkpoint deleted, restarted;
* ``zombie`` — a second copy on the same checkpoint and table while the first still runs;
* ``kill-before-commit`` — SIGKILLed when a data file is on disk that no commit names yet
  (watched every 20 ms), three times;
* ``retention`` — stopped, more records produced, the oldest unread half of them deleted
  (what retention does), restarted: the deleted records cannot be in any table; what
  counts is whether the system stops with an error or skips them silently.

Every fault ends with ``TAIL_RECORDS`` more records produced before the drain: a drain that
only waited for the table to hold what it held before the fault could end before a
restarted system read anything, and would miss the duplicates of a re-read.

What a system *did* is one of: ``exactly once``; ``duplicated N``; ``lost N`` (missing not
explained by retention); ``stopped with an error`` (with its last error line).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lab.bench.dataset import BenchBroker, produce_dataset
from lab.bench.freshness import RateProducer
from lab.peers.checker import Tally, tally
from lab.peers.model import PeerJob, PeerSystem, parquet_files
from lab.peers.runner import Running

FAULTS = ("kills", "checkpoint-lost", "zombie", "kill-before-commit", "retention")
SETTLE_S = 5.0
TAIL_RECORDS = 1_000
POLL_S = 0.2


@dataclass
class FaultResult:
    fault: str
    system: str
    tally: Tally | None = None
    outcome: str = ""
    injected: int = 0  # kills / copies / deletions actually done
    lost_to_retention: int = 0
    error: str | None = None  # the system's last error line when it stopped on its own
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "fault": self.fault,
            "system": self.system,
            "outcome": self.outcome,
            "injected": self.injected,
            "lost_to_retention": self.lost_to_retention,
            "error": self.error,
            "tally": self.tally.as_dict() if self.tally else None,
            "notes": self.notes,
        }


def _wait(pred: Callable[[], bool], timeout_s: float, poll_s: float = POLL_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(poll_s)
    return False


def _last_error(log: Path) -> str | None:
    if not log.exists():
        return None
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    marks = ("[ingest:", "Exception", "ERROR", "Error:")
    hits = [ln for ln in lines if any(m in ln for m in marks)]
    return (hits[-1] if hits else lines[-1] if lines else "")[:300] or None


class FaultRig:
    """Runs one fault against one system on its own topic."""

    def __init__(self, broker: BenchBroker, work: Path, records: int, partitions: int) -> None:
        self.broker, self.work = broker, work
        self.records, self.partitions = records, partitions
        self.rand = random.Random(5)

    def _job(self, system: PeerSystem, fault: str, job0: PeerJob) -> tuple[PeerJob, str]:
        ds = produce_dataset(self.broker, self.records, self.partitions)
        job = replace(
            job0,
            topic=ds.topic,
            partitions=self.partitions,
            payload=False,
            work=self.work / fault / system.name,
            trigger="1 second",
            max_records_per_trigger=None,  # what is there: a live producer must not outrun it
        )
        system.prepare(job)
        return job, ds.topic

    def _committed_beyond(self, run: Running, records0: int, timeout_s: float) -> bool:
        """Wait until the table holds more than ``records0`` records (a data commit since)
        or the system exits. Records, not a commit count: the table's totals never shrink,
        while the snapshots listed stop growing once old ones expire."""
        sys_, job = run.system, run.job
        return _wait(
            lambda: sys_.progress(job).records > records0 or run.proc.poll() is not None,
            timeout_s,
        )

    def _drain(
        self, system: PeerSystem, job: PeerJob, expected: int, timeout_s: float
    ) -> tuple[str, str | None]:
        """Run until the table holds ``expected`` and is quiet, or the system exits:
        (how it ended, "" when drained; its last error line when it did not)."""
        run = Running(system, job, "drain")
        ended = self._drained(run, expected, timeout_s)
        return ended, (_last_error(run.log) if ended else None)

    def _drained(self, run: Running, expected: int, timeout_s: float) -> str:
        system, job = run.system, run.job
        last, quiet_since = -1, time.monotonic()
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                time.sleep(POLL_S)
                n = system.progress(job).records
                if n != last:
                    last, quiet_since = n, time.monotonic()
                if n >= expected and time.monotonic() - quiet_since >= SETTLE_S:
                    return ""
                if run.proc.poll() is not None:
                    return f"exited {run.proc.returncode}"
            return f"timed out after {timeout_s:.0f} s with {last:,} of {expected:,} records"
        finally:
            run.stop()

    def run(self, system: PeerSystem, fault: str, job0: PeerJob, kills: int = 10) -> FaultResult:
        job, topic = self._job(system, fault, job0)
        result = FaultResult(fault, system.name)
        timeout = 180.0
        if fault == "kills":
            self._kills(system, job, kills, result, timeout)
        elif fault == "checkpoint-lost":
            self._checkpoint_lost(system, job, result, timeout)
        elif fault == "zombie":
            self._zombie(system, job, result, timeout)
        elif fault == "kill-before-commit":
            self._kill_before_commit(system, job, result, timeout)
        elif fault == "retention":
            self._retention(system, job, result, timeout)
        else:
            raise ValueError(f"unknown fault {fault!r}; known: {', '.join(FAULTS)}")
        # Records after the fault, so the drain cannot end before the restarted system has
        # read past everything it read before (a re-read shows up as duplicates first)
        produce_more(self.broker, topic, self.partitions, TAIL_RECORDS)
        ranges = self.broker.watermarks(topic, self.partitions)
        expected = {p: (0, hi) for p, (_, hi) in ranges.items()}
        readable = sum(hi for _, hi in expected.values()) - result.lost_to_retention
        ended, error = self._drain(system, job, readable, timeout)
        if ended:
            result.error = error or ended
            result.notes.append(f"drain: {ended}")
        result.tally = tally(system.rows(job), topic, expected)
        result.outcome = _outcome(result, ended)
        return result

    def _live(self, job: PeerJob, rate: float = 1000.0) -> RateProducer:
        return RateProducer(self.broker.bootstrap_servers, job.topic, self.partitions, rate).start()

    def _kills(
        self, system: PeerSystem, job: PeerJob, kills: int, r: FaultResult, timeout: float
    ) -> None:
        producer = self._live(job)
        try:
            for _ in range(kills):
                records0 = system.progress(job).records
                run = Running(system, job, f"kill{r.injected}")
                if not self._committed_beyond(run, records0, timeout):
                    r.notes.append(f"no new commit within {timeout:.0f} s before kill")
                time.sleep(self.rand.uniform(0.2, 2.0))
                run.kill()
                r.injected += 1
        finally:
            producer.stop()

    def _checkpoint_lost(
        self, system: PeerSystem, job: PeerJob, r: FaultResult, timeout: float
    ) -> None:
        run = Running(system, job, "before-loss")
        self._committed_beyond(run, 0, timeout)
        _wait(lambda: system.progress(job).commits >= 2, 10)
        run.kill()
        r.notes.append(system.lose_checkpoint(job))
        r.injected = 1

    def _zombie(self, system: PeerSystem, job: PeerJob, r: FaultResult, timeout: float) -> None:
        producer = self._live(job)
        try:
            first = Running(system, job, "first")
            self._committed_beyond(first, 0, timeout)
            second = Running(system, job, "second")
            r.injected = 1
            time.sleep(20.0)  # both run: the second's start-up, then batches side by side
            for run, name in ((first, "first"), (second, "second")):
                alive = run.proc.poll() is None
                r.notes.append(f"{name} copy {'still running' if alive else 'had stopped'}")
                if not alive:
                    r.notes.append(f"{name}: {_last_error(run.log)}")
            first.kill()
            second.kill()
        finally:
            producer.stop()

    def _kill_before_commit(
        self, system: PeerSystem, job: PeerJob, r: FaultResult, timeout: float
    ) -> None:
        producer = self._live(job, 2000.0)
        try:
            for _ in range(3):
                run = Running(system, job, f"kbc{r.injected}")
                base = parquet_files(system.data_dir(job)) - system.progress(job).data_files
                hit = _wait(
                    lambda b=base: (  # type: ignore[misc]
                        parquet_files(system.data_dir(job)) - system.progress(job).data_files > b
                    ),
                    timeout,
                    0.02,
                )
                run.kill()
                r.injected += int(hit)
        finally:
            producer.stop()

    def _retention(self, system: PeerSystem, job: PeerJob, r: FaultResult, timeout: float) -> None:
        from confluent_kafka import TopicPartition as KTopicPartition
        from confluent_kafka.admin import AdminClient

        marks = self.broker.watermarks(job.topic, self.partitions)
        before = {p: hi for p, (_, hi) in marks.items()}
        ended, _ = self._drain(system, job, sum(before.values()), timeout)
        if ended:
            r.notes.append(f"before the deletion: {ended}")
        produce_more(self.broker, job.topic, self.partitions, self.records)
        marks = self.broker.watermarks(job.topic, self.partitions)
        # the older half of what it has not read yet goes, as retention would take it
        cut = {p: before[p] + (hi - before[p]) // 2 for p, (_, hi) in marks.items()}
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap_servers})
        futures = admin.delete_records([KTopicPartition(job.topic, p, o) for p, o in cut.items()])
        for fut in futures.values():
            fut.result(30)
        r.lost_to_retention = sum(cut[p] - before[p] for p in cut)
        r.injected = 1


def produce_more(broker: BenchBroker, topic: str, partitions: int, records: int) -> None:
    from lab.bench.dataset import PRODUCER_CONFIG
    from lab.generator import GeneratorSpec, produce

    spec = GeneratorSpec(count=records, seed=13)
    produce(
        broker.bootstrap_servers, topic, spec, partitions=partitions, extra_config=PRODUCER_CONFIG
    )


def _outcome(r: FaultResult, ended: str) -> str:
    """What the system did, from the count and how its last run ended ("" = drained)."""
    t = r.tally
    assert t is not None
    missing = t.missing - r.lost_to_retention
    stopped = bool(ended)
    parts = []
    if ended.startswith("exited"):
        parts.append("stopped with an error")
    elif ended:
        parts.append(f"did not catch up ({ended})")
    if t.duplicated:
        parts.append(f"duplicated {t.duplicated:,}")
    if missing > 0:
        parts.append(f"{missing:,} not ingested" if stopped else f"lost {missing:,}")
    if r.lost_to_retention and not stopped:
        parts.append(f"skipped {r.lost_to_retention:,} deleted records silently")
    return "; ".join(parts) or "exactly once"
