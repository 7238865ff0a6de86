"""Decode Kafka records into table rows in Arrow, without Spark (``decode.engine: arrow``).

Produces exactly the columns of :func:`pipeline.decode.spark.decode` (data columns, Kafka
coordinates, ``_error``, ``_raw_key``/``_raw_value``/``_raw_headers``) from the record
batches :func:`pipeline.source.reader.read_ranges` yields, so the same task code
(``pipeline.spark.writer.run_task``) writes both engines' output.

How
  * Fast path: the values of well-formed candidates (non-null, not over-size, one
    ``{...}`` object without raw line breaks) are joined into one NDJSON buffer and parsed
    by ``pyarrow.json`` against the configured schema. pyarrow is stricter than Spark
    (e.g. a number for a string field), so a block that fails is bisected; the few records
    left over go to the slow path. Timestamp strings in the canonical ISO-8601 shape are
    converted vectorised; any other shape goes to the slow path too.
  * Slow path (rare records): ``json.loads`` and per-type rules that follow Spark's
    ``from_json`` (PERMISSIVE): numbers as strings keep their JSON text, a value of the
    wrong type makes the whole record malformed, non-numeric ``NaN``/``Infinity`` are
    accepted for floating point, decimals are rounded half-up to the scale, timestamps are
    ISO-8601 strings or epoch seconds.

Invariants
  * One output row per input row, in input order; every input row's coordinates survive.
  * A row has a non-null ``_error`` iff Spark's decoder would give it one; the error
    precedence is the same (null value, over-size, malformed, first missing required).
  * Known differences from Spark's parser (documented in README): single-quoted JSON,
    trailing text after the object and exotic date-time formats accepted by Spark's
    lenient fallback parser are dead-lettered as malformed here; naive timestamps are read
    as UTC (the session time zone the pipeline sets).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from pipeline.config import DecodeConfig
from pipeline.decode.spark import ERROR_COL, KAFKA_COLS

MALFORMED = "malformed JSON or a value of the wrong type"
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_DECIMAL = re.compile(r"decimal\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)")
# canonical ISO-8601 date-time: the shape converted vectorised
_ISO_TS = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})?$"
_ISO_TS_ZONED = r"(Z|[+-]\d{2}:\d{2})$"
# what the slow path accepts (Spark's lenient parser accepts more; see module docstring)
_TS = re.compile(
    r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})(?:[T ](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,9}))?)?)?"
    r"\s*(Z|UTC|[+-]\d{1,2}(?::?\d{2})?)?\s*$"
)
_BLOCK_MIN = 64  # below this many rows a failing block is decoded row by row


def _value_bytes(values: pa.Array) -> pa.Buffer | None:
    """The bytes of a binary array's values, contiguous (its data buffer cut to the slice
    the array covers); None for an empty array."""
    _, off_buf, data = values.buffers()
    if len(values) == 0 or data is None:
        return None
    width = pa.int64() if pa.types.is_large_binary(values.type) else pa.int32()
    offsets = pa.Array.from_buffers(width, len(values) + 1, [None, off_buf], offset=values.offset)
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    return data.slice(start, end - start)


def _any_line_break(values: pa.Array) -> bool:
    """Whether any value holds a raw ``\\n`` or ``\\r``: one scan of the data buffer."""
    data = _value_bytes(values)
    if data is None:
        return False
    chunk = data.to_pybytes()
    return b"\n" in chunk or b"\r" in chunk


def arrow_type(type_name: str) -> pa.DataType:
    """Arrow type of a configured field type (the types ``iceberg.schema`` allows)."""
    t = type_name.strip().lower()
    simple: dict[str, pa.DataType] = {
        "boolean": pa.bool_(),
        "int": pa.int32(),
        "long": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "string": pa.string(),
        "uuid": pa.string(),
        "binary": pa.binary(),
        "date": pa.date32(),
        "timestamp": pa.timestamp("us"),
        "timestamptz": pa.timestamp("us", tz="UTC"),
    }
    if t in simple:
        return simple[t]
    if m := _DECIMAL.fullmatch(t):
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    raise ValueError(f"type {type_name!r} is not supported by decode.engine arrow")


@dataclass(frozen=True)
class ArrowDecoder:
    """Picklable decoder for one configuration (built on the driver, run in tasks)."""

    cfg: DecodeConfig
    include_headers: bool

    @property
    def fields(self) -> list[tuple[str, pa.DataType, bool]]:
        return [(f.name, arrow_type(f.type), f.required) for f in self.cfg.schema_]

    def decode(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        n = batch.num_rows
        value = batch.column("value")
        key = batch.column("key")
        headers = (
            batch.column("headers") if self.include_headers else pa.nulls(n, type=HEADERS_TYPE)
        )
        limit = self.cfg.max_record_bytes
        too_big = pc.fill_null(pc.greater(pc.binary_length(value), limit), False)
        big_msg = f"record larger than {limit} bytes"
        coords = [
            batch.column("topic"),
            batch.column("partition"),
            batch.column("offset"),
            batch.column("timestamp"),
        ]
        if self.cfg.raw:
            error = pc.if_else(too_big, pa.scalar(big_msg), pa.scalar(None, pa.string()))
            # the raw table always has a headers column (null without includeHeaders)
            raw, raw_names = [key, value, headers], ["key", "value", "headers"]
            return self._assemble(raw, raw_names, coords, error, too_big, key, value, headers)

        data, error = self._decode_json(value, too_big, big_msg)
        names = [f[0] for f in self.fields]
        bad = pc.is_valid(error)
        return self._assemble(data, names, coords, error, bad, key, value, headers)

    def _assemble(
        self,
        data: Sequence[pa.Array],
        names: Sequence[str],
        coords: Sequence[pa.Array],
        error: pa.Array,
        bad: pa.Array,
        key: pa.Array,
        value: pa.Array,
        headers: pa.Array,
    ) -> pa.RecordBatch:
        def on_error(col: pa.Array) -> pa.Array:
            return pc.if_else(bad, col, pa.nulls(len(col), type=col.type))

        arrays = [*data, *coords, error, on_error(key), on_error(value), on_error(headers)]
        all_names = [*names, *KAFKA_COLS, ERROR_COL, "_raw_key", "_raw_value", "_raw_headers"]
        return pa.RecordBatch.from_arrays(arrays, names=all_names)

    # -- JSON --------------------------------------------------------------------------
    def _decode_json(
        self, value: pa.Array, too_big: pa.Array, big_msg: str
    ) -> tuple[list[pa.Array], pa.Array]:
        n = len(value)
        fields = self.fields
        # candidates for the vectorised parser: one object per line, nothing else
        candidate = pc.and_(
            pc.and_(pc.is_valid(value), pc.invert(too_big)),
            pc.and_(pc.starts_with(value, b"{"), pc.ends_with(value, b"}")),
        )
        candidate = pc.fill_null(candidate, False)
        if _any_line_break(value):  # rare: only then find the rows (a per-row scan costs
            # as much as the JSON parse at ~1.2 KB; one pass over the buffer a twentieth)
            breaks = pc.or_(pc.match_substring(value, "\n"), pc.match_substring(value, "\r"))
            candidate = pc.and_(candidate, pc.invert(pc.fill_null(breaks, False)))
        cand_idx = pc.indices_nonzero(candidate)
        fast_rows, slow_idx = self._parse_fast(pc.take(value, cand_idx), cand_idx)
        other_idx = pc.indices_nonzero(pc.invert(candidate))
        slow_all = pa.concat_arrays([slow_idx.cast(pa.uint64()), other_idx.cast(pa.uint64())])
        slow_vals = pc.take(value, slow_all) if len(slow_all) else value.slice(0, 0)
        slow_big = pc.take(too_big, slow_all) if len(slow_all) else too_big.slice(0, 0)
        slow = self._decode_rows(slow_vals.to_pylist(), slow_big.to_pylist(), big_msg)
        # stitch fast and slow rows back into input order
        order = pa.concat_arrays([fast_rows.column("__row").combine_chunks(), slow_all])
        perm = pc.sort_indices(order)
        data = []
        for i, (name, typ, _) in enumerate(fields):
            fast_col = fast_rows.column(name).combine_chunks()
            col = pa.concat_arrays([fast_col.cast(typ), slow[i]])
            data.append(pc.take(col, perm))
        err_fast = self._required_errors(fast_rows, len(fast_rows))
        error = pc.take(pa.concat_arrays([err_fast, slow[-1]]), perm)
        assert len(error) == n
        return data, error

    def _required_errors(self, rows: pa.Table, n: int) -> pa.Array:
        error: pa.Array = pa.nulls(n, type=pa.string())
        for name, _, required in reversed(self.fields):
            if required:
                missing = pc.is_null(rows.column(name).combine_chunks())
                msg = pa.scalar(f"required field {name!r} is missing or null")
                error = pc.if_else(missing, msg, error)
        return error

    def _parse_fast(self, values: pa.Array, rows: pa.Array) -> tuple[pa.Table, pa.Array]:
        """Parse candidates vectorised; returns (table with ``__row``, rows left over)."""
        parsed: list[pa.Table] = []
        leftover: list[pa.Array] = []
        stack = [(0, len(values))]
        while stack:
            lo, hi = stack.pop()
            if hi <= lo:
                continue
            part, part_rows = values.slice(lo, hi - lo), rows.slice(lo, hi - lo)
            table = self._parse_block(part)
            if table is not None:
                table, odd = self._convert_timestamps(table)
                if odd is not None:
                    leftover.append(pc.filter(part_rows, odd))
                    table = table.filter(pc.invert(odd))
                    part_rows = pc.filter(part_rows, pc.invert(odd))
                parsed.append(table.append_column("__row", part_rows.cast(pa.uint64())))
            elif hi - lo <= _BLOCK_MIN:
                leftover.append(part_rows)
            else:
                mid = (lo + hi) // 2
                stack += [(mid, hi), (lo, mid)]
        schema = pa.schema([*self._fast_schema(converted=True), ("__row", pa.uint64())])
        out = pa.concat_tables(parsed).cast(schema) if parsed else schema.empty_table()
        left = (
            pa.concat_arrays([a.cast(pa.uint64()) for a in leftover])
            if leftover
            else pa.array([], pa.uint64())
        )
        return out, left

    def _fast_schema(self, converted: bool = False) -> pa.Schema:
        out = []
        for name, typ, _ in self.fields:
            is_ts = pa.types.is_timestamp(typ) or pa.types.is_date(typ)
            if is_ts and not converted:
                typ = pa.string()  # parsed below: only the canonical shape is vectorised
            if pa.types.is_binary(typ) and not converted:
                typ = pa.int8()  # base64 strings fail here on purpose -> slow path
            out.append(pa.field(name, typ))
        return pa.schema(out)

    def _parse_block(self, values: pa.Array) -> pa.Table | None:
        joined = pc.binary_join_element_wise(values, pa.scalar(b""), pa.scalar(b"\n"))
        span = _value_bytes(joined)
        data = span if span is not None else b""
        try:
            table = pj.read_json(
                pa.BufferReader(data),
                read_options=pj.ReadOptions(use_threads=False, block_size=max(len(data), 1 << 20)),
                parse_options=pj.ParseOptions(
                    explicit_schema=self._fast_schema(), unexpected_field_behavior="ignore"
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        if table.num_rows != len(values):  # e.g. two objects on one line
            return None
        return table

    def _convert_timestamps(self, table: pa.Table) -> tuple[pa.Table, pa.Array | None]:
        """Canonical ISO strings -> timestamps/dates; mask of rows needing the slow path."""
        odd: pa.Array | None = None
        for name, typ, _ in self.fields:
            if not (pa.types.is_timestamp(typ) or pa.types.is_date(typ)):
                continue
            col = table.column(name).combine_chunks()
            if pa.types.is_date(typ):
                ok = pc.match_substring_regex(col, r"^\d{4}-\d{2}-\d{2}$")
                zoned = None
            else:
                ok = pc.match_substring_regex(col, _ISO_TS)
                zoned = pc.match_substring_regex(col, _ISO_TS_ZONED)
                if typ.tz is None:  # TIMESTAMP_NTZ: a zone makes the value invalid
                    ok = pc.and_(ok, pc.invert(zoned))
            bad = pc.fill_null(pc.invert(ok), False)
            odd = bad if odd is None else pc.or_(odd, bad)
            clean = pc.if_else(bad, pa.scalar(None, pa.string()), col)
            if pa.types.is_date(typ):
                conv = clean.cast(pa.date32())
            elif typ.tz is None:
                conv = pc.replace_substring(clean, "T", " ").cast(typ)
            else:
                assert zoned is not None
                naive = pc.if_else(pc.fill_null(zoned, False), pa.scalar(None, pa.string()), clean)
                with_zone = pc.if_else(pc.fill_null(zoned, False), clean, None)
                conv = pc.coalesce(
                    with_zone.cast(typ),
                    pc.replace_substring(naive, "T", " ").cast(pa.timestamp("us")).cast(typ),
                )
            table = table.set_column(table.schema.get_field_index(name), name, conv)
        if odd is not None and not pc.any(odd).as_py():
            odd = None
        return table, odd

    # -- slow path -----------------------------------------------------------------------
    def _decode_rows(
        self, values: list[bytes | None], too_big: list[bool | None], big_msg: str
    ) -> list[pa.Array]:
        fields = self.fields
        convs = [_converter(t) for _, t, _ in fields]
        cols: list[list[Any]] = [[] for _ in fields]
        errors: list[str | None] = []
        for raw, big in zip(values, too_big, strict=True):
            row: list[Any] | None = None
            err: str | None = None
            if raw is None:
                err = "null value"
            elif big:
                err = big_msg
            else:
                row, ok = _parse_row(raw, fields, convs)
                if not ok or row is None:
                    err = MALFORMED
                else:
                    for (name, _, required), v in zip(fields, row, strict=True):
                        if required and v is None:
                            err = f"required field {name!r} is missing or null"
                            break
            for i in range(len(fields)):
                cols[i].append(row[i] if row is not None else None)
            errors.append(err)
        out = [pa.array(c, type=t) for c, (_, t, _) in zip(cols, fields, strict=True)]
        out.append(pa.array(errors, type=pa.string()))
        return out


class _Bad(Exception):
    """A field value of the wrong type: the whole record is malformed (PERMISSIVE)."""


def _parse_row(
    raw: bytes, fields: list[tuple[str, pa.DataType, bool]], convs: list[Callable[[Any], Any]]
) -> tuple[list[Any] | None, bool]:
    """(field values, well-formed). Like Spark's PERMISSIVE mode a field of the wrong type
    becomes null while the others keep their values, and the record counts as malformed."""
    try:
        obj = json.loads(raw.decode("utf-8", errors="replace"), parse_float=decimal.Decimal)
    except ValueError:
        return None, False
    if not isinstance(obj, dict):
        return None, False
    row: list[Any] = []
    ok = True
    for (name, _, _), conv in zip(fields, convs, strict=True):
        try:
            row.append(conv(obj.get(name)))
        except (_Bad, ValueError, ArithmeticError, OverflowError):
            row.append(None)
            ok = False
    return row, ok


_FLOAT_WORDS = {
    "NaN": math.nan,
    "+NaN": math.nan,
    "-NaN": math.nan,
    "Infinity": math.inf,
    "+Infinity": math.inf,
    "+INF": math.inf,
    "-Infinity": -math.inf,
    "-INF": -math.inf,
}


def _converter(typ: pa.DataType) -> Callable[[Any], Any]:
    def string(v: Any) -> Any:
        if v is None or isinstance(v, str):
            return v
        return json.dumps(v, separators=(",", ":"), default=_json_number)

    def integer(bits: int) -> Callable[[Any], Any]:
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

        def conv(v: Any) -> Any:
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise _Bad
            return v

        return conv

    def floating(v: Any) -> Any:
        if v is None:
            return None
        if isinstance(v, bool):
            raise _Bad
        if isinstance(v, int | float | decimal.Decimal):
            return float(v)
        if isinstance(v, str) and v in _FLOAT_WORDS:
            return _FLOAT_WORDS[v]
        raise _Bad

    def boolean(v: Any) -> Any:
        if v is None or isinstance(v, bool):
            return v
        raise _Bad

    def dec(v: Any) -> Any:
        if v is None:
            return None
        if isinstance(v, bool | float):
            raise _Bad
        d = decimal.Decimal(v) if isinstance(v, int | str) else v
        if not isinstance(d, decimal.Decimal) or not d.is_finite():
            raise _Bad
        q = d.quantize(decimal.Decimal(1).scaleb(-typ.scale), rounding=decimal.ROUND_HALF_UP)
        if len(q.as_tuple().digits) > typ.precision:
            raise _Bad
        return q

    def binary(v: Any) -> Any:
        if v is None:
            return None
        if not isinstance(v, str):
            raise _Bad
        try:
            return base64.b64decode(v, validate=True)
        except binascii.Error as e:
            raise _Bad from e

    def date(v: Any) -> Any:
        if v is None:
            return None
        if not isinstance(v, str):
            raise _Bad
        m = _TS.match(v)
        if m is None or m.group(4) is not None or m.group(8) is not None:
            raise _Bad
        return dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))

    def timestamp(v: Any) -> Any:
        if v is None:
            return None
        if isinstance(v, bool):
            raise _Bad
        if isinstance(v, int):  # epoch seconds
            return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=v)
        if not isinstance(v, str):
            raise _Bad
        m = _TS.match(v)
        if m is None:
            raise _Bad
        y, mo, d, h, mi, s, frac, zone = m.groups()
        if zone is not None and typ.tz is None:
            raise _Bad
        micros = int((frac or "0")[:6].ljust(6, "0"))
        ts = dt.datetime(
            int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0), micros, dt.UTC
        )
        return ts - _offset(zone)

    if pa.types.is_string(typ):
        return string
    if pa.types.is_int32(typ):
        return integer(32)
    if pa.types.is_int64(typ):
        return integer(64)
    if pa.types.is_floating(typ):
        return floating
    if pa.types.is_boolean(typ):
        return boolean
    if pa.types.is_decimal(typ):
        return dec
    if pa.types.is_binary(typ):
        return binary
    if pa.types.is_date(typ):
        return date
    if pa.types.is_timestamp(typ):
        return timestamp
    raise ValueError(f"no JSON conversion for {typ}")


def _offset(zone: str | None) -> dt.timedelta:
    if zone is None or zone in ("Z", "UTC"):
        return dt.timedelta(0)
    sign = -1 if zone[0] == "-" else 1
    digits = zone[1:].replace(":", "")
    hours, minutes = (digits, "0") if len(digits) <= 2 else (digits[:-2], digits[-2:])
    return sign * dt.timedelta(hours=int(hours), minutes=int(minutes))


def _json_number(v: Any) -> Any:
    if isinstance(v, decimal.Decimal):
        return float(v)
    raise TypeError(f"not JSON: {type(v)}")
