"""Recovery's reads of a pending instant and its rollback (pipeline/commit/pending.py), on
one main table and a dead-letter table: which instants are partly committed, which are
intact, and what a rollback deletes, keeps, aborts and records (docs/design.md
invariant 4: a rollback never deletes a file a table references)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
from support.memtable import MemTable

from pipeline.commit.checkpoint import CommitCheckpoint
from pipeline.commit.faults import FaultInjected, FaultPoint, FaultPoints
from pipeline.commit.instant import (
    BatchIdentity,
    Inflight,
    Instant,
    InstantState,
    Requested,
    StagedFile,
    staged_write_id,
)
from pipeline.commit.journal import InstantTimeline, decode_entry
from pipeline.commit.offsets import PartitionOffsets, TopicPartition
from pipeline.commit.pending import PendingInstants
from pipeline.commit.table_set import CommitTables
from pipeline.commit.types import DEAD_LETTER, MAIN
from pipeline.storage.local import LocalJournalStore

PIPE = "p1"
T0 = TopicPartition("t", 0)
BATCH = BatchIdentity(PIPE, "query-x", 3)
START, END = PartitionOffsets({T0: 20}), PartitionOffsets({T0: 30})
TIME = "20300101000000000"
WRITE_ID = staged_write_id(PIPE, TIME)

Event = tuple[str, ...]


class RecordingTable(MemTable):
    """A MemTable that logs the rollback's calls, in order, into a shared list."""

    def __init__(self, name: str, events: list[Event]) -> None:
        super().__init__(name)
        self.events = events

    def delete_files(self, paths: Iterable[str]) -> list[str]:
        paths = list(paths)
        self.events.append((self.name, "delete", *(p.rsplit("/", 1)[-1] for p in paths)))
        return super().delete_files(paths)

    def orphan_files(self, write_id: str) -> list[str]:
        self.events.append((self.name, "orphans", write_id))
        return super().orphan_files(write_id)

    def abort(self, instant: str) -> None:
        self.events.append((self.name, "abort", instant))
        super().abort(instant)


class RecordingFaults(FaultPoints):
    def __init__(self, spec: str, events: list[Event]) -> None:
        super().__init__(spec)
        self.events = events

    def hit(self, point: FaultPoint, batch_id: int | None = None) -> None:
        self.events.append(("fault", str(point), str(batch_id)))
        super().hit(point, batch_id)


class World:
    """One pipeline's tables and journal, and the pending instant ``TIME`` of ``BATCH``."""

    def __init__(self, root: Path, *, dead_letter: bool = True) -> None:
        self.events: list[Event] = []
        self.main = RecordingTable(MAIN, self.events)
        self.dl = RecordingTable(DEAD_LETTER, self.events)
        self.store = LocalJournalStore(str(root / "journal"))
        self.timeline = InstantTimeline(self.store)
        self.tables = CommitTables(self.main, self.dl if dead_letter else None)

    def pending(self, faults: str = "") -> PendingInstants:
        return PendingInstants(
            PIPE, self.tables, self.timeline, RecordingFaults(faults, self.events)
        )

    def stage(self, table: MemTable, n: int, write_id: str = WRITE_ID) -> list[StagedFile]:
        """``n`` files a worker staged into ``table`` for the instant."""
        out = []
        for i in range(n):
            path, size, records = table.describe(table.stage(write_id, [("t", 0, 20 + i)]))
            out.append(StagedFile(table.name, path, size, records, b""))
        return out

    def requested(self) -> Instant:
        self.timeline.request(Requested(TIME, BATCH, 1, START, END))
        return self.timeline.instant(TIME)

    def inflight(self, files: Iterable[StagedFile]) -> Instant:
        if self.store.read(f"instants/{TIME}.requested") is None:
            self.requested()
        files = tuple(files)
        self.timeline.precommit(
            Inflight(
                TIME,
                BATCH,
                1,
                files,
                {T0: (20, 30)},
                END,
                records=sum(f.records for f in files),
                end=END,
            )
        )
        return self.timeline.instant(TIME)

    def commit(
        self, table: MemTable, files: Iterable[StagedFile], end: PartitionOffsets = END
    ) -> None:
        """Commit ``BATCH`` (with planned end ``end``) to ``table``."""
        checkpoint = CommitCheckpoint(
            PIPE, BATCH.incarnation, BATCH.batch_id, 1, {T0: (20, 30)}, END, 10, batch_end=end
        )
        table.commit([_descriptor(table, f) for f in files], checkpoint)

    def rolled_back(self) -> list[str]:
        """The file list the journal's rollback marker records."""
        name = f"instants/{TIME}.rolled_back"
        data = self.store.read(name)
        assert data is not None, "no rollback recorded"
        return sorted(decode_entry(name, data)["deleted"])


