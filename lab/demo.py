"""``ingest demo``: Apache Kafka + generated events → local Iceberg and Hudi, then a check.

Shows the whole product on one machine: a real Apache Kafka node (KRaft, its own JVM on
loopback, its log under the demo's directory), an idempotent producer writing at a steady
rate (with some malformed records), the pipeline committing one snapshot per batch, a live
progress display, and at the end the per-partition counts and the exactly-once verdict
computed from the tables themselves; then a second pipeline copies the topic into Hudi.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from pipeline.commit.offsets import TopicPartition
from pipeline.commit.types import BatchOutcome
from pipeline.errors import ConfigError
from pipeline.observe.base import OutcomeCallback
from pipeline.preflight import check_writable

if TYPE_CHECKING:
    from pipeline.app import Pipeline


def _decode(registry_url: str | None) -> dict[str, Any]:
    """JSON events with the generator's schema, or Avro ones whose schema the registry has."""
    from lab.events import event_schema_fields

    if registry_url is not None:
        return {"format": "avro", "registry": {"url": registry_url}}
    return {"format": "json", "schema": event_schema_fields()}


def demo_config(
    lake: Path, bootstrap: str, topic: str, registry_url: str | None = None, reader: str = "auto"
) -> dict:
    return {
        "id": "demo-events",
        "source": {"bootstrapServers": bootstrap, "topics": [topic], "reader": reader},
        "decode": _decode(registry_url),
        "sink": {
            "catalog": {"warehouse": str(lake / "warehouse")},
            "table": "demo.events",
            "partitionBy": ["day(ts)"],
        },
        "checkpointLocation": str(lake / "checkpoints" / "demo-events"),
        "trigger": {"mode": "processing-time", "interval": "2 seconds"},
        "spark": {"master": "local[2]"},
    }


def hudi_demo_config(
    lake: Path, bootstrap: str, topic: str, registry_url: str | None = None, reader: str = "auto"
) -> dict:
    return {
        "id": "demo-events-hudi",
        "source": {"bootstrapServers": bootstrap, "topics": [topic], "reader": reader},
        "decode": _decode(registry_url),
        "sink": {
            "format": "hudi",
            "table": "demo.events",
            "hudi": {"basePath": str(lake / "hudi" / "events"), "partitionFields": ["country"]},
        },
        "checkpointLocation": str(lake / "checkpoints" / "demo-events-hudi"),
        "trigger": {"mode": "available-now"},
        "metrics": {"enabled": False},
    }


DEMO_MARKER = ".ingest-demo"
#: everything the demo writes in its lake (kafka/: the broker's log, removed after a run
#: that passed its check)
DEMO_STATE = ("warehouse", "checkpoints", "hudi", "kafka", "registry")
#: Kafka nodes the demo starts: one starts in ~5 s; three (replication factor 3) add
#: ~15 s to start, ~8 s to stop and two more JVMs for no visible difference in the demo.
DEMO_BROKERS = 1


def claim_demo_lake(lake: Path) -> Path:
    """The demo's lake, made ready for a new run: a new directory (marked as the demo's),
    or one an earlier demo marked, whose demo state is cleared (its Kafka cluster is new
    each time, so old tables and checkpoints would not match). Any other directory is
    refused: it may hold a user's tables and checkpoints."""
    marker = lake / DEMO_MARKER
    if lake.exists() and not marker.is_file():
        if not lake.is_dir():
            raise ConfigError(f"--lake {lake}: is a file, not a directory")
        if any(lake.iterdir()):
            raise ConfigError(
                f"--lake {lake}: exists and was not created by `ingest demo` (no {DEMO_MARKER} "
                "marker); the demo does not write into directories it does not own — "
                "give --lake a new directory"
            )
    check_writable("--lake", str(lake))
    lake.mkdir(parents=True, exist_ok=True)
    marker.write_text(
        "created by `ingest demo`; it clears warehouse/, checkpoints/, hudi/, kafka/ here\n"
    )
    for name in DEMO_STATE:
        shutil.rmtree(lake / name, ignore_errors=True)  # the demo's own earlier state
    return lake


