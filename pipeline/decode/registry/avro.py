"""Avro values in the Confluent wire format → the table's columns, one batch at a time.

A value is ``0x00``, a 4-byte big-endian schema id, then the Avro binary encoding of one datum
written with that schema. Each value is read with its own writer schema (from the registry,
by id) and resolved to the table's schema (the *reader* schema: the subject's version the
table was built from) by Avro's resolution rules: fields the writer lacks take the reader's
default, promotions (int → long, float → double …) apply.

Records written with the table's own schema are read all at once, field by field
(:mod:`pipeline.decode.registry.avro_columns`), where that reader takes the schema. The
others — another version's records, schemas it does not take, datums it marks odd, and
whatever is refused before decoding (null, too large, not the wire format) — are read one
call to fastavro's compiled reader each, and become Arrow in one conversion (``pa.array``
of the row dicts against the table's struct type); the two parts are put back in the
batch's order. A schema that is not a record (an Avro key such as ``"string"``:
``decode.key``) is read into the one column given.

Reasons a record goes to the dead letters (``_error``), each naming what failed:
  * ``null value``; larger than ``decode.maxRecordBytes``;
  * ``not in the Confluent wire format`` (no magic byte, too short);
  * ``schema id N: not in the registry`` / ``... is a PROTOBUF schema, not AVRO``;
  * ``schema id N: does not decode: ...`` (truncated or corrupt payload) and
    ``schema id N: cannot be read as the table's schema: ...`` (resolution fails).
"""

from __future__ import annotations

import io
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.columns import Column
from pipeline.config import RegistryConfig
from pipeline.decode.arrow_types import arrow_type
from pipeline.decode.registry.avro_columns import compile_reader
from pipeline.decode.registry.avro_cursor import Cursor
from pipeline.decode.registry.wire import Decoded, WireValues, decode_each
from pipeline.decode.unknown_fields import UNKNOWN_TYPE

__all__ = ["AvroValues", "plain_values"]


@dataclass
class _Writer:
    """A writer schema by id: fastavro's parsed form, or why records with it are refused."""

    parsed: Any = None
    refused: str | None = None
    unknown: list[str] | None = None  # its top-level fields the table's schema lacks