def _descriptor(table: MemTable, f: StagedFile) -> bytes:
    return f'{{"path": "{f.path}", "size": {f.size}, "records": {f.records}}}'.encode()


def _names(files: Iterable[StagedFile]) -> tuple[str, ...]:
    return tuple(f.path.rsplit("/", 1)[-1] for f in files)


def _decided(world: World, inst: Instant) -> tuple[bool, bool]:
    """(partly committed, dead letters committed) as recovery reads ``inst``."""
    p = world.pending()
    return p.partly_committed(inst), p.dead_letters_committed(inst)


def _paths(files: Iterable[StagedFile]) -> list[str]:
    return sorted(f.path for f in files)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


# ---------------------------------------------------------------------------------------
# partly_committed, dead_letters_committed
# ---------------------------------------------------------------------------------------


def test_an_instant_no_table_holds_is_neither_partly_committed_nor_dead_letters(
    world: World,
) -> None:
    inst = world.inflight(world.stage(world.main, 2) + world.stage(world.dl, 1))
    assert _decided(world, inst) == (False, False)


def test_a_requested_instant_is_partly_committed_once_the_main_table_holds_its_batch(
    world: World,
) -> None:
    inst = world.requested()
    world.commit(world.main, world.stage(world.main, 1))
    assert _decided(world, inst) == (True, False)


def test_committed_dead_letters_make_an_instant_partly_committed(world: World) -> None:
    main_files, dl_files = world.stage(world.main, 2), world.stage(world.dl, 1)
    inst = world.inflight(main_files + dl_files)
    world.commit(world.dl, dl_files)
    assert _decided(world, inst) == (True, True)


def test_the_dead_letter_table_counts_only_when_the_precommit_lists_files_for_it(
    world: World,
) -> None:
    # the batch is in the dead-letter table, but this instant staged no dead letters
    # (a REQUESTED instant lists nothing; an INFLIGHT one only main files)
    world.commit(world.dl, world.stage(world.dl, 1))
    requested = world.requested()
    assert _decided(world, requested) == (False, False)
    inst = world.inflight(world.stage(world.main, 1))
    assert _decided(world, inst) == (False, False)


def test_a_batch_committed_with_another_planned_end_is_another_batch(world: World) -> None:
    # a checkpoint restored from a backup reuses batch ids for other ranges
    main_files, dl_files = world.stage(world.main, 1), world.stage(world.dl, 1)
    inst = world.inflight(main_files + dl_files)
    other_end = PartitionOffsets({T0: 25})
    world.commit(world.main, main_files, end=other_end)
    world.commit(world.dl, dl_files, end=other_end)
    assert _decided(world, inst) == (False, False)


def test_without_a_dead_letter_table_nothing_counts_as_committed_dead_letters(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, dead_letter=False)
    inst = world.inflight(world.stage(world.main, 1) + world.stage(world.dl, 1))
    assert _decided(world, inst) == (False, False)
    world.commit(world.main, [])
    assert _decided(world, inst) == (True, False)


def test_an_instant_without_a_batch_is_never_committed(world: World) -> None:
    world.commit(world.main, world.stage(world.main, 1))
    bare = Instant(TIME, InstantState.REQUESTED)
    assert bare.batch is None
    assert _decided(world, bare) == (False, False)


# ---------------------------------------------------------------------------------------
# intact
# ---------------------------------------------------------------------------------------


def test_an_inflight_instant_with_every_file_there_at_its_size_is_intact(world: World) -> None:
    inst = world.inflight(world.stage(world.main, 2) + world.stage(world.dl, 1))
    assert inst.state is InstantState.INFLIGHT
    assert world.pending().intact(inst)


def test_a_requested_instant_is_never_intact(world: World) -> None:
    world.stage(world.main, 1)
    assert not world.pending().intact(world.requested())


@pytest.mark.parametrize("damage", ["main-deleted", "main-resized", "dl-deleted", "dl-resized"])
def test_a_file_missing_or_resized_in_any_table_breaks_intact(world: World, damage: str) -> None:
    main_files, dl_files = world.stage(world.main, 2), world.stage(world.dl, 1)
    inst = world.inflight(main_files + dl_files)
    table, f = (world.main, main_files[1]) if damage.startswith("main") else (world.dl, dl_files[0])
    if damage.endswith("deleted"):
        table.delete_files([f.path])
    else:
        table.physical[f.path].size -= 1
    assert not world.pending().intact(inst)


