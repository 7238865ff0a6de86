"""The one configuration model, validated at start-up.

A YAML file (``ingest run --config conf/pipeline.yaml``), then ``--set a.b=c`` overrides,
then ``${VAR}`` / ``${VAR:-default}`` references resolved from the environment (secrets
never have to live in the file). Unknown keys and bad values fail before anything starts,
with the dotted key and the allowed values in one line.
"""

from __future__ import annotations

import os
import re
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from pipeline.columns import FieldSpec
from pipeline.errors import ConfigError

# YAML 1.1 (PyYAML) reads unquoted off/no/false and on/yes/true as booleans: the
# spellings a boolean stands for when a string-enum option expects one of them
_YAML_BOOL_SPELLINGS = {False: ("off", "no", "false"), True: ("on", "yes", "true")}


def _string_choices(annotation: Any) -> tuple[str, ...]:
    """The string values of the ``Literal``s in ``annotation`` (also inside a union)."""
    if typing.get_origin(annotation) is Literal:
        return tuple(a for a in typing.get_args(annotation) if isinstance(a, str))
    return tuple(c for a in typing.get_args(annotation) for c in _string_choices(a))


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )

    @model_validator(mode="before")
    @classmethod
    def _yaml_booleans_as_enum_values(cls, data: Any) -> Any:
        """``ha: {mode: off}`` and ``--set ha.mode=off`` arrive as ``False``: for a field
        whose allowed strings include such a spelling (``off``), take the boolean as it."""
        if not isinstance(data, dict):
            return data
        fixed = dict(data)
        for name, info in cls.model_fields.items():
            choices = _string_choices(info.annotation)
            if not choices:
                continue
            for key in {name, info.alias or name}:
                value = fixed.get(key)
                if isinstance(value, bool):
                    spelled = [c for c in _YAML_BOOL_SPELLINGS[value] if c in choices]
                    if spelled:
                        fixed[key] = spelled[0]
        return fixed


# librdkafka settings whose values are secrets (sasl.password, ssl.key.password,
# sasl.oauthbearer.client.secret, sasl.jaas.config ...): never shown by a repr or a log line
_SECRET_SETTING = re.compile(r"password|secret|jaas|token|credential|ssl\.key\.pem", re.I)


