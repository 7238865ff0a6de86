"""Protobuf values in the Confluent wire format → the table's columns, one batch at a time.

A value is ``0x00``, a 4-byte big-endian schema id, the message index path (zig-zag varints:
a count, then the indexes; a lone ``0`` means the first message), then the message. The
table's schema is the message its columns were built from (``decode.registry.recordName``,
or the first message of the table's schema id). Each record is parsed with that *reader*
message: Protobuf resolves by field number, so a record of any compatible version parses.
What its own (writer) schema says is used to check that reading is sound, once per schema
id and message:

  * every field both have must have the same type or a widening (``int32`` → ``int64``,
    ``uint32`` → ``uint64``/``int64``, ``sint32`` → ``sint64``, ``string`` → ``bytes``,
    one enum for another); anything else would be misread, so the records are refused;
  * a column the writer's message lacks is null in its rows (not Protobuf's zero default:
    the field did not exist), at any depth;
  * the writer's top-level fields the table lacks are named in ``_unknown``.

Reasons a record goes to the dead letters (``_error``), each naming what failed:
  * ``null value``; larger than ``decode.maxRecordBytes``; ``not in the Confluent wire
    format``; ``schema id N: not in the registry`` / ``... is a AVRO schema, not PROTOBUF``;
  * ``schema id N: cannot be read as the table's schema: ...`` (another message, a changed
    type, a schema that does not compile);
  * ``schema id N: does not decode: ...`` (a bad index path, a truncated or corrupt message).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any

import pyarrow as pa
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from pipeline.columns import Column
from pipeline.columns.protobuf import WELL_KNOWN, type_name
from pipeline.config import RegistryConfig
from pipeline.decode.registry.proto_files import ProtoCompileError, compile_schema
from pipeline.decode.registry.wire import Decoded, WireValues, decode_each

__all__ = ["ProtobufValues", "message_indexes"]

Convert = Callable[[Message], Any]
_F = FieldDescriptor
# writer type -> the reader types that read it unchanged (besides itself)
_WIDER: dict[str, set[str]] = {
    "int32": {"int64"},
    "uint32": {"uint64", "int64"},
    "sint32": {"sint64"},
    "string": {"bytes"},
}


@dataclass
class _Reading:
    """How records of one writer (schema id, message) are read, or why they are refused."""

    convert: Convert | None = None
    refused: str | None = None
    unknown: list[str] | None = None


@dataclass
class ProtobufValues:
    """Decodes one task's values; picklable (the registry client is made in the task)."""

    registry: RegistryConfig  # its schemaId is the table's (reader) schema
    columns: tuple[Column, ...]
    _ids: WireValues = field(init=False, repr=False)
    _readings: dict[tuple[int, tuple[int, ...]], _Reading] = field(default_factory=dict)
    _reader: Descriptor | None = field(default=None, repr=False)
    _parse: Callable[[bytes], Message] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._ids = WireValues(self.registry, "PROTOBUF")

    def __getstate__(self) -> dict[str, Any]:
        return {"registry": self.registry, "columns": self.columns}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def decode(
        self, values: list[bytes | None], too_big: list[bool], big_msg: str
    ) -> tuple[list[pa.Array], pa.Array, pa.Array]:
        """(data columns, ``_error``, ``_unknown``), one row per value, in order."""
        return decode_each(values, too_big, big_msg, self.columns, self._record)

    def _record(self, raw: bytes) -> Decoded:
        schema_id = int.from_bytes(raw[1:5], "big")
        refused = self._ids.reason(schema_id)  # first: another format's bytes follow
        if refused is not None:
            return None, refused, None
        try:
            indexes, start = message_indexes(raw, 5)
        except ValueError as e:
            return None, f"schema id {schema_id}: does not decode: {e}", None
        reading = self._reading(schema_id, indexes)
        if reading.refused is not None:
            return None, reading.refused, None
        assert reading.convert is not None
        try:
            message = self._parser()(raw[start:])
        except DecodeError as e:
            return None, f"schema id {schema_id}: does not decode: {e}", None
        return reading.convert(message), None, reading.unknown

    def _reading(self, schema_id: int, indexes: tuple[int, ...]) -> _Reading:
        key = (schema_id, indexes)
        found = self._readings.get(key)
        if found is None:
            found = self._resolve(schema_id, indexes)
            self._readings[key] = found
        return found

    def _resolve(self, schema_id: int, indexes: tuple[int, ...]) -> _Reading:
        refused = self._ids.reason(schema_id)
        if refused is not None:
            return _Reading(refused=refused)
        prefix = f"schema id {schema_id}: cannot be read as the table's schema"
        client = self._ids.client()
        try:
            writer = compile_schema(client, client.by_id(schema_id)).by_indexes(list(indexes))
        except ProtoCompileError as e:
            return _Reading(refused=f"{prefix}: {e}")
        reader = self._reader_message()
        if writer.full_name != reader.full_name:
            return _Reading(
                refused=f"{prefix}: message {writer.full_name} is not the table's "
                f"{reader.full_name}"
            )
        why = _incompatible(writer, reader, reader.name)
        if why is not None:
            return _Reading(refused=f"{prefix}: {why}")
        extra = sorted(f.name for f in writer.fields if f.number not in reader.fields_by_number)
        return _Reading(convert=_converter(reader, writer), unknown=extra or None)

    def _reader_message(self) -> Descriptor:
        if self._reader is None:
            assert self.registry.schema_id is not None  # pinned at start (table_schema)
            client = self._ids.client()
            compiled = compile_schema(client, client.by_id(self.registry.schema_id))
            self._reader = compiled.message(self.registry.record_name)
        return self._reader

    def _parser(self) -> Callable[[bytes], Message]:
        if self._parse is None:
            self._parse = message_factory.GetMessageClass(self._reader_message()).FromString
        return self._parse