def test_a_file_listed_for_a_table_the_set_lacks_breaks_intact(tmp_path: Path) -> None:
    world = World(tmp_path, dead_letter=False)
    inst = world.inflight(world.stage(world.main, 1) + world.stage(world.dl, 1))
    assert not world.pending().intact(inst)


def test_an_instant_that_lists_no_files_is_intact(world: World) -> None:
    assert world.pending().intact(world.inflight([]))


# ---------------------------------------------------------------------------------------
# roll_back
# ---------------------------------------------------------------------------------------


def test_rollback_deletes_listed_files_per_table_main_first_then_aborts_and_records(
    world: World,
) -> None:
    main_files, dl_files = world.stage(world.main, 3), world.stage(world.dl, 2)
    inst = world.inflight(main_files + dl_files)
    world.pending().roll_back(inst, 3)

    fault = ("fault", str(FaultPoint.DURING_ROLLBACK), "3")
    m, d = _names(main_files), _names(dl_files)
    assert world.events == [
        # the main table first (reverse commit order), its first file before the fault
        # point, the rest after it, then its orphans, then the format's own state
        (MAIN, "delete", m[0]),
        fault,
        (MAIN, "delete", *m[1:]),
        (MAIN, "orphans", WRITE_ID),
        (MAIN, "delete"),
        (MAIN, "abort", TIME),
        (DEAD_LETTER, "delete", d[0]),
        fault,
        (DEAD_LETTER, "delete", *d[1:]),
        (DEAD_LETTER, "orphans", WRITE_ID),
        (DEAD_LETTER, "delete"),
        (DEAD_LETTER, "abort", TIME),
    ]
    assert world.main.physical == {} and world.dl.physical == {}
    assert world.timeline.instant(TIME).state is InstantState.ROLLED_BACK
    assert world.rolled_back() == _paths(main_files + dl_files)


def test_rollback_deletes_orphans_of_the_instant_and_spares_other_files(world: World) -> None:
    """A crash before the precommit: the REQUESTED instant lists no file, the staged ones
    are found by their write id; files of another instant or pipeline stay."""
    orphans = world.stage(world.main, 2) + world.stage(world.dl, 1)
    other_instant = world.stage(world.main, 1, staged_write_id(PIPE, "20300101000000001"))
    other_pipeline = world.stage(world.dl, 1, staged_write_id("p2", TIME))
    inst = world.requested()
    world.pending().roll_back(inst, 3)

    assert set(world.main.physical) | set(world.dl.physical) == set(
        _paths(other_instant + other_pipeline)
    )
    assert world.rolled_back() == _paths(orphans)
    assert world.main.aborted == [TIME] and world.dl.aborted == [TIME]
    assert world.timeline.instant(TIME).state is InstantState.ROLLED_BACK


def test_rollback_deletes_listed_files_and_unlisted_orphans_of_the_instant(world: World) -> None:
    listed = world.stage(world.main, 2)
    inst = world.inflight(listed)
    late = world.stage(world.main, 1)  # a task attempt that finished after the precommit
    world.pending().roll_back(inst, 3)
    assert world.main.physical == {}
    assert world.rolled_back() == _paths(listed + late)


def test_rollback_records_only_the_files_it_deleted(world: World) -> None:
    main_files = world.stage(world.main, 3)
    inst = world.inflight(main_files)
    world.main.delete_files([main_files[0].path])  # gone already (an earlier rollback)
    world.pending().roll_back(inst, 3)
    assert world.rolled_back() == _paths(main_files[1:])


@pytest.mark.parametrize("committed", [DEAD_LETTER, MAIN])
def test_rollback_keeps_the_files_of_the_table_that_holds_the_batch(
    world: World, committed: str
) -> None:
    # invariant 4: that table references them (recovery finishes or repairs such an
    # instant; a rollback that reaches it anyway must not delete them)
    tables = {MAIN: world.main, DEAD_LETTER: world.dl}
    kept, undone = tables.pop(committed), next(iter(tables.values()))
    files = {MAIN: world.stage(world.main, 2), DEAD_LETTER: world.stage(world.dl, 2)}
    inst = world.inflight(files[MAIN] + files[DEAD_LETTER])
    world.commit(kept, files[committed])
    world.pending().roll_back(inst, 3)

    assert sorted(kept.physical) == _paths(files[committed]) and kept.dangling() == []
    assert kept.aborted == [] and not [e for e in world.events if e[0] == committed]
    assert undone.physical == {} and undone.aborted == [TIME]
    assert world.rolled_back() == _paths(files[undone.name])
    assert world.timeline.instant(TIME).state is InstantState.ROLLED_BACK