def masked_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` with the values of secret-looking keys replaced by ``***``."""
    return {k: ("***" if _SECRET_SETTING.search(k) else v) for k, v in settings.items()}


class FieldConfig(_Model):
    name: str = Field(min_length=1)
    # a primitive's name, or a mapping for a nested type (pipeline.columns.parse_type)
    type: str | dict[str, Any]
    required: bool = False
    doc: str | None = None
    renamed_from: str | None = None  # rename a table column (schema evolution on restart)


class SourceConfig(_Model):
    bootstrap_servers: str = Field(min_length=1)
    topics: list[str] | None = None
    assign: dict[str, list[int]] | None = None
    topic_pattern: str | None = None
    # "table": resume from the committed offsets of the table (docs/design.md invariant 6)
    starting_offsets: Literal["table", "earliest", "latest"] | dict[str, dict[str, int]] = "table"
    starting_offsets_fallback: Literal["earliest", "latest"] = "earliest"
    starting_timestamp: int | None = Field(default=None, ge=0)
    starting_offsets_by_timestamp_strategy: Literal["error", "latest"] = "error"
    max_records_per_trigger: int | None = Field(default=None, ge=1)
    # hold a trigger until this many records are available, or maxTriggerDelay has passed
    # since the last batch (default 15 minutes; Trigger.AvailableNow / once ignore both)
    min_records_per_trigger: int | None = Field(default=None, ge=1)
    max_trigger_delay: str | None = None
    min_partitions: int | None = Field(default=None, ge=1)
    fail_on_data_loss: bool = True
    isolation_level: Literal["read_committed", "read_uncommitted"] = "read_committed"
    include_headers: bool = False
    # how long planning and reading wait for an unreachable broker before the query fails
    broker_retry_seconds: int = Field(default=120, ge=0)
    kafka: dict[str, str] = Field(default_factory=dict)

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            yield name, (masked_settings(value) if name == "kafka" else value)

    @field_validator("kafka", mode="before")
    @classmethod
    def _empty_kafka(cls, v: Any) -> Any:
        return {} if v is None else {k: str(x) for k, x in v.items()} if isinstance(v, dict) else v

    @field_validator("max_trigger_delay")
    @classmethod
    def _max_trigger_delay(cls, v: str | None) -> str | None:
        return None if v is None else normalize_duration("source.maxTriggerDelay", v)

    @model_validator(mode="after")
    def _admission(self) -> SourceConfig:
        lo, hi = self.min_records_per_trigger, self.max_records_per_trigger
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(
                f"source.minRecordsPerTrigger ({lo}) must not exceed "
                f"source.maxRecordsPerTrigger ({hi})"
            )
        if self.max_trigger_delay is not None and lo is None:
            raise ValueError(
                "source.maxTriggerDelay needs source.minRecordsPerTrigger (it bounds that wait)"
            )
        return self

    @model_validator(mode="after")
    def _one_subscription(self) -> SourceConfig:
        chosen = [n for n in ("topics", "assign", "topic_pattern") if getattr(self, n)]
        if len(chosen) != 1:
            raise ValueError(
                "exactly one of source.topics, source.assign, source.topicPattern must be set"
                f" (got {', '.join(chosen) or 'none'})"
            )
        return self


class RegistryAuthConfig(_Model):
    """``basic`` (username, password) or ``bearer`` (token); values from ``${VAR}``."""

    kind: Literal["basic", "bearer"]
    username: str | None = None
    password: SecretStr | None = None
    token: SecretStr | None = None
    # bearer only: confluent-kafka's client sends it as target-sr-cluster (Confluent Cloud)
    logical_cluster: str = "default"

    @model_validator(mode="after")
    def _complete(self) -> RegistryAuthConfig:
        need = ("username", "password") if self.kind == "basic" else ("token",)
        if missing := [n for n in need if getattr(self, n) is None]:
            raise ValueError(f"decode.registry.auth ({self.kind}) needs {', '.join(missing)}")
        return self


class RegistryConfig(_Model):
    """A Confluent-compatible Schema Registry (``decode.format: avro | protobuf | json-schema``)."""

    url: str = Field(min_length=1)
    auth: RegistryAuthConfig | None = None
    # topic-name: <topic>-value; record-name: <record>; topic-record-name: <topic>-<record>
    subject_strategy: Literal["topic-name", "record-name", "topic-record-name"] = "topic-name"
    record_name: str | None = None  # the record (full name) the *-record-name strategies use
    version: int | Literal["latest"] = "latest"  # the table's schema at first start
    # the table's (reader) schema by id: pins it; when absent it is looked up at start from
    # the subject and version (pipeline.decode.registry.table_schema)
    schema_id: int | None = Field(default=None, ge=0)
    cache_seconds: float = Field(default=300.0, gt=0)
    retry_seconds: float = Field(default=60.0, ge=0)

    @model_validator(mode="after")
    def _record_for_strategy(self) -> RegistryConfig:
        if self.subject_strategy != "topic-name" and not self.record_name:
            raise ValueError(
                f"decode.registry.recordName is required with subjectStrategy "
                f"{self.subject_strategy}"
            )
        return self


REGISTRY_FORMATS = ("avro", "protobuf", "json-schema")


class DecodeConfig(_Model):
    format: Literal["json", "raw", "avro", "protobuf", "json-schema"] = "json"
    registry: RegistryConfig | None = None
    schema_: list[FieldConfig] = Field(default_factory=list, alias="schema")
    max_record_bytes: int = Field(default=1_048_576, ge=1)
    # arrow: tasks read Kafka and decode in Python (Kafka -> Arrow -> Parquet, no JVM rows);
    # spark: Spark's from_json over the streaming DataFrame
    engine: Literal["arrow", "spark"] = "arrow"
    # records with top-level fields decode.schema lacks: counted either way; dead-letter:
    # such a record goes to the dead-letter table (pipeline.decode.unknown_fields)
    unknown_fields: Literal["ignore", "dead-letter"] = "ignore"

    @property
    def raw(self) -> bool:
        """Raw mode: key, value and headers stored as bytes, no decoding."""
        return self.format == "raw"

    @property
    def registry_format(self) -> bool:
        """The value is in the Confluent wire format, its schema in ``decode.registry``."""
        return self.format in REGISTRY_FORMATS

    def field_specs(self) -> list[FieldSpec]:
        """``decode.schema`` as the column model's field specs (types parsed later)."""
        return [FieldSpec(f.name, f.type, f.required, f.doc, f.renamed_from) for f in self.schema_]

    @model_validator(mode="after")
    def _schema_for_json(self) -> DecodeConfig:
        if self.registry_format:
            if self.registry is None:
                raise ValueError(f"decode.registry is required when decode.format is {self.format}")
            if self.schema_:
                raise ValueError(
                    f"decode.schema is not used with decode.format {self.format}: the table's "
                    "columns come from the registry's schema"
                )
            if self.engine != "arrow":
                raise ValueError(
                    f"decode.format {self.format} is read by decode.engine arrow only "
                    f"(got {self.engine})"
                )
            return self
        if not self.raw and not self.schema_:
            raise ValueError("decode.schema must list the fields when decode.format is json")
        names = [f.name for f in self.schema_]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"decode.schema has duplicate field(s): {', '.join(dup)}")
        return self


class CatalogConfig(_Model):
    name: str = "lake"
    type: Literal["sql", "rest"] = "sql"
    uri: str | None = None  # default: SQLite file under the warehouse directory
    warehouse: str = "./lake/warehouse"
    properties: dict[str, str] = Field(default_factory=dict)

    def pyiceberg_properties(self) -> dict[str, str]:
        props = dict(self.properties)
        props["type"] = self.type
        warehouse = self.warehouse
        if "://" not in warehouse:
            path = Path(warehouse).expanduser().resolve()
            path.mkdir(parents=True, exist_ok=True)
            warehouse = path.as_uri()
        props["warehouse"] = warehouse
        if self.uri:
            props["uri"] = self.uri
        elif self.type == "sql":
            if not warehouse.startswith("file://"):
                raise ConfigError(
                    "sink.catalog.uri is required when the warehouse is not a local path"
                )
            props["uri"] = f"sqlite:///{warehouse[len('file://') :]}/catalog.db"
        else:
            raise ConfigError("sink.catalog.uri is required for a REST catalog")
        return props


class HudiConfig(_Model):
    """The ``hudi`` table format's settings: a native copy-on-write table (docs/hudi.md)."""

    base_path: str = Field(min_length=1)  # local path, file:///, or s3://bucket/prefix
    record_key_fields: list[str] = Field(default_factory=list)  # default: Kafka coordinates
    partition_fields: list[str] = Field(default_factory=list)  # hive-style, by column value
    dead_letter_base_path: str | None = None  # default: <basePath>_dead_letter
    # s3:// tables: pyiceberg-style s3.* keys (s3.endpoint, s3.access-key-id, ...);
    # unset keys fall back to the AWS default credential chain
    properties: dict[str, str] = Field(default_factory=dict)


class SinkConfig(_Model):
    format: Literal["iceberg", "hudi", "both"] = "iceberg"  # both: one query, two tables
    hudi: HudiConfig | None = None
    catalog: CatalogConfig = Field(default_factory=CatalogConfig)
    table: str = Field(pattern=r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+$")
    partition_by: list[str] = Field(default_factory=list)
    dead_letter_table: str | None = None
    table_properties: dict[str, str] = Field(default_factory=dict)
    target_file_size_bytes: int = Field(default=128 * 1024 * 1024, ge=1024)
    # Commits of history kept (Iceberg: snapshots of main, older ones expired, metadata
    # only; Hudi: completed commits on the active timeline) so commit latency stays flat.
    # Dedupe sees only these; older replays hit the overlap check. Each retained Iceberg
    # snapshot costs every commit ~0.25 ms (pyiceberg re-reads, deep-copies and rewrites
    # the whole metadata): 30 kept measured 1.3x of a new table's commit, 100 kept 1.6x.
    max_snapshots: int = Field(default=30, ge=10, le=100_000)

    @property
    def dead_letter_identifier(self) -> str:
        return self.dead_letter_table or f"{self.table}_dead_letter"


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|seconds?|minutes?|min)")
_MS_PER_UNIT = {"mil": 1, "sec": 1_000, "min": 60_000}


def normalize_duration(key: str, v: str) -> str:
    """``'500 ms'`` -> ``'500 milliseconds'``: the spelling Spark's interval parser reads.

    Accepts a number (fractions allowed) and ms / milliseconds / s / seconds / min /
    minutes; raises ``ValueError`` naming ``key`` otherwise.
    """
    m = _DURATION.fullmatch(v.strip())
    if not m:
        raise ValueError(f"{key} must look like '10 seconds', '500 ms' or '1 minute'")
    # Spark's interval parser knows only the long unit names ("500 ms" fails there).
    unit = {"ms": "milliseconds", "s": "seconds", "min": "minutes"}.get(m[2], m[2])
    if "." in m[1]:  # nor fractions of a unit: say it in whole milliseconds
        return f"{round(float(m[1]) * _MS_PER_UNIT[unit[:3]])} milliseconds"
    return f"{m[1]} {unit}"


def spark_duration_seconds(key: str, v: str) -> float:
    """Seconds of a duration written as ``normalize_duration`` accepts it."""
    return seconds_of(normalize_duration(key, v))


class TriggerConfig(_Model):
    mode: Literal["processing-time", "available-now", "once"] = "processing-time"
    interval: str = "10 seconds"

    @field_validator("interval")
    @classmethod
    def _interval(cls, v: str) -> str:
        return normalize_duration("trigger.interval", v)


class SparkConfig(_Model):
    master: str | None = None  # None: whatever spark-submit set, else local[*]
    app_name: str = "kafka-lakehouse-ingest"
    conf: dict[str, str] = Field(default_factory=dict)


class CommitConfig(_Model):
    """The commit protocol (docs/design.md invariants 3-7)."""

    mode: Literal["exactly-once", "at-least-once"] = "exactly-once"
    # records at offsets the table already holds (checkpoint behind the table)
    on_overlap: Literal["drop", "fail"] = "drop"
    # a batch starting above the table's committed offsets (table rolled back, checkpoint
    # from elsewhere): refuse, or re-read from the table's offsets (docs/design.md inv. 8)
    on_gap: Literal["fail", "rewind"] = "fail"
    # fault injection for tests and drills: "<point>:<kill|raise>[@batch],…"
    faults: str | None = None
    # finished journal entries kept for inspection
    journal_retention: int = Field(default=100, ge=1)  # >= 1: instant times never reused
    # how long a commit or table load waits for an unreachable catalog before failing
    catalog_retry_seconds: float = Field(default=120.0, ge=0)


class MetricsConfig(_Model):
    """Prometheus exporter and health endpoints on the driver."""

    enabled: bool = True
    host: str = "0.0.0.0"
    port: int = Field(default=9108, ge=0, le=65535)  # 0: pick a free port (tests)
    lag_refresh_seconds: float = Field(default=15.0, gt=0)


class RunConfig(_Model):
    """How ``ingest run`` stops (docs/deploy.md, "Stopping")."""

    # On SIGTERM/SIGINT the batch in progress may finish its commit for this long before
    # the query stops anyway (the next run recovers it). Keep it below the pod's
    # terminationGracePeriodSeconds (Kubernetes' default: 30 s).
    stop_timeout_seconds: float = Field(default=25.0, ge=0)


class HaConfig(_Model):
    """Warm standby (``pipeline/commit/lease.py``): which replica writes."""

    # off: one replica, no lease written (each renewal is a journal write: on S3 three
    # requests a second nobody needs without a standby); active: take the lease at once
    # (fences a live writer, as any restart does); standby: wait until a lease has not
    # been renewed for lease_seconds; auto: active when no live lease exists, else standby
    # (two identical replicas just work)
    mode: Literal["off", "active", "standby", "auto"] = "off"
    renew_seconds: float = Field(default=1.0, gt=0)
    lease_seconds: float = Field(default=3.0, gt=0)
    # The active's liveness port: standbys hold a connection to it and take over the
    # moment it closes (a killed process's sockets close at once), not after
    # lease_seconds. 0: any free port (its address is published in the lease's claim);
    # set one when a network policy must allow it. Advertised host: INGEST_ADVERTISE_HOST,
    # else spark.driver.host, else this host's address.
    port: int = Field(default=0, ge=0, le=65535)

    @model_validator(mode="after")
    def _lease_outlives_renewals(self) -> HaConfig:
        if self.lease_seconds < 2 * self.renew_seconds:
            raise ValueError(
                f"leaseSeconds ({self.lease_seconds:g}) must be at least twice "
                f"renewSeconds ({self.renew_seconds:g}): one late renewal must not "
                "hand the lease to a standby"
            )
        return self


_SECONDS = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")
_SECONDS_PER_UNIT = {
    **dict.fromkeys(("ms", "millisecond", "milliseconds"), 0.001),
    **dict.fromkeys(("", "s", "second", "seconds"), 1.0),
    **dict.fromkeys(("min", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hour", "hours"), 3600.0),
}


def seconds_of(v: Any) -> float:
    """Seconds of ``300``, ``"300"``, ``"500 ms"``, ``"5 minutes"`` or ``"1 hour"``."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        return float(v)
    m = _SECONDS.fullmatch(str(v).strip())
    if not m or m[2] not in _SECONDS_PER_UNIT:
        raise ValueError(
            "must be seconds or look like '500 ms', '30 seconds', '5 minutes', '1 hour'"
        )
    return float(m[1]) * _SECONDS_PER_UNIT[m[2]]


Seconds = Annotated[float, BeforeValidator(seconds_of), Field(ge=0)]


class CompactionConfig(_Model):
    """Background compaction of small data files (docs/maintenance.md)."""

    enabled: bool = False
    # files below 75 % of this are rewritten into files of about this size;
    # default: sink.targetFileSizeBytes
    target_file_size_bytes: int | None = Field(default=None, ge=1024)
    min_input_files: int = Field(default=5, ge=2)  # per table partition
    interval: Seconds = 300.0


class OrphanCleanupConfig(_Model):
    """Background removal of data files no commit references (docs/maintenance.md)."""

    enabled: bool = False
    # only files unreferenced AND older than this go: never below commit.catalogRetrySeconds
    older_than: Seconds = 3600.0
    interval: Seconds = 3600.0


class MaintenanceConfig(_Model):
    compaction: CompactionConfig = Field(default_factory=CompactionConfig)
    orphans: OrphanCleanupConfig = Field(default_factory=OrphanCleanupConfig)
    # live data files and their average size, for the metrics (0: not measured)
    file_stats_interval: Seconds = 60.0


class PipelineConfig(_Model):
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    source: SourceConfig
    decode: DecodeConfig = Field(default_factory=DecodeConfig)
    sink: SinkConfig
    checkpoint_location: str
    trigger: TriggerConfig = Field(default_factory=TriggerConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    commit: CommitConfig = Field(default_factory=CommitConfig)
    run: RunConfig = Field(default_factory=RunConfig)
    ha: HaConfig = Field(default_factory=HaConfig)
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)

    @model_validator(mode="after")
    def _orphans_outwait_commit_retries(self) -> PipelineConfig:
        window = self.commit.catalog_retry_seconds
        if self.maintenance.orphans.older_than < window:
            raise ValueError(
                f"maintenance.orphans.olderThan ({self.maintenance.orphans.older_than:g} s) must "
                f"not be below commit.catalogRetrySeconds ({window:g} s): a commit still being "
                "retried may reference a file that old"
            )
        return self

    @model_validator(mode="after")
    def _lease_needs_the_journal(self) -> PipelineConfig:
        if self.ha.mode != "off" and self.commit.mode != "exactly-once":
            raise ValueError(
                f"ha.mode {self.ha.mode} needs commit.mode exactly-once: the lease lives in "
                "its journal, and only its writer epoch fences the replica taken over"
            )
        return self


# -- loading ---------------------------------------------------------------------------

_ENV_REF = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


def _resolve_env(value: Any, env: Mapping[str, str], path: str) -> Any:
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            name = m.group("name")
            if name in env:
                return env[name]
            if m.group("default") is not None:
                return m.group("default")
            raise ConfigError(f"{path or '<root>'}: environment variable {name} is not set")

        return _ENV_REF.sub(sub, value)
    if isinstance(value, dict):
        return {
            k: _resolve_env(v, env, f"{path}.{k}" if path else str(k)) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_resolve_env(v, env, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """``a.b.c=value``: the value is parsed as YAML (numbers, booleans, lists, maps)."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value")
        key, raw = item.split("=", 1)
        parts = [p for p in key.strip().split(".") if p]
        if not parts:
            raise ConfigError(f"--set {item!r}: empty key")
        node = data
        for p in parts[:-1]:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {key}: {p} is not a mapping")
            node = nxt
        try:
            node[parts[-1]] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            node[parts[-1]] = raw
    return data


def _format_error(e: ValidationError) -> str:
    lines = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-after"))
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"{loc}: {msg}" if loc else msg)
    return "invalid config: " + "; ".join(lines)


def parse_config(data: Mapping[str, Any], env: Mapping[str, str] | None = None) -> PipelineConfig:
    resolved = _resolve_env(dict(data), os.environ if env is None else env, "")
    try:
        return PipelineConfig.model_validate(resolved)
    except ValidationError as e:
        raise ConfigError(_format_error(e)) from None


def load_config(
    path: str | Path | None,
    overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> PipelineConfig:
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist")
        try:
            loaded = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {p} is not valid YAML: {e}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {p} must hold a mapping at the top level")
        data = loaded
    return parse_config(apply_overrides(data, overrides), env)
