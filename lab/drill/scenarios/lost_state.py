"""State lost while the pipeline is stopped: the Spark checkpoint deleted
(``checkpoint-deleted``), offsets deleted by retention (``retention``)."""

from __future__ import annotations

import shutil

from lab.drill.rig import Rig
from lab.drill.scenarios.steps import (
    COMMIT_TIMEOUT_S,
    finish,
    first_commit,
    need_kafka,
)
from pipeline.commit.offsets import TopicPartition


def checkpoint_deleted(rig: Rig) -> None:
    """Stop, delete the Spark checkpoint, restart: resume from the table's offsets."""
    first_commit(rig)
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    assert rig.driver is not None
    rig.driver.stop()
    shutil.rmtree(rig.cfg.checkpoint_location, ignore_errors=True)
    rig.event("checkpoint-deleted", rig.cfg.checkpoint_location)
    rig.start_driver()
    rig.wait_commits(2, timeout=COMMIT_TIMEOUT_S)
    finish(rig)


def retention(rig: Rig) -> None:
    """Offsets deleted while the pipeline is stopped (the admin API's DeleteRecords on the
    drill's own cluster: the log start moves past them, as retention moves it):
    failOnDataLoss true stops with a clear error; false continues and records the loss in
    the commit metadata."""
    kafka = need_kafka(rig)
    first_commit(rig)
    assert rig.driver is not None
    # Stop when caught up: a driver stopped mid-batch leaves an instant whose staged files
    # the next run recommits, so records past the committed offsets would be in the table
    # already and their deletion no loss at all.
    rig.producer.pause()
    rig.wait_until(rig.caught_up, COMMIT_TIMEOUT_S, "for the pipeline to catch up")
    rig.driver.stop()
    rig.event("stop", "driver stopped")
    committed = rig.committed_offsets(fresh=True)
    rig.producer.resume()
    tp = TopicPartition(rig.topic, 0)
    start = committed.get(tp, 0)
    gap = 40
    rig.wait_until(lambda: rig.producer.ends().get(tp, 0) >= start + gap + 10, 60, "for new data")
    kafka.delete_records(rig.topic, 0, start + gap)  # DeleteRecords: the log start moves
    rig.event("retention", f"{tp} offsets [{start}, {start + gap}) deleted")
    d = rig.start_driver()
    rig.wait_until(
        lambda: not d.alive(), COMMIT_TIMEOUT_S, "for failOnDataLoss=true to stop the driver"
    )
    d.reap()
    msg = d.error_line()
    # either reader's one line: what was deleted, and the setting that skips it
    if d.poll() != 2 or "deleted" not in msg or "failOnDataLoss=false" not in msg:
        rig.result.problems.append(f"failOnDataLoss=true: exit {d.poll()}, message {msg!r}")
    else:
        rig.result.notes.append(f"failOnDataLoss=true: {msg[:200]}")
    rig.start_driver(sets=["source.failOnDataLoss=false"])
    rig.event("fail-on-data-loss", "restarted with source.failOnDataLoss=false")
    rig.wait_commits(1, timeout=COMMIT_TIMEOUT_S)
    rig.producer.stop()
    rig.wait_until(rig.caught_up, COMMIT_TIMEOUT_S, "draining")
    recorded = _recorded_data_loss(rig)
    deliberate = {tp: [(start, start + gap)]}
    if recorded != deliberate:
        rig.result.problems.append(
            f"ingest.data-loss recorded {_fmt(recorded)}, deleted on purpose {_fmt(deliberate)}"
        )
    else:
        rig.result.notes.append(f"ingest.data-loss recorded: {_fmt(recorded)}")
    if rig.driver is not None:
        rig.driver.stop()
    # lost = what the table says it skipped; anything else absent is missing
    rig.verify(recorded)


def _fmt(ranges: dict[TopicPartition, list[tuple[int, int]]]) -> str:
    return (
        ", ".join(f"{tp} [{s}, {e})" for tp, ivs in sorted(ranges.items()) for s, e in ivs)
        or "nothing"
    )


def _recorded_data_loss(rig: Rig) -> dict[TopicPartition, list[tuple[int, int]]]:
    """The ``ingest.data-loss`` ranges the table's commits recorded, merged per partition."""
    from pipeline.ops.verify import recorded_data_loss

    return recorded_data_loss(rig.cfg)
