"""``decode``: record formats, the declared columns and the Schema Registry."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr, model_validator

from pipeline.columns import FieldSpec
from pipeline.config.base import _Model


class FieldConfig(_Model):
    name: str = Field(min_length=1)
    # a primitive's name, or a mapping for a nested type (pipeline.columns.parse_type)
    type: str | dict[str, Any]
    required: bool = False
    doc: str | None = None
    renamed_from: str | None = None  # rename a table column (schema evolution on restart)


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
    # the record (full name) the *-record-name strategies use; for protobuf also the table's
    # message (default: the schema's first)
    record_name: str | None = None
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
RegistryFormat = Literal["avro", "protobuf", "json-schema"]


class KeyConfig(_Model):
    """The record key, decoded through ``decode.registry`` like the value and stored in one
    column: a struct of the key schema's fields, or the primitive an Avro key schema is.
    Its subject follows ``decode.registry.subjectStrategy``: ``<topic>-key``,
    ``<recordName>`` or ``<topic>-<recordName>`` (this section's ``recordName``)."""

    format: RegistryFormat
    column: str = Field(default="key", min_length=1)
    record_name: str | None = None
    version: int | Literal["latest"] = "latest"
    schema_id: int | None = Field(default=None, ge=0)


class DecodeConfig(_Model):
    format: Literal["json", "raw", "avro", "protobuf", "json-schema"] = "json"
    registry: RegistryConfig | None = None
    key: KeyConfig | None = None  # the key decoded too (registry formats)
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
            strategy = self.registry.subject_strategy
            if self.key is not None and strategy != "topic-name" and not self.key.record_name:
                raise ValueError(
                    f"decode.key.recordName is required with decode.registry.subjectStrategy "
                    f"{strategy}"
                )
            return self
        if self.key is not None:
            raise ValueError(
                f"decode.key needs a registry format for the value (avro, protobuf or "
                f"json-schema); decode.format is {self.format}"
            )
        if not self.raw and not self.schema_:
            raise ValueError("decode.schema must list the fields when decode.format is json")
        names = [f.name for f in self.schema_]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"decode.schema has duplicate field(s): {', '.join(dup)}")
        return self