def test_rollback_without_a_dead_letter_table(tmp_path: Path) -> None:
    world = World(tmp_path, dead_letter=False)
    main_files = world.stage(world.main, 2)
    world.pending().roll_back(world.inflight(main_files), 3)
    assert world.main.physical == {} and world.main.aborted == [TIME]
    assert world.rolled_back() == _paths(main_files)
    assert not [e for e in world.events if e[0] == DEAD_LETTER]


def test_a_crash_during_rollback_leaves_the_rest_and_the_instant_pending(world: World) -> None:
    main_files, dl_files = world.stage(world.main, 3), world.stage(world.dl, 2)
    inst = world.inflight(main_files + dl_files)
    with pytest.raises(FaultInjected):
        world.pending("during-rollback:raise").roll_back(inst, 3)

    # the first main file is gone; the rest of it, the dead letters and the state stay
    assert sorted(world.main.physical) == _paths(main_files[1:])
    assert sorted(world.dl.physical) == _paths(dl_files)
    assert world.main.aborted == [] and world.dl.aborted == []
    assert [i.time for i in world.timeline.pending()] == [TIME]

    # the next recovery finishes it, recording what it deleted itself
    world.pending().roll_back(world.timeline.instant(TIME), 3)
    assert world.main.physical == {} and world.dl.physical == {}
    assert world.rolled_back() == _paths(main_files[1:] + dl_files)


def test_the_rollback_fault_point_is_armed_per_batch(world: World) -> None:
    main_files = world.stage(world.main, 2)
    inst = world.inflight(main_files)
    world.pending("during-rollback:raise@4").roll_back(inst, 3)  # another batch: no fault
    assert world.timeline.instant(TIME).state is InstantState.ROLLED_BACK
    assert world.rolled_back() == _paths(main_files)


# ---------------------------------------------------------------------------------------
# a set of two main tables (``both``: Iceberg, then Hudi)
# ---------------------------------------------------------------------------------------

SECOND = "second"


class TwoMains(World):
    """The world's tables plus a second main table, committed after the first."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.second = RecordingTable(SECOND, self.events)
        self.tables = CommitTables(self.main, self.dl, more_mains=[(SECOND, self.second)])


def test_a_batch_only_the_second_main_table_holds_is_partly_committed(tmp_path: Path) -> None:
    world = TwoMains(tmp_path)
    second_files = world.stage(world.second, 1)
    inst = world.inflight(world.stage(world.main, 1) + second_files)
    assert not world.pending().partly_committed(inst)
    world.commit(world.second, second_files)
    assert _decided(world, inst) == (True, False)


def test_rollback_keeps_the_main_table_that_holds_the_batch_and_undoes_the_other(
    tmp_path: Path,
) -> None:
    world = TwoMains(tmp_path)
    main_files, second_files = world.stage(world.main, 2), world.stage(world.second, 2)
    dl_files = world.stage(world.dl, 1)
    inst = world.inflight(main_files + second_files + dl_files)
    world.commit(world.main, main_files)
    world.pending().roll_back(inst, 3)

    assert sorted(world.main.physical) == _paths(main_files) and world.main.aborted == []
    assert world.second.physical == {} and world.second.aborted == [TIME]
    assert world.dl.physical == {} and world.dl.aborted == [TIME]
    assert world.rolled_back() == sorted(_paths(second_files) + _paths(dl_files))
    # reverse commit order: the second main table, then dead letters
    assert [e[0] for e in world.events if e[1] == "abort"] == [SECOND, DEAD_LETTER]


def test_rollback_after_a_repair_keeps_dead_letters_and_undoes_every_main_table(
    tmp_path: Path,
) -> None:
    """Dead letters committed, main files lost: the repair commits the main rows under
    another instant, so this instant's state goes from every main table, even one that
    holds the batch by then."""
    world = TwoMains(tmp_path)
    main_files, second_files = world.stage(world.main, 1), world.stage(world.second, 1)
    dl_files = world.stage(world.dl, 1)
    inst = world.inflight(main_files + second_files + dl_files)
    world.commit(world.dl, dl_files)
    repaired = world.stage(world.main, 1, write_id="20300101000000001-repair")
    world.commit(world.main, repaired)  # the repair's own files
    world.pending().roll_back(inst, 3)

    assert sorted(world.dl.physical) == _paths(dl_files) and world.dl.aborted == []
    assert sorted(world.main.physical) == _paths(repaired)
    assert (world.main.aborted, world.second.aborted) == ([TIME], [TIME])
    assert world.second.physical == {}
    assert world.rolled_back() == sorted(_paths(main_files) + _paths(second_files))