def _hudi_reader() -> str:
    try:
        import hudi  # noqa: F401

        return "hudi-rs"
    except ImportError:
        return "the commit metadata's file list (hudi-rs not installed)"


def _hudi_offsets(lake: Path) -> dict[TopicPartition, Any]:
    """(topic, partition) -> offsets in the Hudi main + dead-letter tables."""
    from pipeline.ops.verify import offsets_by_partition

    batches: list[pa.RecordBatch] = []
    for base in (lake / "hudi" / "events", lake / "hudi" / "events_dead_letter"):
        if not (base / ".hoodie").is_dir():
            continue
        try:
            import hudi

            batches += hudi.HudiTableBuilder.from_base_uri(str(base)).build().read()
        except ImportError:
            batches += _committed_base_files(base)
    cols = ["_kafka_topic", "_kafka_partition", "_kafka_offset"]
    return offsets_by_partition(b.select(cols) for b in batches)


def _committed_base_files(base: Path) -> list[pa.RecordBatch]:
    """Fallback reader: the files listed by completed commits (no hudi-rs in the image)."""
    import json

    import pyarrow.parquet as pq

    out: list[pa.RecordBatch] = []
    for commit in sorted((base / ".hoodie").glob("*.commit")):
        meta = json.loads(commit.read_text())
        for stats in meta.get("partitionToWriteStats", {}).values():
            for st in stats:
                out += pq.read_table(base / st["path"]).to_batches()
    return out


def _await_producer_ids(bootstrap: str) -> None:
    """Return once a new cluster hands out producer ids: the first idempotent producer
    would otherwise wait for the transaction coordinator to load and log a warning
    ("Coordinator load in progress") into the demo's output."""
    from confluent_kafka import Producer

    warm_up = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "ingest-demo-warm-up", "log_level": 2}
    )
    warm_up.init_transactions(60)


