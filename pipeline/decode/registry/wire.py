"""The Confluent wire format, vectorised: ``0x00``, a 4-byte big-endian schema id, then the
payload. For ``decode.format: json-schema`` the payload is JSON text, decoded by the JSON
path (:mod:`pipeline.decode.arrow`) once the prefix is cut; each record's schema id must be
one the registry knows, of the right type (:meth:`WireValues.reason`, which the Avro path
asks too). The binary formats (Avro, Protobuf) share :func:`decode_each`: the checks every
value passes first and the one conversion of a batch's rows to Arrow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.columns import Column
from pipeline.config import RegistryConfig
from pipeline.decode.arrow_types import arrow_type, from_python_type
from pipeline.decode.registry.client import SchemaRegistry, UnknownSchema
from pipeline.decode.unknown_fields import UNKNOWN_TYPE

__all__ = ["NOT_WIRE", "Decoded", "WireValues", "decode_each"]

NOT_WIRE = "not in the Confluent wire format (no magic byte and schema id)"
_PREFIX = 5
#: one record's (row, error, unknown field names)
Decoded = tuple[dict[str, Any] | None, str | None, list[str] | None]


def decode_each(
    values: Sequence[bytes | None],
    too_big: Sequence[bool],
    big_msg: str,
    columns: Sequence[Column],
    record: Callable[[bytes], Decoded],
) -> tuple[list[pa.Array], pa.Array, pa.Array]:
    """A binary format's batch, one ``record`` call per wire-format value: (data columns,
    ``_error``, ``_unknown``), one row per value, in order. Null, over-size and
    non-wire-format values are refused here; the rows become Arrow in one conversion."""
    rows: list[dict[str, Any] | None] = []
    errors: list[str | None] = []
    unknown: list[list[str] | None] = []
    for raw, big in zip(values, too_big, strict=True):
        decoded: Decoded
        if raw is None:
            decoded = None, "null value", None
        elif big:
            decoded = None, big_msg, None
        elif len(raw) < _PREFIX or raw[0] != 0:
            decoded = None, NOT_WIRE, None
        else:
            decoded = record(raw)
        row, err, extra = decoded
        rows.append(row)
        errors.append(err)
        unknown.append(extra)
    final = pa.struct([(c.name, arrow_type(c.type)) for c in columns])
    first = pa.struct([(c.name, from_python_type(c.type)) for c in columns])
    table = pa.array(rows, type=first)
    if first != final:  # zoned timestamps: converted naive (UTC), the zone set by a cast
        table = table.cast(final)
    data = [table.field(i) for i in range(len(columns))]
    if table.null_count:  # a dead letter's columns are null too
        valid = table.is_valid()
        data = [pc.if_else(valid, d, pa.nulls(len(d), d.type)) for d in data]
    return data, pa.array(errors, pa.string()), pa.array(unknown, UNKNOWN_TYPE)


@dataclass
class WireValues:
    """Splits one task's values into payloads and the reasons records are refused;
    picklable (the registry client is made in the task)."""

    registry: RegistryConfig
    schema_type: str  # the registry's name of the format: "JSON"
    _client: SchemaRegistry | None = field(default=None, repr=False)
    _reasons: dict[int, str | None] = field(default_factory=dict, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {"registry": self.registry, "schema_type": self.schema_type}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def split(self, values: pa.Array) -> tuple[pa.Array, pa.Array]:
        """(payloads — the value itself where it is not in the wire format —, the reason
        each record is refused or null)."""
        n = len(values)
        wire = pc.fill_null(
            pc.and_(
                pc.greater_equal(pc.binary_length(values), _PREFIX),
                pc.equal(pc.binary_slice(values, 0, 1), pa.scalar(b"\x00", pa.binary())),
            ),
            False,
        )
        reason: list[str | None] = [None] * n
        rows = pc.indices_nonzero(wire).to_numpy()
        if len(rows) < n:
            for i in pc.indices_nonzero(pc.invert(wire)).to_numpy():
                reason[i] = NOT_WIRE if values[int(i)].is_valid else None
        if len(rows):
            ids_bin = pc.binary_slice(pc.take(values, pa.array(rows)), 1, _PREFIX)
            ids_bin = ids_bin.cast(pa.binary())
            data = ids_bin.buffers()[2]
            ids = np.frombuffer(data, dtype=">u4", count=len(rows))
            for sid in np.unique(ids):
                why = self.reason(int(sid))
                if why is not None:
                    for i in rows[ids == sid]:
                        reason[int(i)] = why
        longest = pc.max(pc.binary_length(values)).as_py() or 0
        # an explicit stop: pyarrow 26's binary_slice fails without one
        payload = pc.if_else(wire, pc.binary_slice(values, _PREFIX, longest + 1), values)
        return payload, pa.array(reason, pa.string())

    def client(self) -> SchemaRegistry:
        """The task's registry client (made on first use, cached by schema id)."""
        if self._client is None:
            self._client = SchemaRegistry(self.registry)
        return self._client

    def reason(self, schema_id: int) -> str | None:
        """Why records written with ``schema_id`` are refused (not in the registry, or
        another format's schema), or None; asked once per id."""
        if schema_id not in self._reasons:
            try:
                kind = self.client().by_id(schema_id).schema_type.upper()
            except UnknownSchema:
                self._reasons[schema_id] = f"schema id {schema_id}: not in the registry"
            else:
                self._reasons[schema_id] = (
                    None
                    if kind == self.schema_type
                    else f"schema id {schema_id}: is a {kind} schema, not {self.schema_type}"
                )
        return self._reasons[schema_id]
