"""Drives Hudi's Spark writer through pipeline.formats.hudi_spark.client in one process
(run with PySpark 3.5, the one line Hudi's Spark bundle is served for).

    hudi_two_phase.py BASE JOURNAL write NAME FIRST COUNT   begin + write, no commit
    hudi_two_phase.py BASE JOURNAL commit NAME              commit NAME from the journal
    hudi_two_phase.py BASE JOURNAL rollback NAME            Hudi's rollback of NAME
    hudi_two_phase.py BASE JOURNAL read                     Hudi's snapshot query

Several steps may follow each other in one call (``write A 0 100 write B 100 50``). The
journal (JSON: name -> instant and what its write returned) stands for the pipeline's. The
last line printed is a JSON document: the timeline, and the offsets a ``read`` saw.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pipeline.commit.instant import next_instant_time
from pipeline.formats.hudi_spark.client import (
    SESSION_SETTINGS,
    HudiSparkClient,
    Written,
    jars,
    table_options,
)
from pipeline.spark.session import build_spark

TOPIC = "events"


def main(argv: list[str]) -> int:
    base, journal_path, steps = argv[0], Path(argv[1]), argv[2:]
    journal = json.loads(journal_path.read_text()) if journal_path.exists() else {}
    spark = build_spark("hudi-two-phase", "local[2]", SESSION_SETTINGS, jars=jars())
    options = table_options("events", ["topic", "partition", "offset"], ["day"])
    client = HudiSparkClient(spark, base, options)
    out: dict[str, object] = {}
    while steps:
        step = steps.pop(0)
        if step == "write":
            name, first, count = steps.pop(0), int(steps.pop(0)), int(steps.pop(0))
            after = max((e["instant"] for e in journal.values()), default=None)
            instant = next_instant_time(after)
            client.begin(instant)
            rows = [
                (TOPIC, o % 2, o, f"value-{o}", f"2026-11-{1 + o % 3:02d}")
                for o in range(first, first + count)
            ]
            df = spark.createDataFrame(
                rows, "topic string, partition int, offset long, value string, day string"
            )
            written = client.write(df, instant)
            journal[name] = {
                "instant": instant,
                "written": written.as_json(),
                "last": first + count,
            }
            journal_path.write_text(json.dumps(journal))
        elif step == "commit":
            entry = journal[steps.pop(0)]
            checkpoint = json.dumps({TOPIC: {"next": entry["last"]}})
            client.commit(
                entry["instant"], Written.from_json(entry["written"]), {"ingest.test": checkpoint}
            )
        elif step == "rollback":
            out["rolled_back"] = client.rollback(journal[steps.pop(0)]["instant"])
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
    out["timeline"] = client.timeline()
    print(json.dumps(out))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
