"""Golden test of the checkpoint codec: the ``ingest.*`` commit-summary keys and values,
byte for byte. Tables written by earlier versions must stay readable and tables written
now must stay readable by the verifier and by older readers: any change here is a format
change (docs/design.md invariant 2)."""

from __future__ import annotations

import json

import pytest

from pipeline.commit.checkpoint import CommitCheckpoint
from pipeline.commit.offsets import TopicPartition
from pipeline.errors import CommitError

A2, A10, B1 = TopicPartition("a", 2), TopicPartition("a", 10), TopicPartition("b", 1)

FULL = CommitCheckpoint(
    pipeline_id="orders",
    incarnation="run-7f3a",
    batch_id=42,
    epoch=3,
    ranges={B1: (100, 250), A2: (5, 17), A10: (0, 3)},
    committed_offsets={A2: 17, A10: 3, B1: 250},
    records=158,
    data_loss={B1: (90, 100)},
    dead_letter_records=4,
    instant="20261123230816123",
    batch_end={A2: 17, A10: 3, B1: 250},
)

FULL_SUMMARY = {
    "ingest.pipeline-id": "orders",
    "ingest.incarnation": "run-7f3a",
    "ingest.batch-id": "42",
    "ingest.epoch": "3",
    "ingest.ranges": '{"a":{"10":[0,3],"2":[5,17]},"b":{"1":[100,250]}}',
    "ingest.committed-offsets": '{"a":{"10":3,"2":17},"b":{"1":250}}',
    "ingest.records": "158",
    "ingest.data-loss": '{"b":{"1":[90,100]}}',
    "ingest.dead-letter-records": "4",
    "ingest.instant": "20261123230816123",
    "ingest.batch-end": '{"a":{"10":3,"2":17},"b":{"1":250}}',
}

FULL_JSON = (
    '{"ingest.pipeline-id": "orders", "ingest.incarnation": "run-7f3a", '
    '"ingest.batch-id": "42", "ingest.epoch": "3", '
    '"ingest.ranges": "{\\"a\\":{\\"10\\":[0,3],\\"2\\":[5,17]},\\"b\\":{\\"1\\":[100,250]}}", '
    '"ingest.committed-offsets": "{\\"a\\":{\\"10\\":3,\\"2\\":17},\\"b\\":{\\"1\\":250}}", '
    '"ingest.records": "158", "ingest.data-loss": "{\\"b\\":{\\"1\\":[90,100]}}", '
    '"ingest.dead-letter-records": "4", "ingest.instant": "20261123230816123", '
    '"ingest.batch-end": "{\\"a\\":{\\"10\\":3,\\"2\\":17},\\"b\\":{\\"1\\":250}}"}'
)

PLAIN = CommitCheckpoint(
    pipeline_id="orders",
    incarnation="run-7f3a",
    batch_id=0,
    epoch=0,
    ranges={},
    committed_offsets={},
    records=0,
)

PLAIN_SUMMARY = {
    "ingest.pipeline-id": "orders",
    "ingest.incarnation": "run-7f3a",
    "ingest.batch-id": "0",
    "ingest.epoch": "0",
    "ingest.ranges": "{}",
    "ingest.committed-offsets": "{}",
    "ingest.records": "0",
}

PLAIN_JSON = (
    '{"ingest.pipeline-id": "orders", "ingest.incarnation": "run-7f3a", '
    '"ingest.batch-id": "0", "ingest.epoch": "0", "ingest.ranges": "{}", '
    '"ingest.committed-offsets": "{}", "ingest.records": "0"}'
)


def test_full_checkpoint_summary_is_pinned() -> None:
    summary = FULL.to_summary()
    assert summary == FULL_SUMMARY
    assert json.dumps(summary) == FULL_JSON  # key order and value bytes
    assert all(isinstance(v, str) for v in summary.values())


def test_plain_checkpoint_summary_is_pinned() -> None:
    summary = PLAIN.to_summary()
    assert summary == PLAIN_SUMMARY
    assert json.dumps(summary) == PLAIN_JSON


@pytest.mark.parametrize("checkpoint", [FULL, PLAIN], ids=["full", "plain"])
def test_round_trip(checkpoint: CommitCheckpoint) -> None:
    assert CommitCheckpoint.from_summary(checkpoint.to_summary()) == checkpoint


def test_decodes_the_pinned_summaries() -> None:
    assert CommitCheckpoint.from_summary(FULL_SUMMARY) == FULL
    assert CommitCheckpoint.from_summary(PLAIN_SUMMARY) == PLAIN
    # other summary properties (the format's own) are ignored
    assert CommitCheckpoint.from_summary({**FULL_SUMMARY, "operation": "append"}) == FULL


def test_summary_without_checkpoint() -> None:
    assert CommitCheckpoint.from_summary({}) is None
    assert CommitCheckpoint.from_summary({"operation": "append"}) is None


@pytest.mark.parametrize(
    "change",
    [
        {"ingest.ranges": "[1, 2]"},
        {"ingest.ranges": '{"a":{"2":[5]}}'},
        {"ingest.ranges": "not json"},
        {"ingest.committed-offsets": '{"a":{"x":1}}'},
        {"ingest.batch-id": "forty-two"},
        {"ingest.epoch": ""},
        {"ingest.records": "1.5"},
        {"ingest.data-loss": "[]"},
        {"ingest.batch-end": '{"a":[]}'},
    ],
)
def test_malformed_summary_raises_commit_error(change: dict[str, str]) -> None:
    with pytest.raises(CommitError, match="malformed checkpoint"):
        CommitCheckpoint.from_summary({**FULL_SUMMARY, **change})


@pytest.mark.parametrize(
    "key", ["ingest.incarnation", "ingest.batch-id", "ingest.epoch", "ingest.records"]
)
def test_missing_required_key_raises_commit_error(key: str) -> None:
    summary = {k: v for k, v in FULL_SUMMARY.items() if k != key}
    with pytest.raises(CommitError, match="malformed checkpoint"):
        CommitCheckpoint.from_summary(summary)
