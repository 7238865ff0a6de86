"""The instant journal (pipeline/commit/journal.py) on real files: damaged entries are
"not written", temp files and foreign names ignored, entries create-once, instant-time
collisions between writers, minted instants after a journal from the future.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support.commit_env import (
    PIPE,
    E,
    Env,
    X,
    assert_exactly_once,
    rolled_back_paths,
)

from pipeline.commit import journal as journal_module
from pipeline.commit.faults import FaultInjected
from pipeline.commit.instant import (
    BatchIdentity,
    InstantState,
    Requested,
    next_instant_time,
)
from pipeline.commit.journal import (
    InstantTimeline,
    decode_entry,
    encode_entry,
)
from pipeline.commit.offsets import PartitionOffsets
from pipeline.storage.local import LocalJournalStore

# ---------------------------------------------------------------------------------------
# Damaged journal entries are "not written"
# ---------------------------------------------------------------------------------------


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(b"\x00\xff\xfe garbage \x13\x37" * 7)
    elif how == "bad-checksum":
        doc = json.loads(data)
        doc["payload"]["batch_id"] = doc["payload"]["batch_id"] + 1
        path.write_bytes(json.dumps(doc).encode())
    elif how == "not-an-object":
        body = json.dumps([1, 2], sort_keys=True, separators=(",", ":")).encode()
        path.write_bytes(
            json.dumps({"sha256": hashlib.sha256(body).hexdigest(), "payload": [1, 2]}).encode()
        )
    else:
        raise AssertionError(how)


@pytest.mark.parametrize("how", ["truncated", "empty", "garbage", "bad-checksum", "not-an-object"])
def test_damaged_inflight_is_not_a_precommit(env: Env, how: str) -> None:
    c1 = env.driver("after-precommit:raise@1")
    env.batch(c1, 0)
    with pytest.raises(FaultInjected):
        env.batch(c1, 1)
    inst = env.timeline().pending()[0]
    staged = set(env.workers.written_by([inst.time]))
    _damage(env.instant_file(inst.time, "inflight"), how)
    seen = env.timeline().instant(inst.time)
    assert seen.state is InstantState.REQUESTED and seen.inflight is None

    c2 = env.driver()
    calls = len(env.workers.calls)
    out = env.batch(c2, 1)
    assert out.outcome == "committed"
    assert out.recovered == [(inst.time, "rolled_back")]
    assert len(env.workers.calls) - calls == 1  # recomputed, not recommitted
    assert set(rolled_back_paths(env, inst.time)) == staged  # found by name
    env.batch(c2, 2)
    assert_exactly_once(env, E[2])


@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_damaged_requested_without_inflight_is_rolled_back(env: Env, how: str) -> None:
    c1 = env.driver("after-write:raise@1")
    env.batch(c1, 0)
    with pytest.raises(FaultInjected):
        env.batch(c1, 1)
    inst = env.timeline().pending()[0]
    _damage(env.instant_file(inst.time, "requested"), how)
    seen = env.timeline().instant(inst.time)
    assert seen.state is InstantState.REQUESTED and seen.batch is None
    c2 = env.driver()
    out = env.batch(c2, 1)
    assert out.recovered == [(inst.time, "rolled_back")]
    env.batch(c2, 2)
    assert_exactly_once(env, E[2])


def test_damaged_inflight_of_a_committed_batch_is_completed_not_rolled_back(env: Env) -> None:
    """The table commit happened; only the marker is missing and the precommit is damaged:
    the instant is identified by its REQUESTED entry and its files are left alone."""
    c1 = env.driver("after-commit:raise@1")
    env.batch(c1, 0)
    with pytest.raises(FaultInjected):
        env.batch(c1, 1)
    inst = env.timeline().pending()[0]
    _damage(env.instant_file(inst.time, "inflight"), "garbage")
    c2 = env.driver()
    out = env.batch(c2, 1)
    assert (out.outcome, out.recovered) == ("replay_skipped", [(inst.time, "completed")])
    env.batch(c2, 2)
    assert_exactly_once(env, E[2])


def test_journal_ignores_temp_files_and_foreign_names(env: Env) -> None:
    c1 = env.driver()
    env.batch(c1, 0)
    instants = env.journal_dir / "instants"
    (instants / ".tmp-deadbeef").write_bytes(b"half a crash")
    (instants / "20990101000000000.unknown").write_bytes(b"x")
    (instants / "notatime.requested").write_bytes(b"x")
    (env.journal_dir / "epochs" / "junk").write_bytes(b"x")
    tl = env.timeline()
    assert [i.state for i in tl.instants()] == [InstantState.COMPLETED]
    assert tl.pending() == []
    assert tl.epochs() == [1]
    c2 = env.driver()
    assert c2.epoch == 2
    env.batch(c2, 1)
    assert_exactly_once(env, E[1])


def test_journal_entries_are_create_once(tmp_path: Path) -> None:
    store = LocalJournalStore(str(tmp_path))
    store.create("instants/a.requested", encode_entry({"x": 1}))
    with pytest.raises(journal_module.AlreadyExists):
        store.create("instants/a.requested", encode_entry({"x": 2}))
    data = store.read("instants/a.requested")
    assert data is not None and decode_entry("a", data) == {"x": 1}
    assert store.list("instants") == ["instants/a.requested"]  # no temp file left behind


def test_instant_time_collision_between_writers_of_one_journal_fails_the_loser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writers minting in the same millisecond from the same listing: create-if-absent
    lets exactly one REQUESTED exist; the other batch fails (and Spark retries it)."""
    frozen = datetime(2030, 1, 1, tzinfo=UTC)
    monkeypatch.setattr(
        journal_module, "next_instant_time", lambda after: next_instant_time(after, frozen)
    )
    tl1 = InstantTimeline(LocalJournalStore(str(tmp_path)))
    tl2 = InstantTimeline(LocalJournalStore(str(tmp_path)))
    t1, t2 = tl1.mint(), tl2.mint()
    assert t1 == t2
    req = Requested(t1, BatchIdentity(PIPE, X, 0), 1, PartitionOffsets(), E[0])
    tl1.request(req)
    with pytest.raises(journal_module.AlreadyExists):
        tl2.request(req)
    assert tl2.mint() > t1


def test_minted_instants_stay_after_a_journal_from_the_future(env: Env) -> None:
    """The clock went back across a restart: instants still increase, and so do the
    batches' instants."""
    tl = env.timeline()
    future = "29990101000000000"
    tl.request(Requested(future, BatchIdentity(PIPE, "old", 7), 1, PartitionOffsets(), E[0]))
    tl.complete(future)
    assert tl.mint() == "29990101000000001"
    c = env.driver()
    out = env.batch(c, 0)
    assert out.instant == "29990101000000001"
    out = env.batch(c, 1)
    assert out.instant == "29990101000000002"
    assert_exactly_once(env, E[1])
