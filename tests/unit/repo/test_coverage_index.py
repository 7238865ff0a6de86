"""Every module of the runtime is named by a test file.

A module ``pipeline/<path>/<module>.py`` has its unit tests in
``tests/unit/<path>/test_<module>.py``; a module without one -- an adapter over Spark, a
catalog, a broker or an object store, or a part only a running pipeline reaches -- is
listed in :data:`COVERED_ELSEWHERE` with the test file that covers it and why it has no
unit test of its own. A new module with neither fails here.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
IT = "tests/integration/"  # the prefix of most files below

# module (under pipeline/) -> (the test file that covers it, why no unit test of its own)
COVERED_ELSEWHERE: dict[str, tuple[str, str]] = {
    "app.py": (IT + "commit/test_fencing.py", "composes a running pipeline (Spark, broker)"),
    "main.py": (IT + "deploy/test_spark_submit.py", "spark-submit's entry point"),
    "jvm.py": (IT + "deploy/test_containers.py", "fetches the JVM jars with Maven"),
    "preflight.py": (IT + "runtime/test_checkpoint_location.py", "checks real paths"),
    "cli/common.py": (IT + "ops/test_cli_errors.py", "the one error path of every command"),
    "cli/entry.py": (IT + "ops/test_cli_errors.py", "argument parsing of every command"),
    "cli/plugins.py": (IT + "ops/test_cli.py", "the lab's commands through entry points"),
    "cli/run.py": (IT + "ops/test_operator_safety.py", "`ingest run` as a process"),
    "cli/tables.py": (IT + "ops/test_cli_errors.py", "`ingest compact/status` arguments"),
    "columns/avro.py": (IT + "decode/test_registry_avro.py", "columns of registered schemas"),
    "columns/json_schema.py": (
        IT + "decode/test_registry_json_schema.py",
        "columns of registered JSON Schemas",
    ),
    "columns/protobuf.py": (
        "tests/unit/decode/registry/test_protobuf.py",
        "columns of .proto messages, tested with the registry's descriptors",
    ),
    "commit/faults.py": (
        "tests/unit/commit/test_recovery.py",
        "the named fault points, armed at every point there",
    ),
    "commit/inflight_batch.py": (
        "tests/unit/commit/test_table_set.py",
        "the in-flight batch of the one commit sequence",
    ),
    "commit/maintenance.py": (
        "tests/unit/test_maintenance_scheduler.py",
        "the maintenance vocabulary the scheduler runs",
    ),
    "commit/protocol.py": (
        "tests/unit/commit/test_table_set.py",
        "the coordinators' Protocol: types only",
    ),
    "commit/types.py": ("tests/unit/commit/test_coordinator.py", "data types of the seams"),
    "config/base.py": ("tests/unit/config/test_loading.py", "models validated via parse_config"),
    "config/decode.py": ("tests/unit/config/test_loading.py", "models validated via parse_config"),
    "config/runtime.py": ("tests/unit/config/test_loading.py", "models validated via parse_config"),
    "config/sink.py": ("tests/unit/config/test_loading.py", "models validated via parse_config"),
    "config/source.py": ("tests/unit/config/test_loading.py", "models validated via parse_config"),
    "decode/arrow.py": (IT + "decode/test_decode_engines.py", "held equal to Spark's from_json"),
    "decode/arrow_types.py": (IT + "decode/test_decode_engines.py", "the arrow engine's types"),
    "decode/spark.py": (IT + "decode/test_decode_engines.py", "Spark's from_json engine"),
    "decode/unknown_fields.py": (
        IT + "decode/test_nested_payloads.py",
        "decodes inside Spark tasks",
    ),
    "decode/registry/avro.py": (
        "tests/unit/decode/registry/test_avro_columns.py",
        "Avro decoding with the columns it fills",
    ),
    "decode/registry/avro_cursor.py": (
        "tests/unit/decode/registry/test_avro_columns.py",
        "Avro decoding with the columns it fills",
    ),
    "decode/registry/client.py": (
        IT + "decode/test_registry_avro.py",
        "HTTP client of a real Schema Registry",
    ),
    "decode/registry/keys.py": (IT + "decode/test_registry_keys.py", "keys through a registry"),
    "decode/registry/proto_files.py": (
        "tests/unit/decode/registry/test_protobuf.py",
        "compiles .proto text with protoc",
    ),
    "decode/registry/table_schema.py": (
        IT + "decode/test_registry_keys.py",
        "a table's schema from a real registry",
    ),
    "decode/registry/watch.py": (
        IT + "decode/test_registry_avro.py",
        "watches a real registry while running",
    ),
    "decode/registry/wire.py": (IT + "decode/test_registry_avro.py", "the Confluent wire format"),
    "formats/base.py": (IT + "commit/test_dead_letters_once.py", "the TableFormat protocol"),
    "formats/orphans.py": (
        "tests/unit/test_maintenance_scheduler.py",
        "the orphan rules every format's cleanup applies",
    ),
    "formats/registry.py": (IT + "commit/test_dead_letters_once.py", "the switch on the format"),
    "formats/hudi/commit_metadata.py": (
        IT + "formats/hudi/test_hudi_format.py",
        "commit metadata read back by hudi-rs",
    ),
    "formats/hudi/committer.py": (IT + "formats/hudi/test_hudi_format.py", "commits real tables"),
    "formats/hudi/compaction.py": (
        IT + "formats/hudi/test_hudi_maintenance.py",
        "replacecommits read back by hudi-rs",
    ),
    "formats/hudi/compatibility.py": (
        "tests/unit/formats/hudi_spark/test_tables.py",
        "which writer may write a table, on real table files",
    ),
    "formats/hudi/cow_table.py": (IT + "formats/hudi/test_hudi_format.py", "real table files"),
    "formats/hudi/format.py": (IT + "formats/hudi/test_hudi_pipeline.py", "the Hudi adapter"),
    "formats/hudi/journal.py": (
        IT + "formats/hudi/test_hudi_pipeline.py",
        "the journal inside a real table's .hoodie",
    ),
    "formats/hudi/layout.py": (IT + "formats/hudi/test_hudi_format.py", "real table files"),
    "formats/hudi/orphans.py": (IT + "formats/hudi/test_hudi_maintenance.py", "real files"),
    "formats/hudi/pipeline_tables.py": (IT + "formats/hudi/test_hudi_format.py", "real tables"),
    "formats/hudi/rewrite.py": (IT + "formats/hudi/test_hudi_maintenance.py", "rewrites files"),
    "formats/hudi/schema.py": ("tests/unit/columns/test_model.py", "each format's schema"),
    "formats/hudi/slots.py": (IT + "formats/hudi/test_hudi_s3.py", "writer slots on S3"),
    "formats/hudi/staged_files.py": (IT + "formats/hudi/test_hudi_format.py", "staged files"),
    "formats/hudi/status.py": (IT + "formats/hudi/test_hudi_maintenance.py", "real tables"),
    "formats/hudi/storage.py": (IT + "formats/hudi/test_hudi_s3.py", "local and S3 storage"),
    "formats/hudi/trim.py": (IT + "formats/hudi/test_hudi_maintenance.py", "trims, hudi-rs reads"),
    "formats/hudi/view.py": (IT + "formats/hudi/test_hudi_maintenance.py", "reads real tables"),
    "formats/hudi/writer.py": (IT + "formats/hudi/test_hudi_format.py", "writes real files"),
    "formats/hudi_spark/batch.py": (
        "tests/unit/runtime/test_batch_writes.py",
        "the write adapter a batch gets",
    ),
    "formats/hudi_spark/committer.py": (
        IT + "formats/hudi_spark/test_hudi_spark_writer.py",
        "Hudi's own Spark writer (JVM)",
    ),
    "formats/hudi_spark/format.py": (
        IT + "formats/hudi_spark/test_hudi_spark_pipeline.py",
        "the adapter over Hudi's Spark writer",
    ),
    "formats/iceberg/catalog.py": (IT + "formats/iceberg/test_iceberg_adapter.py", "catalogs"),
    "formats/iceberg/catalog_table.py": (
        IT + "formats/iceberg/test_iceberg_adapter.py",
        "commits to real catalogs",
    ),
    "formats/iceberg/checkpoint_reads.py": (
        IT + "commit/test_busy_shared_table.py",
        "finds the checkpoint behind many commits of a real table",
    ),
    "formats/iceberg/compaction.py": (
        IT + "formats/iceberg/test_iceberg_maintenance.py",
        "compacts real tables",
    ),
    "formats/iceberg/data_file_codec.py": (
        IT + "formats/iceberg/test_iceberg_adapter.py",
        "pyiceberg's DataFile objects",
    ),
    "formats/iceberg/expiry.py": (IT + "formats/iceberg/test_iceberg_maintenance.py", "expiry"),
    "formats/iceberg/format.py": (
        IT + "formats/iceberg/test_pipeline_iceberg.py",
        "the Iceberg adapter",
    ),
    "formats/iceberg/orphans.py": (IT + "formats/iceberg/test_iceberg_maintenance.py", "files"),
    "formats/iceberg/partition_values.py": (
        IT + "formats/iceberg/test_iceberg_adapter.py",
        "pyiceberg's partition records",
    ),
    "formats/iceberg/pipeline_tables.py": (
        IT + "formats/iceberg/test_iceberg_adapter.py",
        "a pipeline's tables in a real catalog",
    ),
    "formats/iceberg/pyiceberg_internals.py": (
        IT + "formats/iceberg/test_pyiceberg_internals.py",
        "pins pyiceberg's private names",
    ),
    "formats/iceberg/read_view.py": (IT + "commit/test_fresh_reads.py", "real table loads"),
    "formats/iceberg/retry.py": (IT + "commit/test_outages.py", "a catalog that goes away"),
    "formats/iceberg/schema.py": ("tests/unit/columns/test_model.py", "each format's schema"),
    "formats/iceberg/schema_evolution.py": (
        IT + "decode/test_schema_evolution.py",
        "evolves real tables",
    ),
    "formats/iceberg/status.py": (IT + "ops/test_status.py", "status of real tables"),
    "formats/iceberg/table_view.py": (IT + "formats/iceberg/test_iceberg_adapter.py", "tables"),
    "formats/iceberg/write_context.py": (
        IT + "formats/iceberg/test_iceberg_adapter.py",
        "pyiceberg's write context",
    ),
    "formats/iceberg/write_contexts.py": (
        IT + "formats/iceberg/test_iceberg_adapter.py",
        "pyiceberg's write contexts",
    ),
    "formats/iceberg/writer.py": (IT + "formats/iceberg/test_iceberg_adapter.py", "writes files"),
    "kafka/client.py": ("tests/unit/source/test_options.py", "librdkafka's configuration"),
    "kafka/counting.py": (IT + "commit/test_gap_spark.py", "counts records of a real broker"),
    "observe/accounting.py": (IT + "runtime/test_metrics.py", "batch outcomes into metrics"),
    "observe/base.py": ("tests/unit/runtime/test_batch_writes.py", "the observer protocol"),
    "observe/files.py": (IT + "runtime/test_metrics.py", "Prometheus series"),
    "observe/health.py": (IT + "runtime/test_metrics.py", "a real HTTP endpoint"),
    "observe/lag.py": (IT + "runtime/test_metrics.py", "lag from a real broker"),
    "observe/logs.py": (IT + "runtime/test_metrics.py", "the batch log line"),
    "observe/metrics.py": (IT + "runtime/test_metrics.py", "scraped over HTTP"),
    "observe/observers.py": (IT + "runtime/test_metrics.py", "the driver's observers"),
    "observe/readiness.py": (IT + "runtime/test_metrics.py", "/readyz over HTTP"),
    "observe/runstate.py": (IT + "ops/test_status.py", "the run state file"),
    "ops/compact.py": (IT + "formats/iceberg/test_iceberg_maintenance.py", "compacts tables"),
    "ops/status.py": (IT + "ops/test_status.py", "`ingest status`"),
    "ops/verify/checkpoint.py": (IT + "ops/test_verify.py", "reads a real Spark checkpoint"),
    "ops/verify/engine.py": (IT + "ops/test_verify.py", "real tables against a real broker"),
    "ops/verify/kafka.py": (IT + "ops/test_verify.py", "reads a real broker"),
    "ops/verify/model.py": (IT + "ops/test_verify.py", "the report's types"),
    "ops/verify/payload.py": (IT + "ops/test_verify.py", "verifies rows of real tables"),
    "ops/verify/range_ledger.py": (IT + "formats/hudi/test_hudi_format.py", "recorded ranges"),
    "ops/verify/render.py": (IT + "ops/test_verify.py", "the report's output"),
    "ops/verify/tables.py": (IT + "ops/test_verify.py", "reads real tables"),
    "runtime/batches.py": ("tests/unit/runtime/test_batch_writes.py", "the batch runner"),
    "runtime/checkpoint_probe.py": (
        IT + "runtime/test_checkpoint_location.py",
        "probes a real checkpoint location",
    ),
    "runtime/composition.py": (IT + "commit/test_fencing.py", "composes a real driver"),
    "runtime/fencing.py": (IT + "commit/test_fencing.py", "a real driver fenced"),
    "runtime/source_settings.py": (
        "tests/unit/runtime/test_batch_writes.py",
        "the settings the batch runner uses",
    ),
    "runtime/stats.py": ("tests/unit/runtime/test_batch_writes.py", "the run's counters"),
    "runtime/stopping.py": (IT + "runtime/test_graceful_stop.py", "signals to a real driver"),
    "runtime/streams.py": (IT + "formats/iceberg/test_pipeline_iceberg.py", "Spark queries"),
    "runtime/telemetry.py": (IT + "runtime/test_metrics.py", "a real driver's metrics"),
    "runtime/warm_standby.py": (
        "tests/unit/commit/test_lease.py",
        "the standby lease, with real replica processes",
    ),
    "source/arrow_input.py": ("tests/unit/spark/batch/test_paths.py", "the arrow read path"),
    "source/choice.py": ("tests/unit/source/test_spark_kafka.py", "the source.reader switch"),
    "source/consumers.py": (IT + "source/test_pooled_reread.py", "real consumers"),
    "source/datasource.py": (IT + "source/test_source_spark.py", "Spark's data source API"),
    "source/python_reader.py": (IT + "source/test_source_spark.py", "the ingest_kafka reader"),
    "source/reader.py": (IT + "decode/test_decode_engines.py", "the reader protocol"),
    "source/spark_line.py": (IT + "source/test_spark_reader.py", "the running PySpark's line"),
    "spark/batch/ranges.py": ("tests/unit/runtime/test_batch_writes.py", "a write adapter"),
    "spark/batch/rows.py": ("tests/unit/runtime/test_batch_writes.py", "a write adapter"),
    "spark/class_archive.py": (IT + "runtime/test_class_archive.py", "real JVMs"),
    "spark/offset_log.py": (IT + "commit/test_recovery_spark.py", "Spark's real offset log"),
    "spark/session.py": (IT + "runtime/test_class_archive.py", "builds a SparkSession"),
    "spark/settle.py": (IT + "runtime/test_worker_daemon.py", "long-lived Python workers"),
    "spark/worker_daemon.py": (IT + "runtime/test_worker_daemon.py", "forks Spark workers"),
    "spark/writer.py": (IT + "commit/test_dead_letters_once.py", "the workers' writes"),
    "standby/liveness.py": ("tests/unit/commit/test_lease.py", "the liveness link"),
    "standby/process.py": ("tests/unit/commit/test_lease.py", "replica processes"),
    "standby/replica.py": ("tests/unit/commit/test_lease.py", "the replica's lease"),
    "storage/atomic.py": ("tests/unit/commit/test_journal.py", "the local journal's writes"),
    "storage/fs.py": (IT + "storage/test_s3.py", "pyarrow filesystems over real S3"),
    "storage/journal_stores.py": (IT + "storage/test_s3.py", "journal stores, local and S3"),
    "storage/local.py": ("tests/unit/commit/test_journal.py", "the local journal store"),
    "storage/s3.py": (IT + "storage/test_s3.py", "the journal on real S3"),
    "storage/s3_client.py": (IT + "storage/test_s3.py", "boto3 against real S3"),
    "storage/s3_errors.py": (IT + "storage/test_s3.py", "errors of real S3"),
    "storage/s3_settings.py": (IT + "storage/test_s3.py", "settings of a real S3 client"),
}


def core_modules() -> list[str]:
    pipeline = ROOT / "pipeline"
    return sorted(
        str(p.relative_to(pipeline))
        for p in pipeline.rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    )


def unit_test_of(module: str) -> Path:
    path = Path(module)
    return ROOT / "tests" / "unit" / path.parent / f"test_{path.stem}.py"


def test_every_core_module_is_named_by_a_test_file_or_the_index() -> None:
    missing = [
        m for m in core_modules() if not unit_test_of(m).exists() and m not in COVERED_ELSEWHERE
    ]
    assert not missing, (
        "modules without tests/unit/<path>/test_<module>.py and not in COVERED_ELSEWHERE: "
        f"{missing}"
    )


def test_the_index_names_only_modules_without_a_unit_test_file() -> None:
    modules = set(core_modules())
    stale = [m for m in COVERED_ELSEWHERE if m not in modules]
    assert not stale, f"modules in the index that no longer exist: {stale}"
    tested = [m for m in COVERED_ELSEWHERE if unit_test_of(m).exists()]
    assert not tested, f"modules with a unit test file, still in the index: {tested}"


def test_each_index_entry_names_an_existing_test_file_and_a_reason() -> None:
    for module, (test_file, reason) in COVERED_ELSEWHERE.items():
        assert (ROOT / test_file).is_file(), f"{module}: {test_file} does not exist"
        assert Path(test_file).name.startswith("test_"), f"{module}: {test_file}"
        assert reason.strip(), f"{module}: no reason"
