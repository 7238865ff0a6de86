"""Throughput probe: pipeline (per decode engine / commit mode / cores) vs the raw ceiling.

Pre-produces ``--records`` generated events (≈270 B each) into a one-node Apache Kafka
(``lab.broker.KafkaCluster``: KRaft, its own JVM on loopback, sharing this
host's cores) or into ``--bootstrap`` (an external cluster), then runs, interleaved and
``--rounds`` times each (the machine is shared, so only ratios measured in the same
window mean anything):

* ``raw``: one process, one confluent-kafka consumer with explicit assignment, Arrow
  columns, zstd Parquet (the raw ceiling of docs/bench.md);
* every requested pipeline variant: ``python scripts/perf_probe.py --child cfg.yaml`` runs
  ``Pipeline.run`` available-now with ``maxRecordsPerTrigger = records / batches`` and
  prints one line per committed batch; steady-state records/s counts batches 2..n over the
  time between the first and the last batch commit (first batch = cold Python workers).

    .venv/bin/python scripts/perf_probe.py --records 640000 \
        --variant arrow:exactly-once:2 --variant spark:exactly-once:2 \
        --variant arrow:at-least-once:2 --variant arrow:exactly-once:1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
MARK = "PROBE-BATCH "


def _child(config_path: str) -> None:
    from pipeline.app import Pipeline
    from pipeline.config import load_config
    from pipeline.observe.base import OutcomeCallback

    pipeline = Pipeline(load_config(Path(config_path)))

    def on_batch(outcome: Any) -> None:
        line = {
            "t": time.time(),
            "batch": outcome.batch_id,
            "records": outcome.records,
            "timings": outcome.timings,
        }
        print(MARK + json.dumps(line), flush=True)

    pipeline.add_observer(OutcomeCallback(on_batch))
    pipeline.run()


def _raw_ceiling(bootstrap: str, topic: str, partitions: int, out_dir: Path) -> float:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from confluent_kafka import Consumer, TopicPartition

    from pipeline.kafka.client import consumer_config

    consumer = Consumer(consumer_config(bootstrap))
    consumer.list_topics(topic, timeout=10)
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p))[1] for p in range(partitions)
    }
    total = sum(ends.values())
    t0 = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    writer: pq.ParquetWriter | None = None
    keys: list[Any] = []
    vals: list[Any] = []
    offs: list[int] = []
    parts: list[int] = []
    while seen < total:
        for m in consumer.consume(10_000, timeout=0.5):
            off, part = m.offset(), m.partition()
            if m.error() or off is None or part is None:
                continue
            keys.append(m.key())
            vals.append(m.value())
            offs.append(off)
            parts.append(part)
            seen += 1
        if len(offs) >= 50_000 or (seen >= total and offs):
            t = pa.table(
                {
                    "key": pa.array(keys, pa.binary()),
                    "value": pa.array(vals, pa.binary()),
                    "partition": pa.array(parts, pa.int32()),
                    "offset": pa.array(offs, pa.int64()),
                }
            )
            if writer is None:
                writer = pq.ParquetWriter(out_dir / "raw.parquet", t.schema, compression="zstd")
            writer.write_table(t)
            keys, vals, offs, parts = [], [], [], []
    if writer is not None:
        writer.close()
    consumer.close()
    return total / (time.perf_counter() - t0)


def _pipeline(
    bootstrap: str, topic: str, records: int, batches: int, variant: str, work: Path
) -> dict[str, float]:
    from lab.generator import event_schema_fields

    engine, mode, cores = variant.split(":")
    work.mkdir(parents=True)
    cfg = {
        "id": f"probe-{work.name}",
        "source": {
            "bootstrapServers": bootstrap,
            "topics": [topic],
            "startingOffsets": "earliest",
            "maxRecordsPerTrigger": max(1, records // batches),
        },
        "decode": {"schema": event_schema_fields(), "engine": engine},
        "sink": {
            "catalog": {"warehouse": str(work / "warehouse")},
            "table": "db.events",
            "partitionBy": ["day(ts)"],
        },
        "commit": {"mode": mode},
        "checkpointLocation": str(work / "checkpoint"),
        "trigger": {"mode": "available-now"},
        "spark": {"master": f"local[{cores}]"},
        "metrics": {"enabled": False},
    }
    path = work / "pipeline.yaml"
    path.write_text(yaml.safe_dump(cfg))
    t0 = time.time()
    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=1800,
        check=False,
    )
    wall = time.time() - t0
    lines = [json.loads(x[len(MARK) :]) for x in proc.stdout.splitlines() if x.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{variant} failed (rc {proc.returncode}):\n{proc.stderr[-3000:]}")
    total = sum(x["records"] for x in lines)
    if total != records:
        raise SystemExit(f"{variant}: committed {total} records, expected {records}")
    steady = lines[1:]
    span = lines[-1]["t"] - lines[0]["t"]
    rate = sum(x["records"] for x in steady) / span if steady and span > 0 else float("nan")
    phases: dict[str, float] = {}
    for x in steady:
        for k, v in (x.get("timings") or {}).items():
            phases[k] = phases.get(k, 0.0) + v
    print(f"  {variant} phase seconds over batches 2..n: {phases}", flush=True)
    return {"steady": rate, "wall": wall, "batches": len(lines)}


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, partitions, -1, config={"retention.ms": "-1"})  # -1: its default RF
    admin.create_topics([new])[topic].result(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until every partition has a leader
        t = admin.list_topics(topic, timeout=10).topics.get(topic)
        parts = t.partitions if t is not None and t.error is None else {}
        if len(parts) == partitions and all(p.leader >= 0 for p in parts.values()):
            return
        time.sleep(0.2)
    raise SystemExit(f"topic {topic}: no leader for every partition after 30 s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--child")
    ap.add_argument("--records", type=int, default=640_000)
    ap.add_argument("--partitions", type=int, default=32)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--variant", action="append", help="engine:mode:cores")
    ap.add_argument("--no-raw", action="store_true")
    ap.add_argument("--bootstrap", help="external Kafka; default: a one-node KafkaCluster")
    args = ap.parse_args()
    if args.child:
        _child(args.child)
        return
    from lab.broker import KafkaCluster
    from lab.generator import GeneratorSpec, produce

    variants = args.variant or ["arrow:exactly-once:2", "spark:exactly-once:2"]
    broker = KafkaCluster(1).start() if args.bootstrap is None else None
    results: dict[str, list[float]] = {v: [] for v in variants}
    raw: list[float] = []
    with contextlib.ExitStack() as stack, tempfile.TemporaryDirectory(prefix="perf-probe-") as tmp:
        topic = f"probe-{uuid.uuid4().hex[:8]}"
        if broker is not None:
            stack.callback(broker.stop)
            broker.create_topic(topic, args.partitions, config={"retention.ms": "-1"})
            bootstrap = broker.bootstrap_servers
        else:
            bootstrap = args.bootstrap
            _create_topic(bootstrap, topic, args.partitions)
        produce(bootstrap, topic, GeneratorSpec(count=args.records), partitions=args.partitions)
        for r in range(args.rounds):
            if not args.no_raw:
                raw.append(_raw_ceiling(bootstrap, topic, args.partitions, Path(tmp)))
                print(f"round {r} raw ceiling: {raw[-1]:,.0f} msg/s", flush=True)
            for v in variants:
                out = _pipeline(
                    bootstrap,
                    topic,
                    args.records,
                    args.batches,
                    v,
                    Path(tmp) / f"{r}-{v.replace(':', '-')}",
                )
                results[v].append(out["steady"])
                print(
                    f"round {r} {v}: steady {out['steady']:,.0f} rec/s, "
                    f"{out['batches']:.0f} batches, wall {out['wall']:.1f}s",
                    flush=True,
                )
    print("\nmedians (records/s, ratio to raw ceiling):")
    base = statistics.median(raw) if raw else float("nan")
    if raw:
        print(f"  raw ceiling           {base:12,.0f}")
    for v, xs in results.items():
        m = statistics.median(xs)
        print(f"  {v:22s}{m:12,.0f}   {m / base:5.2f}x")


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    main()
