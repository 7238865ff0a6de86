"""Writer-epoch fencing (docs/design.md invariant 7), Spark-free: a zombie refused, epoch
uniqueness across racing timelines, and every two-step interleaving of a zombie writer
with the writer that took over (the enumeration uses a tmpfs directory when there is one).
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support.commit_env import (
    PIPE,
    E,
    Env,
    X,
    Y,
    assert_exactly_once,
    batch_keys,
    make_kafka,
)
from support.memtable import FakeWorkers, MemTable

from pipeline.commit import journal as journal_module
from pipeline.commit.coordinator import Coordinator
from pipeline.commit.instant import (
    next_instant_time,
)
from pipeline.commit.journal import (
    InstantTimeline,
    JournalStore,
)
from pipeline.commit.table_set import CommitTables
from pipeline.commit.types import BatchOutcome
from pipeline.errors import FencedError
from pipeline.storage.local import LocalJournalStore

# ---------------------------------------------------------------------------------------
# Fencing (invariant 7)
# ---------------------------------------------------------------------------------------


def test_zombie_that_loaded_before_the_fence_is_refused_not_rebased(env: Env) -> None:
    """A (old epoch) loads the table head and passes its fence check; B takes over
    (acquire_epoch + fence) before A's compare-and-set; A's retry must see B's epoch."""
    a = env.driver()
    env.batch(a, 0)
    taken: list[Coordinator] = []
    env.main.on("commit-cas", lambda: taken.append(env.driver()))
    with pytest.raises(FencedError):
        env.batch(a, 1)
    b = taken[0]
    assert (a.epoch, b.epoch) == (1, 2)
    assert batch_keys(env.main) == [(X, 0)]
    assert [r.result for r in env.main.attempts if r.batch_id == 1] == ["fenced"]
    # B replays batch 1 (same query): A's precommit is recommitted at B's epoch
    out = env.batch(b, 1)
    assert out.outcome == "recommitted"
    assert env.main.commits()[-1].epoch == 2
    env.batch(b, 2)
    calls = len(env.workers.calls)
    with pytest.raises(FencedError):  # the zombie's next batch stops before writing
        env.batch(a, 3)
    assert len(env.workers.calls) == calls
    assert_exactly_once(env, E[2])


def test_rebasing_commit_retry_would_let_the_zombie_in(env: Env) -> None:
    """The same race against pyiceberg's own retry (rebase without checks, docs/design.md
    invariant 7): the zombie's append lands after the fence. Shows the test above bites."""
    env.main.rebase_on_conflict = True
    a = env.driver()
    env.batch(a, 0)
    env.main.on("commit-cas", lambda: env.driver() and None)
    env.batch(a, 1)
    epochs = [s.checkpoint.epoch for s in env.main.snapshots]
    assert epochs[-2:] == [2, 1]  # B's fence, then the zombie's commit


def test_fence_semantics_of_the_memtable_match_the_adapter() -> None:
    t = MemTable()
    t.fence(PIPE, 1)
    cp = t.snapshots[-1].checkpoint
    assert (cp.epoch, cp.batch_id, dict(cp.committed_offsets)) == (1, -1, {})
    t.fence(PIPE, 1)  # same epoch: no-op
    assert len(t.snapshots) == 1
    t.fence(PIPE, 3)
    with pytest.raises(FencedError):
        t.fence(PIPE, 2)
    assert t.latest_epoch(PIPE) == 3 and t.latest_epoch("other") is None
    missing = MemTable(exists=False)
    missing.fence(PIPE, 5)
    assert missing.snapshots == [] and missing.latest_epoch(PIPE) is None


