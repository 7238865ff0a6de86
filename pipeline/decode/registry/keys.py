"""The record key through the Schema Registry (``decode.key``), as one more column.

The key is decoded by the same code as the value, run a second time over the batch's keys
with a configuration of its own (:func:`key_decode_config`): the key's format, the
registry settings with the key's record name, version and pinned schema id, and as columns
the key struct's fields (or, for an Avro key that is a primitive, the key column itself).
So a key gets the value's checks and reasons, prefixed ``key: `` in the dead letters
(:func:`merge_key`). A null key is a null column, not an error (Kafka's keys are optional).
Fields a key has but its table column lacks are not counted (``decode.unknownFields`` is
about values).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.columns import Column, StructOf
from pipeline.config import DecodeConfig, FieldConfig, RegistryConfig
from pipeline.decode.arrow_types import arrow_type

__all__ = ["KEY_PREFIX", "key_decode_config", "key_registry", "merge_key"]

KEY_PREFIX = "key: "
_NULL = "null value"  # the decoders' reason for a null value: a null key is no error


def key_registry(decode: DecodeConfig) -> RegistryConfig:
    """``decode.registry`` as the key's subject and schema id see it."""
    key, reg = decode.key, decode.registry
    assert key is not None and reg is not None
    return reg.model_copy(
        update={"record_name": key.record_name, "version": key.version, "schema_id": key.schema_id}
    )


def key_decode_config(decode: DecodeConfig, column: Column) -> DecodeConfig:
    """The configuration that decodes a resolved ``decode``'s keys into ``column``'s
    values: a struct's fields, or the one primitive column."""
    key = decode.key
    assert key is not None and key.schema_id is not None  # resolved (table_schema)
    (spec,) = [f for f in decode.schema_ if f.name == column.name]
    if isinstance(column.type, StructOf):
        assert isinstance(spec.type, dict)
        fields = [FieldConfig.model_validate(m) for m in spec.type["fields"]]
    else:
        fields = [spec]
    return decode.model_copy(
        update={
            "format": key.format,
            "registry": key_registry(decode),
            "schema_": fields,
            "key": None,
            "unknown_fields": "ignore",
        }
    )


def merge_key(
    data: list[pa.Array], error: pa.Array, column: Column, key_error: pa.Array
) -> tuple[pa.Array, pa.Array]:
    """(the key column from the key decoder's data columns, the value's reasons with the
    key's added where the value had none)."""
    null_key = pc.fill_null(pc.equal(key_error, _NULL), False)
    failed = pc.and_(pc.is_valid(key_error), pc.invert(null_key))
    if isinstance(column.type, StructOf):
        fields = list(arrow_type(column.type))
        invalid = pc.or_(null_key, failed)
        values: pa.Array = pa.StructArray.from_arrays(data, fields=fields, mask=invalid)
    else:
        (values,) = data
    why = pc.if_else(failed, pc.utf8_replace_slice(key_error, 0, 0, KEY_PREFIX), None)
    return values, pc.coalesce(error, why)
