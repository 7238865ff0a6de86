"""Bounded history rules (pipeline.commit.history), format-neutral."""

from __future__ import annotations

import json

from pipeline.commit.history import (
    DATA_LOSS_BEFORE_KEY,
    PIPELINE_ID_KEY,
    RANGES_BEFORE_KEY,
    RANGES_KEY,
    carry_forward,
    forgettable,
    parse_intervals,
)
from pipeline.commit.offsets import TopicPartition

TP = TopicPartition("t", 0)


def commit(pipeline: str, start: int, end: int, before: str | None = None) -> dict[str, str]:
    s = {PIPELINE_ID_KEY: pipeline, RANGES_KEY: json.dumps({"t": {"0": [start, end]}})}
    if before is not None:
        s[RANGES_BEFORE_KEY] = before
        s[DATA_LOSS_BEFORE_KEY] = "{}"
    return s


def test_carry_forward_takes_one_step_from_the_previous_carrier() -> None:
    newest_first = [
        commit("other", 0, 100, "{}"),
        commit("p", 20, 30, '{"t":{"0":[[0,10]]}}'),  # 10..20 was lost from history: a gap
        commit("p", 0, 5),  # older: not read, the carrier above ends the walk
    ]
    out = carry_forward(newest_first, "p")
    assert parse_intervals(out[RANGES_BEFORE_KEY], RANGES_BEFORE_KEY) == {TP: [(0, 10), (20, 30)]}
    assert out[DATA_LOSS_BEFORE_KEY] == "{}"


def test_carry_forward_folds_old_commits_without_the_keys() -> None:
    out = carry_forward([commit("p", 5, 9), commit("p", 0, 5)], "p")
    assert parse_intervals(out[RANGES_BEFORE_KEY], RANGES_BEFORE_KEY) == {TP: [(0, 9)]}
    assert carry_forward([], "p")[RANGES_BEFORE_KEY] == "{}"


def test_forgettable_keeps_the_newest_and_every_pipelines_carrier() -> None:
    commits = [(str(i), commit("p", i, i + 1, "{}")) for i in range(12, 0, -1)]  # newest first
    assert forgettable(commits, 10) == ["2", "1"]
    assert forgettable(commits, 12) == []
    # a pipeline whose only commits are old: its last checkpoint would vanish
    lonely = [*commits[:10], ("x", commit("q", 0, 1, "{}")), *commits[10:]]
    assert forgettable(lonely, 10) == []
    # the oldest retained commit predates the keys: its history is not carried yet
    legacy = [*commits[:9], ("9", commit("p", 9, 10)), *commits[10:]]
    assert forgettable(legacy, 10) == []
    # foreign commits (no pipeline id) go with the rest
    foreign = [*commits[:10], ("f", {"note": "compaction"})]
    assert forgettable(foreign, 10) == ["f"]
