"""The table's columns for a registry format: looked up once at start.

``decode.registry`` names a subject (by the strategy, from the first topic) and a version
(pinned, or the latest at start), or pins a schema id. :func:`resolve_registry_schema`
returns the configuration with that schema's id pinned and ``decode.schema`` set to its
columns (:mod:`pipeline.columns.avro`, :mod:`pipeline.columns.protobuf`,
:mod:`pipeline.columns.json_schema`), so the rest
of the pipeline — the tables, schema evolution on restart — reads it as a written one, and
every task reads records against the same schema id. Idempotent: a resolved configuration
is returned as it is.

With ``decode.key`` the key's subject (or pinned id) is resolved the same way, its id
pinned in ``decode.key.schemaId``, and one more column, ``decode.key.column``, is appended
to ``decode.schema``: a struct of the key schema's fields, or an Avro key's primitive.
"""

from __future__ import annotations

from collections.abc import Callable

from pipeline.columns import FieldSpec, TypeSpec, struct_spec
from pipeline.columns.avro import avro_fields, avro_type
from pipeline.columns.json_schema import json_schema_fields
from pipeline.columns.protobuf import protobuf_fields
from pipeline.config import DecodeConfig, FieldConfig, PipelineConfig
from pipeline.decode.registry.client import RegistrySchema, Role, SchemaRegistry, UnknownSchema
from pipeline.decode.registry.keys import key_registry
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
    schema = _lookup(cfg, client, decode.format, "value")
    fields = [
        FieldConfig(
            name=f.name,
            type=f.type if isinstance(f.type, str) else dict(f.type),
            required=f.required,
            doc=f.doc,
        )
        for f in _TYPES[decode.format][1](client, schema)
    ]
    pinned = reg.model_copy(update={"schema_id": schema.schema_id})
    decode = decode.model_copy(update={"registry": pinned, "schema_": fields})
    if decode.key is not None:
        decode = _with_key(cfg, decode)
    return cfg.model_copy(update={"decode": decode})


def _lookup(cfg: PipelineConfig, client: SchemaRegistry, fmt: str, role: Role) -> RegistrySchema:
    """The schema of the value's (or key's) subject, or its pinned id, of format ``fmt``."""
    where = "decode.registry" if role == "value" else "decode.key"
    try:
        if client.reg.schema_id is not None:
            schema = client.by_id(client.reg.schema_id)
        else:
            schema = client.table_schema(schema_topic(cfg), role)
    except UnknownSchema as e:
        raise ConfigError(f"{where}: {e}") from None
    if schema.schema_type.upper() != _TYPES[fmt][0]:
        raise ConfigError(
            f"{where}: schema id {schema.schema_id} is a {schema.schema_type} schema, "
            f"but {'decode.format' if role == 'value' else 'decode.key.format'} is {fmt}"
        )
    return schema


def _with_key(cfg: PipelineConfig, decode: DecodeConfig) -> DecodeConfig:
    """``decode`` with the key's schema id pinned and its column appended."""
    key = decode.key
    assert key is not None
    client = SchemaRegistry(key_registry(decode))
    schema = _lookup(cfg, client, key.format, "key")
    if key.column in {f.name for f in decode.schema_}:
        raise ConfigError(
            f"decode.key.column {key.column!r} is also a field of the value's schema: "
            "give the key's column another name"
        )
    try:
        if key.format == "avro":
            key_type: TypeSpec = avro_type(schema.parsed(), key.column)
        else:
            key_type = struct_spec(_TYPES[key.format][1](client, schema))
    except ConfigError as e:
        raise ConfigError(f"decode.key: schema id {schema.schema_id}: {e}") from None
    column = FieldConfig(
        name=key.column,
        type=key_type if isinstance(key_type, str) else dict(key_type),
        doc="the record key",
    )
    pinned = key.model_copy(update={"schema_id": schema.schema_id})
    return decode.model_copy(update={"key": pinned, "schema_": [*decode.schema_, column]})


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