def run_demo(
    lake: Path,
    events: int,
    partitions: int,
    rate: float,
    malformed: float,
    timeout: float,
    console: Console,
    brokers: int = DEMO_BROKERS,
    value_format: str = "json",
    reader: str = "auto",
    tables: int = 1,
) -> bool:
    """``tables`` > 1: that many topics into as many Iceberg tables through one pipeline
    (lab/demo_tables.py), each table checked; the Hudi copy is left out."""
    from lab.broker import KAFKA_VERSION, KafkaCluster
    from lab.demo_tables import check_tables, demo_topics, print_checks, routed_sink
    from lab.generator import GeneratorSpec, ProduceResult, produce
    from pipeline.app import Pipeline
    from pipeline.config import parse_config

    os.environ.setdefault("INGEST_SPARK_LOG_LEVEL", "ERROR")
    lake = claim_demo_lake(lake.resolve())
    topics = demo_topics(tables)
    topic = topics[0]
    nodes = "1 node" if brokers == 1 else f"{brokers} nodes"
    console.print(f"starting Apache Kafka {KAFKA_VERSION} ({nodes}, KRaft) …")
    kafka_dir = lake / "kafka"
    ok = False
    with contextlib.ExitStack() as stack:
        broker = stack.enter_context(KafkaCluster(brokers, data_dir=kafka_dir))
        for t in topics:
            broker.create_topic(t, partitions)
        _await_producer_ids(broker.bootstrap_servers)
        named = f"topic {topic!r}" if tables == 1 else f"{tables} topics {', '.join(topics)}"
        console.print(
            f"[bold]Apache Kafka {KAFKA_VERSION}[/] at {broker.bootstrap_servers} ({nodes}, "
            f"log under {kafka_dir}), {named} with {partitions} partitions, "
            f"replication factor {broker.replication_factor}"
        )
        url, encode = (
            _avro_events(stack, lake, topic, console) if value_format == "avro" else (None, None)
        )
        doc = demo_config(lake, broker.bootstrap_servers, topic, url, reader)
        if tables > 1:
            doc["source"]["topics"] = topics
            doc["sink"] = routed_sink(doc["sink"], topics)
        cfg = parse_config(doc)
        pipeline = Pipeline(cfg)
        console.print(f"starting Spark (local[2]), source.reader {pipeline.source.reader.name} …")
        _ = pipeline.spark

        produced = {t: 0 for t in topics}
        result: dict[str, ProduceResult] = {}
        failure: list[BaseException] = []

        def producer(t: str, count: int) -> None:
            try:
                spec = GeneratorSpec(
                    count=count, rate=rate / len(topics), malformed_fraction=malformed
                )
                result[t] = produce(
                    broker.bootstrap_servers,
                    t,
                    spec,
                    on_progress=lambda n: produced.__setitem__(t, n),
                    encode=encode,
                )
            except BaseException as e:  # surfaced below
                failure.append(e)

        # the events shared out over the topics, each topic's producer at its share of the rate
        shares = [events // len(topics) + (i < events % len(topics)) for i in range(len(topics))]
        threads = [
            threading.Thread(target=producer, args=(t, n), name=f"demo-producer-{t}", daemon=True)
            for t, n in zip(topics, shares, strict=True)
            if n
        ]
        for thread in threads:
            thread.start()
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as progress:
            p_task = progress.add_task("produced ", total=events)
            c_task = progress.add_task("committed", total=events)

            def announce(outcome: BatchOutcome) -> None:
                progress.console.print(
                    f"batch {outcome.batch_id} {outcome.outcome}: {outcome.records} rows, "
                    f"{outcome.dead_letter_records} dead letters, {outcome.files} files, "
                    f"instant {outcome.instant} "
                    f"({sum(outcome.timings.values()):.2f}s write+commit)"
                )
                show_committed()

            def show_committed() -> None:
                s = pipeline.stats
                progress.update(
                    c_task,
                    completed=s.records + s.dead_letters,
                    description=f"committed (batch {s.batches}, {s.dead_letters} dead letters)",
                )

            pipeline.add_observer(OutcomeCallback(announce))  # the progress display

            def tick(stats: object) -> None:
                progress.update(p_task, completed=sum(produced.values()))  # producers' side
                show_committed()

            def done(stats: object) -> bool:
                s = pipeline.stats
                return bool(failure) or (
                    not any(t.is_alive() for t in threads) and s.records + s.dead_letters >= events
                )

            pipeline.run(until=done, tick=tick, timeout_s=timeout)
        if failure:
            raise failure[0]
        for thread in threads:
            thread.join()
        expected = {
            TopicPartition(t, p): range(first, last + 1)
            for r in result.values()
            for (t, p), (first, last) in r.offsets.items()
        }
        iceberg: Any = pipeline.tables  # the demo writes Iceberg tables: pyiceberg reads them
        if tables > 1:
            ok = print_checks(console, check_tables(iceberg, topics, expected), lake)
            console.print("(--tables: Iceberg only; the Hudi copy is not part of this demo)")
            pipeline.spark.stop()
        else:
            ok = _check_and_copy_to_hudi(
                console, pipeline, iceberg, expected, lake, broker.bootstrap_servers, topic,
                url, reader, timeout,
            )  # fmt: skip
    if ok:  # the broker's log is kept (until the next demo) only when the check failed
        shutil.rmtree(kafka_dir, ignore_errors=True)
    return ok


def _check_and_copy_to_hudi(
    console: Console,
    pipeline: Pipeline,
    iceberg: Any,
    expected: dict[TopicPartition, range],
    lake: Path,
    bootstrap: str,
    topic: str,
    url: str | None,
    reader: str,
    timeout: float,
) -> bool:
    """The one-table demo's check of its Iceberg table, then the same topic copied into
    a Hudi table by a second pipeline, and checked."""
    from pipeline.app import Pipeline
    from pipeline.config import parse_config
    from pipeline.ops.verify import compare, offsets_by_partition

    main = iceberg.main.table()
    dlq = iceberg.dead_letter.table() if iceberg.dead_letter else None
    present = offsets_by_partition(
        b
        for t in (main, dlq)
        if t is not None
        for b in t.scan(
            selected_fields=("_kafka_topic", "_kafka_partition", "_kafka_offset")
        ).to_arrow_batch_reader()
    )
    report = compare(present, expected)
    _print_summary(console, report, main, dlq, lake)

    # The same topic into a Hudi copy-on-write table: a second pipeline, same protocol.
    console.print("\n[bold]Hudi[/]: a second pipeline copies the topic into a Hudi table")
    hudi_doc = hudi_demo_config(lake, bootstrap, topic, url, reader)
    hudi_cfg = parse_config(hudi_doc)
    hudi_pipeline = Pipeline(hudi_cfg, pipeline.spark)
    hudi_pipeline.add_observer(
        OutcomeCallback(
            lambda o: console.print(
                f"hudi batch {o.batch_id} {o.outcome}: {o.records} rows, "
                f"{o.dead_letter_records} dead letters, instant {o.instant}"
            )
        )
    )
    hudi_pipeline.run(timeout_s=timeout)
    hudi_report = compare(_hudi_offsets(lake), expected)
    t = hudi_report.totals()
    verdict = "[bold green]EXACTLY ONCE[/]" if hudi_report.ok else "[bold red]MISMATCH[/]"
    console.print(
        f"{verdict} (Hudi, read with {_hudi_reader()}): {t.expected} produced, "
        f"{t.present} present, {t.missing} missing, {t.duplicated} duplicated — "
        f"{lake / 'hudi' / 'events'}"
    )
    pipeline.spark.stop()
    return report.ok and hudi_report.ok


def _avro_events(
    stack: contextlib.ExitStack, lake: Path, topic: str, console: Console
) -> tuple[str, Callable[[bytes, bool], bytes]]:
    """A Schema Registry for the demo (Apicurio, its own JVM, stopped with the demo) and the
    encoder of Avro events whose schema it holds."""
    from lab.avro_events import AvroEventEncoder
    from lab.registry import start_registry

    console.print("starting a Schema Registry (Apicurio Registry, Confluent API) …")
    registry = start_registry(lake / "registry")
    stack.callback(registry.close)
    encoder = AvroEventEncoder(registry.url, topic)
    console.print(
        f"[bold]Schema Registry[/] at {registry.url}: the events' Avro schema is id "
        f"{encoder.schema_id} under {topic}-value"
    )
    return registry.url, encoder.encode_value


def _print_summary(console: Console, report, main, dlq, lake: Path) -> None:  # type: ignore[no-untyped-def]
    table = RichTable(title="rows per partition (table + dead letters)")
    for col in ("partition", "produced", "in tables", "missing", "duplicated"):
        table.add_column(col, justify="right")
    for tp, c in report.partitions.items():
        table.add_row(str(tp), str(c.expected), str(c.present), str(c.missing), str(c.duplicated))
    console.print(table)
    snaps = main.snapshots() if main is not None else []
    console.print(
        f"Iceberg table demo.events: {len(snaps)} snapshots, "
        f"{main.scan().count() if main is not None else 0} rows; dead letters: "
        f"{dlq.scan().count() if dlq is not None else 0} rows"
    )
    last = snaps[-1].summary if snaps else None
    if last is not None:
        props = last.additional_properties
        committed = json.loads(props.get("ingest.committed-offsets", "{}"))
        ends = ", ".join(
            f"{topic}[{p}]→{end}" for topic, parts in committed.items() for p, end in parts.items()
        )
        console.print(
            f"last commit: batch {props.get('ingest.batch-id', '?')}, writer epoch "
            f"{props.get('ingest.epoch', '?')}, instant {props.get('ingest.instant', '-')}; "
            f"committed next offsets {ends or 'none'}",
            soft_wrap=True,
        )
    t = report.totals()
    verdict = "[bold green]EXACTLY ONCE[/]" if report.ok else "[bold red]MISMATCH[/]"
    console.print(
        f"{verdict}: {t.expected} produced, {t.present} present, {t.missing} missing, "
        f"{t.duplicated} duplicated — tables under {lake}"
    )
