"""The in-memory world of the core's protocol tests (tests/unit/commit/): two partitions
with gaps, a fake broker, the workers and the two tables (``memtable``), the journal on
real files, and the assertions every such test ends with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.commit.coordinator import Coordinator
from pipeline.commit.faults import FaultPoints
from pipeline.commit.journal import (
    InstantTimeline,
    decode_entry,
)
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.commit.protocol import BatchCoordinator
from pipeline.commit.table_set import CommitTables
from pipeline.commit.types import BatchOutcome
from pipeline.storage.local import LocalJournalStore
from support.memtable import FakeKafka, FakeWorkers, MemTable, Rec

PIPE = "p1"
X, Y = "query-x", "query-y"  # checkpoint incarnations (Spark query ids)
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)

# Planned end offsets of batches 0..4 (Spark's offset log).
E = [
    PartitionOffsets({T0: 10, T1: 8}),
    PartitionOffsets({T0: 25, T1: 16}),
    PartitionOffsets({T0: 40, T1: 24}),
    PartitionOffsets({T0: 50, T1: 32}),
    PartitionOffsets({T0: 60, T1: 40}),
]


def make_kafka(dead_letters: bool = True) -> FakeKafka:
    """Two partitions with gaps; some undecodable records in batches 0-3."""
    logs = {
        T0: [o for o in range(60) if o % 7 != 3],
        T1: [o for o in range(40) if o % 5 != 1],
    }
    bad: set[Rec] = set()
    if dead_letters:
        bad = {("t", 0, o) for o in logs[T0] if o % 11 == 5}
        bad |= {("t", 1, o) for o in logs[T1] if o % 9 == 4}
    return FakeKafka(logs, bad)


@dataclass
class Env:
    root: Path
    kafka: FakeKafka
    main: MemTable
    dl: MemTable
    workers: FakeWorkers

    @property
    def journal_dir(self) -> Path:
        return self.root / "journal"

    def timeline(self) -> InstantTimeline:
        return InstantTimeline(LocalJournalStore(str(self.journal_dir)))

    def driver(
        self, faults: str = "", on_overlap: str = "drop", on_gap: str = "fail"
    ) -> Coordinator:
        """A (re)started driver: fresh objects over the same journal and tables, a new
        writer epoch acquired (and the tables fenced with it)."""
        c = Coordinator(
            PIPE,
            CommitTables(self.main, self.dl),
            timeline=self.timeline(),
            on_overlap=on_overlap,
            faults=FaultPoints(faults),
            on_gap=on_gap,
        )
        c.acquire_epoch(owner="test")
        return c

    def run(
        self,
        c: BatchCoordinator,
        incarnation: str,
        batch_id: int,
        start: PartitionOffsets | None,
        end: PartitionOffsets,
        read_from: Mapping[TopicPartition, int] | None = None,
        earliest: bool = False,
    ) -> BatchOutcome:
        """One Spark batch: workers read ``[read_from or start, end)`` (earliest: 0)."""
        rf: Mapping[TopicPartition, int] | None = {} if earliest else (read_from or start)
        write = self.workers.for_batch(rf, end)
        # like the Spark runner: ranges can be re-read, the broker's records counted (the
        # at-least-once baseline never asks)
        return c.run_batch(
            incarnation,
            batch_id,
            start,
            end,
            write,
            reread=self.workers.for_batch,
            count=self.count,
        )

    def count(self, ranges: Mapping[TopicPartition, tuple[int, int]]) -> dict[TopicPartition, int]:
        """The coverage check's oracle: records the fake broker has in each range."""
        return {tp: len(self.kafka.read(tp, s, e)) for tp, (s, e) in ranges.items()}

    def batch(self, c: BatchCoordinator, k: int, incarnation: str = X) -> BatchOutcome:
        return self.run(c, incarnation, k, E[k - 1] if k else None, E[k])

    def instant_file(self, time: str, state: str) -> Path:
        return self.journal_dir / "instants" / f"{time}.{state}"


def assert_exactly_once(env: Env, end: PartitionOffsets) -> None:
    """Every record below ``end`` exactly once (main or dead letters), nothing dangling,
    no staged file the tables do not reference, nothing pending."""
    assert env.main.dangling() == [] and env.dl.dangling() == []
    assert env.main.rows() == env.kafka.good(end)
    assert env.dl.rows() == env.kafka.dead(end)
    assert env.main.orphans() == [] and env.dl.orphans() == []
    assert env.main.committed_offsets(PIPE) == end
    assert env.timeline().pending() == []


def assert_sizes(env: Env, out: BatchOutcome, staged: Sequence[str]) -> None:
    """The outcome's sizes are those of the staged files it committed."""
    main = [f for f in staged if f.startswith("mem://main/")]
    dead = [f for f in staged if f.startswith("mem://dead_letter/")]
    assert out.bytes == sum(env.main.physical[f].size for f in main) > 0
    assert out.dead_letter_files == len(dead)
    assert out.dead_letter_bytes == sum(env.dl.physical[f].size for f in dead)
    assert out.files == len(main) + len(dead)


def batch_keys(table: MemTable) -> list[tuple[str, int]]:
    return [(cp.incarnation, cp.batch_id) for cp in table.commits()]


def rolled_back_paths(env: Env, time: str) -> list[str]:
    data = env.instant_file(time, "rolled_back").read_bytes()
    return sorted(decode_entry("rb", data)["deleted"])
