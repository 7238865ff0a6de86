"""Drives Hudi's Spark writer through pipeline.formats.hudi_spark (the client and the
committer) in one process (run with PySpark 3.5, the one line Hudi's Spark bundle is
served for).

    hudi_two_phase.py BASE JOURNAL write NAME FIRST COUNT   begin + write, no commit
    hudi_two_phase.py BASE JOURNAL commit NAME EPOCH        the committer commits NAME
    hudi_two_phase.py BASE JOURNAL empty NAME EPOCH         a batch that wrote nothing here
    hudi_two_phase.py BASE JOURNAL rollback NAME            the committer aborts NAME
    hudi_two_phase.py BASE JOURNAL fence EPOCH              the committer fences EPOCH
    hudi_two_phase.py BASE JOURNAL status                   what the committer reads back
    hudi_two_phase.py BASE JOURNAL read                     Hudi's snapshot query

Several steps may follow each other in one call (``write A 0 100 write B 100 50``). The
journal (JSON: name -> instant, batch id, offsets and the write's descriptors) stands for
the pipeline's. Every batch covers [FIRST, FIRST + COUNT) of partitions 0 and 1 of topic
``events``. The last line printed is a JSON document: the timeline, the refused commits,
and what ``status`` and ``read`` saw.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pipeline.commit.checkpoint import CommitCheckpoint
from pipeline.commit.instant import BatchIdentity, next_instant_time
from pipeline.commit.offsets import TopicPartition
from pipeline.errors import FencedError
from pipeline.formats.hudi.storage import open_location
from pipeline.formats.hudi_spark.client import (
    SESSION_SETTINGS,
    HudiSparkClient,
    jars,
    table_options,
)
from pipeline.formats.hudi_spark.committer import HudiSparkCommitter, descriptors
from pipeline.spark.session import build_spark

TOPIC, PIPELINE, INCARNATION = "events", "p1", "inc-1"
DDL = "topic string, partition int, offset long, value string, day string"
PARTS = (TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1))


def checkpoint(entry: dict, epoch: int) -> CommitCheckpoint:
    first, last = entry["first"], entry["last"]
    return CommitCheckpoint(
        pipeline_id=PIPELINE,
        incarnation=INCARNATION,
        batch_id=entry["batch"],
        epoch=epoch,
        ranges={tp: (first, last) for tp in PARTS},
        committed_offsets={tp: last for tp in PARTS},
        records=last - first,
        instant=entry["instant"],
        batch_end={tp: last for tp in PARTS},
    )


def main(argv: list[str]) -> int:
    base, journal_path, steps = argv[0], Path(argv[1]), argv[2:]
    journal = json.loads(journal_path.read_text()) if journal_path.exists() else {}
    spark = build_spark("hudi-two-phase", "local[2]", SESSION_SETTINGS, jars=jars())
    options = table_options("events", ["topic", "partition", "offset"], ["day"])
    client = HudiSparkClient(spark, base, options)
    empty = spark.createDataFrame([], DDL)
    committer = HudiSparkCommitter(
        client, open_location(base, {}), {}, lambda: client.schema_of(empty)
    )
    out: dict[str, object] = {"fenced": []}

    def add(name: str, first: int, count: int) -> dict:
        after = max((e["instant"] for e in journal.values()), default=None)
        entry = {
            "instant": next_instant_time(after),
            "batch": len(journal),
            "first": first,
            "last": first + count,
            "files": [],
        }
        journal[name] = entry
        return entry

    while steps:
        step = steps.pop(0)
        if step == "write":
            name, first, count = steps.pop(0), int(steps.pop(0)), int(steps.pop(0))
            entry = add(name, first, count)
            client.begin(entry["instant"])
            rows = [
                (TOPIC, o % 2, o, f"value-{o}", f"2026-11-{1 + o % 3:02d}")
                for o in range(first, first + count)
            ]
            written = client.write(spark.createDataFrame(rows, DDL), entry["instant"])
            entry["files"] = [d.decode() for d in descriptors(entry["instant"], written)]
        elif step == "empty":
            name, epoch = steps.pop(0), int(steps.pop(0))
            last = max((e["last"] for e in journal.values()), default=0)
            entry = add(name, last, 0)
            committer.commit([], checkpoint(entry, epoch))
        elif step == "commit":
            entry, epoch = journal[steps.pop(0)], int(steps.pop(0))
            try:
                committer.commit([f.encode() for f in entry["files"]], checkpoint(entry, epoch))
            except FencedError as e:
                out["fenced"].append(str(e))
        elif step == "rollback":
            committer.abort(journal[steps.pop(0)]["instant"])
        elif step == "fence":
            committer.fence(PIPELINE, int(steps.pop(0)))
        elif step == "status":
            out["committed"] = {
                name: committer.is_committed(BatchIdentity(PIPELINE, INCARNATION, e["batch"]))
                for name, e in journal.items()
            }
            offsets = committer.committed_offsets(PIPELINE) or {}
            out["offsets"] = {f"{t}/{p}": o for (t, p), o in offsets.items()}
            out["epoch"] = committer.latest_epoch(PIPELINE)
            out["sizes"] = {
                name: [committer.file_size(committer.describe(f.encode())[0]) for f in e["files"]]
                for name, e in journal.items()
            }
        elif step == "read":
            df = spark.read.format("hudi").load(base)
            cols = set(df.columns)
            out["read"] = (
                sorted(r["offset"] for r in df.select("offset").collect())
                if "offset" in cols
                else []
            )
        else:
            raise SystemExit(f"unknown step {step!r}")
        journal_path.write_text(json.dumps(journal))
    out["timeline"] = client.timeline()
    print(json.dumps(out))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