def message_indexes(raw: bytes, at: int) -> tuple[tuple[int, ...], int]:
    """The message index path that starts at ``at`` and where the message starts."""
    count, at = _zigzag(raw, at)
    if count == 0:
        return (0,), at
    if count < 0 or count > 64:
        raise ValueError(f"a message index path of {count} entries")
    out = []
    for _ in range(count):
        value, at = _zigzag(raw, at)
        if value < 0:
            raise ValueError(f"message index {value}")
        out.append(value)
    return tuple(out), at


def _zigzag(raw: bytes, at: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if at >= len(raw) or shift > 63:
            raise ValueError("a truncated message index path")
        byte = raw[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), at
        shift += 7


def _incompatible(writer: Descriptor, reader: Descriptor, path: str) -> str | None:
    """Why a field both messages have would be misread, or None."""
    for w in writer.fields:
        r = reader.fields_by_number.get(w.number)
        if r is None:
            continue
        where = f"field {path}.{r.name} (number {w.number})"
        if w.is_repeated != r.is_repeated or _is_map(w) != _is_map(r):
            return f"{where} changed between single, repeated and map"
        if _is_map(w):
            w, r = w.message_type.fields_by_name["value"], r.message_type.fields_by_name["value"]
        wt, rt = type_name(w), type_name(r)
        if (w.message_type is None) != (r.message_type is None) or (
            w.message_type is not None and (wt in WELL_KNOWN or rt in WELL_KNOWN) and wt != rt
        ):
            return f"{where} is {wt}, the table's is {rt}"
        if w.message_type is not None:
            why = _incompatible(w.message_type, r.message_type, f"{path}.{r.name}")
            if why is not None:
                return why
        elif wt != rt and rt not in _WIDER.get(wt, set()) and not (wt == rt == "enum"):
            return f"{where} is {wt}, the table's is {rt}"
    return None


def _is_map(f: FieldDescriptor) -> bool:
    return f.message_type is not None and f.message_type.GetOptions().map_entry


def _converter(reader: Descriptor, writer: Descriptor) -> Convert:
    """A message → its row: the reader's fields, null where the writer has no such field."""
    fields = [(r.name, _field(r, writer.fields_by_number.get(r.number))) for r in reader.fields]

    def convert(message: Message) -> dict[str, Any]:
        return {name: fn(message) for name, fn in fields}

    return convert


def _absent(_: Message) -> None:
    return None


def _field(r: FieldDescriptor, w: FieldDescriptor | None) -> Convert:
    if w is None:
        return _absent
    name = r.name
    if _is_map(r):
        value = _value(
            r.message_type.fields_by_name["value"], w.message_type.fields_by_name["value"]
        )
        return lambda m: {k: value(v) for k, v in getattr(m, name).items()}
    one = _value(r, w)
    if r.is_repeated:
        return lambda m: [one(v) for v in getattr(m, name)]
    if r.message_type is not None or r.has_presence:
        return lambda m: one(getattr(m, name)) if m.HasField(name) else None
    return lambda m: one(getattr(m, name))


def _value(r: FieldDescriptor, w: FieldDescriptor) -> Convert:
    """One value of the field (an element, a map value) → the column's value."""
    if r.type == _F.TYPE_ENUM:
        names = {v.number: v.name for v in r.enum_type.values}
        return lambda v: names.get(v, str(v))
    if r.message_type is None:
        return _same
    full = r.message_type.full_name
    if full == "google.protobuf.Timestamp":
        return lambda v: v.ToDatetime(tzinfo=UTC)
    if full in WELL_KNOWN:
        return lambda v: v.value
    return _converter(r.message_type, w.message_type)


def _same(value: Any) -> Any:
    return value