@dataclass
class AvroValues:
    """Decodes one task's values; picklable (the registry client is made in the task)."""

    registry: RegistryConfig  # its schemaId is the table's (reader) schema
    columns: tuple[Column, ...]
    _ids: WireValues = field(init=False, repr=False)  # the client and the refused ids
    _writers: dict[int, _Writer] = field(default_factory=dict, repr=False)
    _reader: Any = field(default=None, repr=False)
    _uuid: bool | None = field(default=None, repr=False)
    _record_schema: bool | None = field(default=None, repr=False)
    _columnar: Any = field(default=False, repr=False)  # False: not compiled yet

    def __post_init__(self) -> None:
        self._ids = WireValues(self.registry, "AVRO")

    def __getstate__(self) -> dict[str, Any]:
        return {
            "registry": self.registry,
            "columns": self.columns,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def decode(
        self, values: pa.Array, too_big: pa.Array, big_msg: str
    ) -> tuple[list[pa.Array], pa.Array, pa.Array]:
        """(data columns, ``_error``, ``_unknown``), one row per value, in order. A record
        written with a newer schema than the table's has fields the table lacks: Avro's
        resolution drops them, and ``_unknown`` names them (``decode.unknownFields``)."""
        reader = self._columns_reader()
        fast = np.zeros(len(values), bool)
        if reader is not None and len(values):
            # the table's own schema id, in the wire format, not too large
            ours = b"\x00" + int(self.registry.schema_id or 0).to_bytes(4, "big")
            candidate = pc.and_(pc.starts_with(values, ours), pc.invert(too_big))
            fast = pc.fill_null(candidate, False).to_numpy(zero_copy_only=False)
        if not fast.any():
            return decode_each(
                values.to_pylist(), too_big.to_pylist(), big_msg, self.columns, self._record
            )
        at = np.flatnonzero(fast)
        every = len(at) == len(values)  # the usual batch: no copy of its values
        cursor = Cursor(values if every else values.take(pa.array(at)), 5)
        table = reader.read(cursor, np.arange(len(at)))
        odd = cursor.odd | (cursor.pos != cursor.end)  # bytes left over: odd too
        if not self._is_record():
            table = pa.StructArray.from_arrays([table], names=[self.columns[0].name])
        final = pa.struct([(c.name, arrow_type(c.type)) for c in self.columns])
        table = table.cast(final)
        if every and not odd.any():
            none = len(values)
            data = [table.field(i) for i in range(len(self.columns))]
            return data, pa.nulls(none, pa.string()), pa.nulls(none, UNKNOWN_TYPE)
        good = at[~odd]
        table = table.filter(pa.array(~odd))
        rest = pa.array(np.setdiff1d(np.arange(len(values)), good, assume_unique=True))
        slow, error, unknown = decode_each(
            values.take(rest).to_pylist(),
            too_big.take(rest).to_pylist(),
            big_msg,
            self.columns,
            self._record,
        )
        # both parts back in the batch's order (the fast rows were put first)
        order = pa.array(np.argsort(np.concatenate([good, rest.to_numpy()]), kind="stable"))
        slow_table = pa.StructArray.from_arrays(slow, fields=list(final))
        joined = pa.concat_arrays([table, slow_table]).take(order)
        none = len(good)
        error = pa.concat_arrays([pa.nulls(none, pa.string()), error]).take(order)
        unknown = pa.concat_arrays([pa.nulls(none, UNKNOWN_TYPE), unknown]).take(order)
        return [joined.field(i) for i in range(len(self.columns))], error, unknown

    def _columns_reader(self) -> Any:
        """The all-at-once reader of the table's schema, or None (fastavro reads each)."""
        if self._columnar is False:
            self._columnar = compile_reader(self._reader_json())
        return self._columnar

    def _record(self, raw: bytes) -> Decoded:
        schema_id = int.from_bytes(raw[1:5], "big")
        writer = self._writer(schema_id)
        if writer.refused is not None:
            return None, writer.refused, None
        buf = io.BytesIO(raw)
        buf.seek(5)
        try:
            # the table's own schema id: nothing to resolve (skipping it saves ~15 %)
            reader = None if schema_id == self.registry.schema_id else self._parsed_reader()
            record = fastavro.schemaless_reader(buf, writer.parsed, reader)
        except fastavro.read.SchemaResolutionError as e:
            why = f"cannot be read as the table's schema: {e}"
            return None, f"schema id {schema_id}: {why}", None
        except Exception as e:  # truncated, corrupt: the payload is the record's problem
            why = f"does not decode: {type(e).__name__}: {e}"
            return None, f"schema id {schema_id}: {why}", None
        if buf.tell() != len(raw):
            why = f"does not decode: {len(raw) - buf.tell()} bytes left over"
            return None, f"schema id {schema_id}: {why}", None
        if self._has_uuid():
            record = plain_values(record)
        if not self._is_record():
            record = {self.columns[0].name: record}
        return record, None, writer.unknown  # type: ignore[return-value]

    def _writer(self, schema_id: int) -> _Writer:
        found = self._writers.get(schema_id)
        if found is not None:
            return found
        refused = self._ids.reason(schema_id)
        if refused is not None:
            found = _Writer(refused=refused)
        else:
            text = self._ids.client().by_id(schema_id).parsed()
            extra: list[str] = []
            if self._is_record() and isinstance(text, dict) and "fields" in text:
                known = {f["name"] for f in self._reader_json()["fields"]}
                extra = sorted({f["name"] for f in text["fields"]} - known)
            found = _Writer(parsed=fastavro.parse_schema(text), unknown=extra or None)
        self._writers[schema_id] = found
        return found

    def _reader_json(self) -> Any:
        """The table's schema (parsed JSON), by its pinned id."""
        assert self.registry.schema_id is not None  # pinned at start (table_schema)
        return self._ids.client().by_id(self.registry.schema_id).parsed()

    def _is_record(self) -> bool:
        if self._record_schema is None:
            reader = self._reader_json()
            self._record_schema = isinstance(reader, dict) and reader.get("type") == "record"
        return self._record_schema

    def _has_uuid(self) -> bool:
        if self._uuid is None:
            self._uuid = '"logicalType": "uuid"' in json.dumps(self._reader_json())
        return self._uuid

    def _parsed_reader(self) -> Any:
        if self._reader is None:
            self._reader = fastavro.parse_schema(self._reader_json())
        return self._reader


def plain_values(value: Any) -> Any:
    """fastavro's values as Arrow takes them: UUIDs (stored as strings) as strings. Only
    for schemas with a ``uuid``: a walk over every value costs as much as the decode."""
    if isinstance(value, dict):
        return {k: plain_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_values(v) for v in value]
    if isinstance(value, uuid.UUID):
        return str(value)
    return value
