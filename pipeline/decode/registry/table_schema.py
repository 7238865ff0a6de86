"""The table's columns for a registry format: looked up once at start.

``decode.registry`` names a subject (by the strategy, from the first topic) and a version
(pinned, or the latest at start), or pins a schema id. :func:`resolve_registry_schema`
returns the configuration with that schema's id pinned and ``decode.schema`` set to its
columns (:mod:`pipeline.columns.avro`, :mod:`pipeline.columns.protobuf`,
:mod:`pipeline.columns.json_schema`), so the rest
of the pipeline — the tables, schema evolution on restart — reads it as a written one, and
every task reads records against the same schema id. Idempotent: a resolved configuration
is returned as it is.
"""

from __future__ import annotations

from collections.abc import Callable

from pipeline.columns import FieldSpec
from pipeline.columns.avro import avro_fields
from pipeline.columns.json_schema import json_schema_fields
from pipeline.columns.protobuf import protobuf_fields
from pipeline.config import FieldConfig, PipelineConfig
from pipeline.decode.registry.client import RegistrySchema, SchemaRegistry, UnknownSchema
from pipeline.decode.registry.proto_files import ProtoCompileError, compile_schema
from pipeline.errors import ConfigError

__all__ = ["resolve_registry_schema", "schema_topic"]

# decode.format -> (the registry's schema type, the columns of such a schema)
_TYPES: dict[str, tuple[str, Callable[[SchemaRegistry, RegistrySchema], list[FieldSpec]]]] = {
    "avro": ("AVRO", lambda _, schema: avro_fields(schema.parsed())),
    "protobuf": ("PROTOBUF", lambda client, schema: _protobuf(client, schema)),
    "json-schema": ("JSON", lambda _, schema: json_schema_fields(schema.parsed())),
}


def resolve_registry_schema(cfg: PipelineConfig) -> PipelineConfig:
    decode = cfg.decode
    if not decode.registry_format or decode.schema_:
        return cfg
    reg = decode.registry
    assert reg is not None  # the config's validation requires it for a registry format
    client = SchemaRegistry(reg)
    try:
        if reg.schema_id is not None:
            schema = client.by_id(reg.schema_id)
        else:
            schema = client.table_schema(schema_topic(cfg))
    except UnknownSchema as e:
        raise ConfigError(f"decode.registry: {e}") from None
    want, to_fields = _TYPES[decode.format]
    if schema.schema_type.upper() != want:
        raise ConfigError(
            f"decode.registry: schema id {schema.schema_id} is a {schema.schema_type} schema, "
            f"but decode.format is {decode.format}"
        )
    fields = [
        FieldConfig(
            name=f.name,
            type=f.type if isinstance(f.type, str) else dict(f.type),
            required=f.required,
            doc=f.doc,
        )
        for f in to_fields(client, schema)
    ]
    pinned = reg.model_copy(update={"schema_id": schema.schema_id})
    return cfg.model_copy(
        update={"decode": decode.model_copy(update={"registry": pinned, "schema_": fields})}
    )


def _protobuf(client: SchemaRegistry, schema: RegistrySchema) -> list[FieldSpec]:
    """The columns of the table's message: ``recordName``, or the schema's first."""
    try:
        compiled = compile_schema(client, schema)
        message = compiled.message(client.reg.record_name)
    except ProtoCompileError as e:
        raise ConfigError(f"decode.registry: schema id {schema.schema_id}: {e}") from None
    return protobuf_fields(message)


def schema_topic(cfg: PipelineConfig) -> str:
    """The topic whose subject holds the table's schema (any, for ``record-name``)."""
    reg = cfg.decode.registry
    if reg is not None and reg.subject_strategy == "record-name":
        return ""
    src = cfg.source
    topics = sorted(src.topics or src.assign or [])
    if not topics:
        raise ConfigError(
            "decode.registry: with source.topicPattern the table's schema needs "
            "decode.registry.schemaId, or subjectStrategy record-name"
        )
    return topics[0]