def test_acquire_epoch_is_unique_across_racing_timelines(tmp_path: Path) -> None:
    root = str(tmp_path / "journal")
    racers, per = 4, 8
    barrier = threading.Barrier(racers)
    got: list[int] = []
    lock = threading.Lock()

    def racer(n: int) -> None:
        tl = InstantTimeline(LocalJournalStore(root))
        barrier.wait()
        for _ in range(per):
            e = tl.acquire_epoch(owner=f"r{n}")
            with lock:
                got.append(e)

    threads = [threading.Thread(target=racer, args=(n,)) for n in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(got) == list(range(1, racers * per + 1))
    assert InstantTimeline(LocalJournalStore(root)).epochs() == sorted(got)


def test_racing_drivers_get_distinct_epochs_and_the_older_is_fenced(env: Env) -> None:
    a = env.driver()
    env.batch(a, 0)
    barrier = threading.Barrier(3)
    result: dict[str, int | BaseException] = {}

    def start(name: str) -> None:
        c = Coordinator(PIPE, CommitTables(env.main, env.dl), timeline=env.timeline())
        barrier.wait()
        try:
            result[name] = c.acquire_epoch(owner=name)
        except FencedError as e:  # lost the fence race to a newer epoch
            result[name] = e

    threads = [threading.Thread(target=start, args=(n,)) for n in ("b", "c", "d")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    epochs = [v for v in result.values() if isinstance(v, int)]
    assert len(epochs) == len(set(epochs)) and epochs
    assert env.main.latest_epoch(PIPE) == max(epochs) == max(env.timeline().epochs())
    with pytest.raises(FencedError):
        env.batch(a, 1)


# ---------------------------------------------------------------------------------------
# Two writers, every interleaving of a zombie (A) and the writer that took over (B)
# ---------------------------------------------------------------------------------------


class TwoStep:
    """One interleaving of two writers with two context switches: ``A^i B^j A* B*``.

    Scheduling points are every journal write or listing, every table operation and every
    staged file. Writer A runs in the test's thread; at the point where ``pause_a(i, label)``
    holds (A has done ``i`` operations; ``label`` is the one it is about to do) writer B, a
    thread, runs until ``pause_b(j, label)`` holds and stops there; then A runs to its end
    and B after it. Only one writer runs at any time, so the interleaving is exact."""

    def __init__(
        self,
        pause_a: Callable[[int, str], bool],
        pause_b: Callable[[int, str], bool],
        timeout: float = 10.0,
    ) -> None:
        self.pause_a, self.pause_b, self.timeout = pause_a, pause_b, timeout
        self.trace: list[tuple[str, str]] = []
        self.errors: dict[str, BaseException] = {}
        self.switched = False  # B got its turn while A was still running
        self.b_finished_in_turn = False
        self._a_ident: int | None = None
        self._b_ident: int | None = None
        self._b_may_pause = True
        self._a_steps = self._b_steps = 0
        self._b: Callable[[], object] = lambda: None
        self._b_done = False
        self._b_stopped = threading.Event()
        self._b_resume = threading.Event()
        self._b_thread: threading.Thread | None = None

    def point(self, label: str) -> None:
        ident = threading.get_ident()
        if ident == self._a_ident:
            self.trace.append(("A", label))
            self._a_steps += 1
            if self._b_thread is None and self.pause_a(self._a_steps - 1, label):
                self.switched = True
                self._start_b()
                self.b_finished_in_turn = self._b_done
        elif ident == self._b_ident:
            self.trace.append(("B", label))
            self._b_steps += 1
            if self._b_may_pause and self.pause_b(self._b_steps - 1, label):
                self._b_may_pause = False
                self._b_stopped.set()
                if not self._b_resume.wait(self.timeout):
                    raise RuntimeError(f"B was never resumed at {label}")

    def _start_b(self) -> None:
        def body() -> None:
            self._b_ident = threading.get_ident()
            try:
                self._b()
            except BaseException as e:
                self.errors["B"] = e
            finally:
                self._b_done = True
                self._b_stopped.set()

        self._b_thread = threading.Thread(target=body, name="writer-B", daemon=True)
        self._b_thread.start()
        if not self._b_stopped.wait(self.timeout):
            raise RuntimeError("B stalled")

    def run(self, a: Callable[[], object], b: Callable[[], object]) -> None:
        self._b = b
        self._a_ident = threading.get_ident()
        try:
            a()
        except BaseException as e:
            self.errors["A"] = e
        finally:
            self._a_ident = None  # the test's own checks are not scheduled
        if self._b_thread is None:  # A ended first: B runs alone
            self._b_may_pause = False
            self._start_b()
        self._b_resume.set()
        assert self._b_thread is not None
        self._b_thread.join(self.timeout)
        if self._b_thread.is_alive():
            raise RuntimeError("B did not finish")


def at_step(n: int) -> Callable[[int, str], bool]:
    """A pause condition: after ``n`` operations."""
    return lambda steps, _label: steps == n


def nth_label(predicate: Callable[[str], bool], nth: int = 1) -> Callable[[int, str], bool]:
    """A pause condition: the ``nth`` point whose label satisfies ``predicate``."""
    seen = 0

    def check(_steps: int, label: str) -> bool:
        nonlocal seen
        if not predicate(label):
            return False
        seen += 1
        return seen == nth

    return check


class SteppedStore:
    """A journal store whose writes and listings are scheduling points."""

    def __init__(self, inner: JournalStore, point: Callable[[str], None]) -> None:
        self.inner = inner
        self.point = point

    def create(self, name: str, data: bytes) -> None:
        self.point(f"create {name}")
        self.inner.create(name, data)

    def read(self, name: str) -> bytes | None:
        return self.inner.read(name)  # entries are immutable once created

    def list(self, prefix: str) -> list[str]:
        self.point(f"list {prefix}")
        return self.inner.list(prefix)

    def delete(self, name: str) -> None:
        self.point(f"delete {name}")
        self.inner.delete(name)


@pytest.fixture
def fast_journal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """For hundreds of interleavings: a journal root on tmpfs when there is one (file
    creation on a disk filesystem costs ~10x more), no fsync (durability is not what they
    test), and a deterministic clock that moves forward 1 ms per minted instant."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    ticks = itertools.count()
    base = datetime(2030, 1, 1, tzinfo=UTC)
    lock = threading.Lock()

    def mint_time(after: str | None, now: datetime | None = None) -> str:
        with lock:
            tick = next(ticks)
        return next_instant_time(after, now or base + timedelta(milliseconds=tick))

    monkeypatch.setattr(journal_module, "next_instant_time", mint_time)
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        root = Path(tempfile.mkdtemp(prefix="commit-protocol-", dir=shm))
        try:
            yield root
        finally:
            shutil.rmtree(root, ignore_errors=True)
    else:
        yield tmp_path


class TwoWriters:
    """Writer A (epoch 1, a zombie: nothing tells it to stop but fencing) runs batch
    ``first``; writer B takes over with a new epoch (acquire_epoch + fence) and runs its
    first batch: after a driver failover Spark replays A's batch (same checkpoint), with a
    lost checkpoint B's query starts from the table's offsets (new query id,
    startingOffsets=table). With ``table_exists`` A committed batch 0 before; otherwise
    A's commit creates the table. The checks then let B's pipeline run on to ``E[final]``
    unscheduled, after a restart that recovers what the zombie left behind."""

    def __init__(
        self,
        root: Path,
        sched: TwoStep,
        *,
        b_incarnation: str,
        dead_letters: bool = False,
        table_exists: bool = True,
        files_per_partition: int = 1,
    ) -> None:
        self.root = root
        self.sched = sched
        self.kafka = make_kafka(dead_letters)
        self.main = MemTable("main", exists=table_exists)
        self.dl = MemTable("dead_letter", exists=table_exists)
        for t in (self.main, self.dl):
            t.point = sched.point
        self.wa = FakeWorkers(self.kafka, self.main, self.dl, files_per_partition)
        self.wb = FakeWorkers(self.kafka, self.main, self.dl, files_per_partition)
        self.b_incarnation = b_incarnation
        self.a = Coordinator(PIPE, CommitTables(self.main, self.dl), timeline=self.timeline())
        self.a.acquire_epoch(owner="A")
        self.first = 0
        if table_exists:
            self._batch(self.a, self.wa, X, 0)
            self.first = 1
        self.final = self.first + 1 if b_incarnation == X else 3
        self.b: Coordinator | None = None

    def timeline(self) -> InstantTimeline:
        store = LocalJournalStore(str(self.root / "journal"))
        return InstantTimeline(SteppedStore(store, self.sched.point))

    @staticmethod
    def _batch(c: Coordinator, w: FakeWorkers, inc: str, k: int) -> BatchOutcome:
        start = E[k - 1] if k else None
        return c.run_batch(inc, k, start, E[k], w.for_batch(start, E[k]))

    def actor_a(self) -> None:
        self._batch(self.a, self.wa, X, self.first)

    def actor_b(self) -> None:
        self.b = b = Coordinator(PIPE, CommitTables(self.main, self.dl), timeline=self.timeline())
        b.acquire_epoch(owner="B")
        if self.b_incarnation == X:  # driver failover: same checkpoint, Spark replays
            self._batch(b, self.wb, X, self.first)
        else:  # checkpoint lost: new query from the table's offsets (startingOffsets=table)
            s0 = self.main.committed_offsets(PIPE)
            b.run_batch(Y, 0, None, E[2], self.wb.for_batch(s0, E[2]))

    def rest_of_b(self) -> None:
        """B's pipeline goes on (unscheduled) to ``E[final]``."""
        assert self.b is not None
        if self.b_incarnation == X:
            self._batch(self.b, self.wb, X, self.final)
        else:
            self.b.run_batch(Y, 1, E[2], E[3], self.wb.for_batch(E[2], E[3]))

    def run(self) -> TwoWriters:
        self.sched.run(self.actor_a, self.actor_b)
        return self

    def violations(self) -> list[str]:
        """What is wrong with the final state (empty: all invariants hold)."""
        out: list[str] = []
        end = E[self.final]
        if "B" in self.sched.errors:
            return [f"B (the owner) failed: {self.sched.errors['B']!r}"]
        self.rest_of_b()
        a_err = self.sched.errors.get("A")
        if a_err is not None and not isinstance(a_err, FencedError):
            out.append(f"A failed with something else than FencedError: {a_err!r}")
        for t in (self.main, self.dl):
            if t.dangling():
                out.append(f"{t.name} references deleted files {t.dangling()}")
        if out:
            return out
        for t, want in ((self.main, self.kafka.good(end)), (self.dl, self.kafka.dead(end))):
            rows = t.rows()
            dups = sorted(r for r, n in Counter(rows).items() if n > 1)
            if dups:
                out.append(f"{t.name}: records committed twice {dups[:5]}")
            missing = sorted(set(want) - set(rows))
            if missing:
                out.append(f"{t.name}: records missing {missing[:5]}")
        for t in (self.main, self.dl):  # nothing of epoch 1 after anything of epoch 2
            epochs = [s.checkpoint.epoch for s in t.snapshots]
            if 2 in epochs and 1 in epochs[epochs.index(2) :]:
                out.append(f"{t.name}: a zombie commit after the takeover ({epochs})")
        if self.main.committed_offsets(PIPE) != end:
            out.append(f"committed offsets {self.main.committed_offsets(PIPE)} != {end}")
        referenced = set(self.main.referenced()) | set(self.dl.referenced())
        b_files = self.wb.written_by(c.write_id for c in self.wb.calls)
        if b_files - referenced:
            out.append(f"B's staged files not committed: {sorted(b_files - referenced)}")
        # the zombie's next batch is refused before it writes anything
        calls = len(self.wa.calls)
        try:
            self._batch(self.a, self.wa, X, 3)
            out.append("the zombie's next batch was not fenced")
        except FencedError:
            if len(self.wa.calls) != calls:
                out.append("the zombie's next batch ran its workers")
        # a later restart recovers whatever the zombie left pending
        c = Coordinator(PIPE, CommitTables(self.main, self.dl), timeline=self.timeline())
        c.acquire_epoch(owner="C")
        inc, k = (X, self.final) if self.b_incarnation == X else (Y, 1)
        start = E[self.final - 1]
        r = c.run_batch(inc, k, start, end, self.wb.for_batch(start, end))
        if r.outcome != "replay_skipped":
            out.append(f"restart replay: {r.outcome}")
        if self.timeline().pending():
            out.append("instants still pending after a restart")
        a_files = self.wa.written_by(c.write_id for c in self.wa.calls)
        stray = set(self.main.orphans() + self.dl.orphans()) - a_files
        if stray:
            out.append(f"orphan files not written by the zombie: {sorted(stray)}")
        return out

    def leaked(self) -> int:
        """Zombie files nobody will delete (staged after its instant was rolled back)."""
        return len(self.main.orphans()) + len(self.dl.orphans())


def two_step_schedules(
    make: Callable[[Path, TwoStep], TwoWriters], root: Path
) -> Iterator[tuple[int, int, TwoWriters]]:
    """Every ``A^i B^j A* B*``: B takes over after A's i-th operation and makes j
    operations of progress (acquire_epoch with its fences, recovery, its batches), then A
    runs on (fenced or not) and B completes. i runs until A ends before B's turn; j until
    B ends within its turn."""
    n = 0
    for i in itertools.count():
        for j in itertools.count(1):
            sched = TwoStep(at_step(i), at_step(j))
            n += 1
            w = make(root / f"s{n}", sched).run()
            yield i, j, w
            if not sched.switched or sched.b_finished_in_turn:
                break
        if not sched.switched:
            return


@pytest.mark.parametrize(
    ("b_incarnation", "dead_letters"),
    [(X, True), (Y, True)],
    ids=["failover", "lost-checkpoint"],
)
def test_every_interleaving_of_a_zombie_and_the_new_owner(
    fast_journal: Path, b_incarnation: str, dead_letters: bool
) -> None:
    """No record twice or lost, no dangling file, the zombie's commits after the takeover
    refused (also when it loaded the head before the fence), the owner never fenced."""

    def make(root: Path, sched: TwoStep) -> TwoWriters:
        return TwoWriters(root, sched, b_incarnation=b_incarnation, dead_letters=dead_letters)

    bad: list[str] = []
    schedules = fenced = leaks = 0
    for i, j, w in two_step_schedules(make, fast_journal):
        schedules += 1
        fenced += isinstance(w.sched.errors.get("A"), FencedError)
        problems = w.violations()
        leaks += w.leaked() > 0
        if problems:
            bad.append(f"A^{i} B^{j}: {problems[0]} -- {w.sched.trace}")
    assert schedules > 100 and fenced > 0
    assert bad == [], f"{len(bad)}/{schedules} interleavings broke an invariant: {bad[:2]}"


def test_zombie_dead_letter_commit_before_the_takeover_survives_recovery(
    fast_journal: Path,
) -> None:
    """A committed the dead letters of its batch; B takes over (fences) with a new query
    (lost checkpoint). Rolling A's instant back would delete files the dead-letter table
    references, so B's recovery finishes it (main files at B's epoch); A's own main commit
    then finds the batch committed and appends nothing. Nothing lost, nothing twice."""
    sched = TwoStep(nth_label(lambda label: label == "commit-load", 2), lambda _, __: False)
    w = TwoWriters(fast_journal, sched, b_incarnation=Y, dead_letters=True).run()
    assert [s.checkpoint.epoch for s in w.dl.snapshots][:4] == [1, 1, 1, 2]
    assert w.violations() == []


def test_zombie_first_commit_after_takeover_on_a_table_not_yet_created(fast_journal: Path) -> None:
    # A: REQUESTED written, one file staged, about to stage the next.
    # B: acquire_epoch: an earlier run is on record, so the fence creates the missing table
    #    (empty, at B's epoch); recovery rolls A's instant back, deleting the staged file.
    # A: stages the rest, precommits, tries to create the table with its first commit:
    #    the table exists, its retry sees epoch 2 and A is fenced.
    sched = TwoStep(
        nth_label(lambda label: label == "stage", 2),
        nth_label(lambda label: label.endswith(".requested")),
    )
    w = TwoWriters(
        fast_journal, sched, b_incarnation=X, table_exists=False, files_per_partition=2
    ).run()
    assert isinstance(sched.errors.get("A"), FencedError)
    assert w.main.snapshots[0].checkpoint.epoch == 2  # the fence created the table
    assert w.violations() == []
