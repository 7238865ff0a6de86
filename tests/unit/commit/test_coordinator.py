"""The coordinator's two-phase instant commit, Spark-free (pipeline/commit/coordinator.py):
the happy path against an in-memory table (``support.memtable``) and the real
``LocalJournalStore`` on real files (docs/design.md invariants 3-7).
"""

from __future__ import annotations

from support.commit_env import (
    PIPE,
    T0,
    T1,
    E,
    Env,
    X,
    assert_exactly_once,
    assert_sizes,
    batch_keys,
)

from pipeline.commit.instant import (
    BatchIdentity,
    InstantState,
)

# ---------------------------------------------------------------------------------------
# Happy path
# ---------------------------------------------------------------------------------------


def test_happy_path_commits_each_batch_once_and_purges_the_journal(env: Env) -> None:
    c = env.driver()
    assert c.epoch == 1
    for k in range(4):
        out = env.batch(c, k)
        assert out.outcome == "committed" and out.recovered == []
        first = {T0: 0, T1: 0}
        assert out.ranges == {tp: ((E[k - 1] if k else first)[tp], E[k][tp]) for tp in E[k]}
        assert out.committed == E[k]
        assert env.main.committed_offsets(PIPE) == E[k]
        in_range = [
            r for r in env.kafka.records(E[k]) if k == 0 or r not in env.kafka.records(E[k - 1])
        ]
        assert out.records + out.dead_letter_records == len(in_range)
        assert out.overlap_dropped == 0
        # the commit references exactly the files this batch's workers staged
        assert env.main.snapshots[-1].files == tuple(
            f for f in env.workers.calls[-1].files if f.startswith("mem://main/")
        )
        assert_sizes(env, out, env.workers.calls[-1].files)
        assert (out.data_loss, out.epoch) == ({}, 1)
    assert batch_keys(env.main) == [(X, k) for k in range(4)]
    assert all(cp.epoch == 1 for cp in env.main.commits())
    assert all(cp.batch_end == E[cp.batch_id] for cp in env.main.commits())
    tl = env.timeline()
    instants = tl.instants()
    assert [i.state for i in instants] == [InstantState.COMPLETED] * 4
    assert [i.time for i in instants] == sorted({i.time for i in instants})  # strictly increasing
    assert [i.batch for i in instants] == [BatchIdentity(PIPE, X, k) for k in range(4)]

    # Spark replays the last batch (its commit log lagged): skipped, workers not run
    calls = len(env.workers.calls)
    assert env.batch(c, 3).outcome == "replay_skipped"
    assert len(env.workers.calls) == calls

    # purge keeps the newest finished instants; the protocol carries on
    newest = instants[-1].time
    assert tl.purge_finished(keep=2) == 2
    assert [i.time for i in tl.instants()] == [i.time for i in instants[2:]]
    assert not env.instant_file(instants[0].time, "requested").exists()
    assert not env.instant_file(instants[0].time, "completed").exists()
    out = env.batch(c, 4)
    assert out.outcome == "committed" and out.instant is not None and out.instant > newest
    assert tl.purge_finished(keep=0) == 3
    assert tl.instants() == []
    assert_exactly_once(env, E[4])
