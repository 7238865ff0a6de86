"""Decode Kafka values the way the configured schema says, and compare rows with them.

Vectorised with pyarrow: one window's values become one newline-delimited JSON buffer
parsed by ``pyarrow.json`` with an explicit schema, then cast per column (timestamps and
dates arrive as strings; decimals at a wide scale, rounded half-up like Spark). A buffer
that fails to parse is bisected, so only the records pyarrow cannot decode are decoded
alone; they come back as *undecodable* (a main-table row whose record we cannot decode
is reported as a mismatch on ``_decode``).

Limits (documented in docs/verify.md): Spark's JSON reader is more lenient than
pyarrow's in corner cases (a number where a string is declared, numeric timestamps,
single quotes); such rows show as ``_decode`` mismatches, never as passes.
"""

from __future__ import annotations

import base64
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from pipeline.config import DecodeConfig
from pipeline.errors import ConfigError

_ZONED = r"[Tt ]\d{2}:\d{2}.*([Zz]|[+-]\d{2}(:?\d{2})?)$"
_DECIMAL = re.compile(r"decimal\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)")
_SIMPLE: dict[str, tuple[pa.DataType, pa.DataType]] = {
    # configured type: (type pyarrow.json reads, type of the decoded column)
    "boolean": (pa.bool_(), pa.bool_()),
    "int": (pa.int64(), pa.int32()),
    "long": (pa.int64(), pa.int64()),
    "float": (pa.float64(), pa.float32()),
    "double": (pa.float64(), pa.float64()),
    "string": (pa.string(), pa.string()),
    "uuid": (pa.string(), pa.string()),
    "binary": (pa.string(), pa.binary()),  # base64 in JSON, like Spark
    "date": (pa.string(), pa.date32()),
    "timestamp": (pa.string(), pa.timestamp("us")),
    "timestamptz": (pa.string(), pa.timestamp("us", tz="UTC")),
}


class UndecodableBlock(Exception):
    """pyarrow cannot decode this block of values as the schema says."""


class ValueDecoder:
    """Kafka value bytes → one typed column per ``decode.schema`` field."""

    def __init__(self, cfg: DecodeConfig) -> None:
        self.fields: list[tuple[str, str, pa.DataType, pa.DataType]] = []
        for f in cfg.schema_:
            kind = f.type.strip().lower()
            if kind in _SIMPLE:
                read, final = _SIMPLE[kind]
            elif m := _DECIMAL.fullmatch(kind):
                p, s = int(m.group(1)), int(m.group(2))
                read = pa.decimal128(38, min(38 - (p - s), max(s, 18)))
                final = pa.decimal128(p, s)
            else:
                raise ConfigError(f"decode.schema: field {f.name!r} has unknown type {f.type!r}")
            self.fields.append((f.name, kind, read, final))
        self.read_schema = pa.schema([(n, r) for n, _, r, _ in self.fields])
        self.schema = pa.schema([(n, t) for n, _, _, t in self.fields])

    def decode(self, values: pa.Array) -> tuple[pa.Table, np.ndarray]:
        """(decoded rows aligned with ``values``, bool mask of rows that decoded)."""
        if len(values) == 0:
            return self.schema.empty_table(), np.zeros(0, dtype=bool)
        pieces: list[tuple[pa.Table, bool]] = []
        self._decode_into(values, pieces)
        table = pa.concat_tables([t for t, _ in pieces])
        ok = np.concatenate([np.full(t.num_rows, good) for t, good in pieces])
        return table, ok

    def _decode_into(self, values: pa.Array, out: list[tuple[pa.Table, bool]]) -> None:
        try:
            out.append((self._block(values), True))
        except UndecodableBlock:
            if len(values) == 1:
                out.append((self._nulls(1), False))
                return
            half = len(values) // 2
            self._decode_into(values.slice(0, half), out)
            self._decode_into(values.slice(half), out)

    def _nulls(self, n: int) -> pa.Table:
        return pa.table({f.name: pa.nulls(n, f.type) for f in self.schema})

    def _block(self, values: pa.Array) -> pa.Table:
        if values.null_count:
            raise UndecodableBlock("null value")
        # Raw newlines cannot occur inside JSON strings: as whitespace they are spaces.
        flat = pc.replace_substring_regex(values, pattern="[\r\n]", replacement=" ")
        lines = pc.binary_join_element_wise(
            flat, pa.scalar(b"", flat.type), pa.scalar(b"\n", flat.type)
        )
        buf = _buffer(lines)
        try:
            raw = pj.read_json(
                pa.BufferReader(buf),
                read_options=pj.ReadOptions(block_size=max(1 << 20, len(buf) + 1)),
                parse_options=pj.ParseOptions(
                    explicit_schema=self.read_schema, unexpected_field_behavior="ignore"
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise UndecodableBlock(str(e)) from None
        if raw.num_rows != len(values):
            raise UndecodableBlock("a value is not exactly one JSON object")
        try:
            cols = [
                self._finish(raw.column(name).combine_chunks(), kind, final)
                for name, kind, _, final in self.fields
            ]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as e:
            raise UndecodableBlock(str(e)) from None
        return pa.Table.from_arrays(cols, schema=self.schema)

    @staticmethod
    def _finish(col: pa.Array, kind: str, final: pa.DataType) -> pa.Array:
        if kind in ("timestamp", "timestamptz"):
            zoned = pc.fill_null(pc.match_substring_regex(col, _ZONED), False)
            utc = pa.timestamp("us", tz="UTC")
            with_zone = pc.cast(pc.if_else(zoned, col, pa.scalar(None, pa.string())), utc)
            # no zone: Spark reads it in the session time zone, which the pipeline sets to UTC
            wall = pc.cast(pc.if_else(zoned, pa.scalar(None, pa.string()), col), pa.timestamp("us"))
            merged = pc.if_else(zoned, with_zone, pc.cast(wall, utc))
            return pc.cast(merged, final)
        if kind == "binary":
            # per-row: Arrow has no base64 kernel
            return pa.array(
                [
                    None if v is None else base64.b64decode(v, validate=True)
                    for v in col.to_pylist()
                ],
                pa.binary(),
            )
        if pa.types.is_decimal(final):
            return pc.cast(pc.round(col, ndigits=final.scale, round_mode="half_up"), final)
        return pc.cast(col, final)


def _buffer(lines: pa.Array) -> bytes:
    """The concatenated bytes of a binary array without per-row Python."""
    offsets = lines.buffers()[1]
    data = lines.buffers()[2]
    width = np.int64 if pa.types.is_large_binary(lines.type) else np.int32
    first = np.frombuffer(
        offsets, dtype=width, count=len(lines) + 1, offset=lines.offset * np.dtype(width).itemsize
    )
    return data.to_pybytes()[int(first[0]) : int(first[-1])] if data is not None else b""


def differs(actual: pa.Array | pa.ChunkedArray, expected: pa.Array) -> np.ndarray:
    """Row-wise ``actual != expected`` with nulls equal to nulls, as a numpy bool mask.
    ``actual`` is cast to ``expected``'s type first (tables store time zones as
    ``UTC`` or ``+00:00``, Hudi hands back its own widths)."""
    if isinstance(actual, pa.ChunkedArray):
        actual = actual.combine_chunks()
    if not actual.type.equals(expected.type):
        try:
            actual = pc.cast(actual, expected.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return np.ones(len(actual), dtype=bool)
    neq = pc.fill_null(pc.not_equal(actual, expected), False)
    one_null = pc.xor(pc.is_null(actual), pc.is_null(expected))
    return np.asarray(pc.or_(neq, one_null).to_numpy(zero_copy_only=False), dtype=bool)
