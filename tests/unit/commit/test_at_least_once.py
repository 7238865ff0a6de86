"""The at-least-once baseline (pipeline/commit/at_least_once.py): appends without
journal or fencing.
"""

from __future__ import annotations

from support.commit_env import (
    PIPE,
    E,
    Env,
    Y,
    assert_sizes,
)

from pipeline.commit.at_least_once import AtLeastOnceCoordinator
from pipeline.commit.coordinator import Coordinator, make_coordinator
from pipeline.commit.table_set import CommitTables

# ---------------------------------------------------------------------------------------
# At-least-once baseline and instant times
# ---------------------------------------------------------------------------------------


def test_at_least_once_mode_appends_without_journal_or_fencing(env: Env) -> None:
    c = make_coordinator(PIPE, CommitTables(env.main, env.dl), timeline=None)
    assert isinstance(c, AtLeastOnceCoordinator) and not c.exactly_once
    for k in range(3):
        out = env.batch(c, k)
        assert (out.outcome, out.instant) == ("committed", None)
        assert_sizes(env, out, env.workers.calls[-1].files)
        assert (out.data_loss, out.epoch) == ({}, None)
    assert not env.journal_dir.exists()
    assert all(cp.epoch == 0 for cp in env.main.commits())
    assert all(call.write_id.startswith("alo-") for call in env.workers.calls)
    assert all(len(call.drop_below) == 0 for call in env.workers.calls)
    assert env.main.rows() == env.kafka.good(E[2])
    assert env.main.committed_offsets(PIPE) == E[2]
    # a new checkpoint from earliest: plain appends, no self-correction -> duplicates
    env.run(c, Y, 0, None, E[2], earliest=True)
    assert env.main.rows() == sorted(env.kafka.good(E[2]) * 2)
    # with a journal: the exactly-once coordinator
    assert isinstance(
        make_coordinator(PIPE, CommitTables(env.main), timeline=env.timeline()), Coordinator
    )
