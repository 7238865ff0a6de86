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
    Nested columns (``struct``, ``list``) are parsed the same way; their timestamps and
    dates are converted level by level, and a row missing a required nested value is left
    to the slow path, which names it.
  * Slow path (rare records, and every record of a schema with a ``map`` column, which
    pyarrow's JSON reader cannot parse): :class:`pipeline.decode.json_values.RecordParser`,
    rules that follow Spark's ``from_json`` (PERMISSIVE).

Invariants
  * One output row per input row, in input order; every input row's coordinates survive.
  * A row has a non-null ``_error`` iff Spark's decoder would give it one; the error
    precedence is the same (null value, over-size, malformed, first missing required),
    and so is the text (the ``generic`` one of :class:`~pipeline.decode.json_values.Problem`;
    the task names the exact path afterwards for both engines: ``refine_errors``).
  * Known differences from Spark's parser (documented in README): single-quoted JSON,
    trailing text after the object and exotic date-time formats accepted by Spark's
    lenient fallback parser are dead-lettered as malformed here; naive timestamps are read
    as UTC (the session time zone the pipeline sets).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from pipeline.columns import Column
from pipeline.config import DecodeConfig
from pipeline.decode.arrow_types import arrow_type, fast_type, finish, has_map
from pipeline.decode.json_values import MALFORMED, RecordParser, required_message
from pipeline.decode.registry.avro import AvroValues
from pipeline.decode.registry.keys import key_decode_config, merge_key
from pipeline.decode.registry.protobuf import ProtobufValues
from pipeline.decode.registry.wire import WireValues
from pipeline.decode.spark import ERROR_COL, KAFKA_COLS, decoded_columns
from pipeline.decode.unknown_fields import (
    UNKNOWN_COL,
    UNKNOWN_TYPE,
    apply_policy,
    keys_in_python,
    split_block,
)

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
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


@dataclass(frozen=True)
class ArrowDecoder:
    """Picklable decoder for one configuration (built on the driver, run in tasks)."""

    cfg: DecodeConfig
    include_headers: bool

    @cached_property
    def columns(self) -> tuple[Column, ...]:
        """The value's decoded columns (``decode.key``'s column apart: :attr:`key_column`)."""
        key = self.cfg.key.column if self.cfg.key is not None else None
        return tuple(c for c in decoded_columns(self.cfg) if c.name != key)

    @cached_property
    def key_column(self) -> Column | None:
        """``decode.key``'s column (the last of the resolved ``decode.schema``), or None."""
        if self.cfg.key is None:
            return None
        (column,) = [c for c in decoded_columns(self.cfg) if c.name == self.cfg.key.column]
        return column

    @cached_property
    def key_decoder(self) -> ArrowDecoder:
        """The same decoder, for the keys (:mod:`pipeline.decode.registry.keys`)."""
        assert self.key_column is not None
        return ArrowDecoder(key_decode_config(self.cfg, self.key_column), include_headers=False)

    @cached_property
    def parser(self) -> RecordParser:
        return RecordParser(self.columns)

    @cached_property
    def avro(self) -> AvroValues:
        assert self.cfg.registry is not None
        return AvroValues(self.cfg.registry, self.columns)

    @cached_property
    def protobuf(self) -> ProtobufValues:
        assert self.cfg.registry is not None
        return ProtobufValues(self.cfg.registry, self.columns)

    @cached_property
    def wire(self) -> WireValues:
        assert self.cfg.registry is not None
        return WireValues(self.cfg.registry, "JSON")

    @cached_property
    def known(self) -> frozenset[str]:
        return frozenset(c.name for c in self.columns)

    @cached_property
    def fast(self) -> bool:
        """Whether the vectorised parser can take this schema (not with a map column)."""
        return not any(has_map(c.type) for c in self.columns)

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
            none = pa.nulls(n, UNKNOWN_TYPE)
            return self._assemble(raw, raw_names, coords, error, too_big, none, key, value, headers)

        names = [c.name for c in self.columns]
        binary = self.cfg.format in ("avro", "protobuf")
        if binary:
            if self.cfg.format == "avro":
                data, error, unknown = self.avro.decode(value, too_big, big_msg)
            else:
                data, error, unknown = self.protobuf.decode(
                    value.to_pylist(), too_big.to_pylist(), big_msg
                )
        else:
            text = value  # JSON; for json-schema, what follows the wire format's prefix
            refused = None
            if self.cfg.format == "json-schema":
                text, refused = self.wire.split(value)
            data, error, unknown = self._decode_json(text, too_big, big_msg)
            if refused is not None:
                error = pc.coalesce(refused, error)
        error = apply_policy(error, unknown, self.cfg.unknown_fields == "dead-letter")
        if not binary:
            error = refine_errors(error, text, self.parser)
        if self.key_column is not None:
            at = batch.schema.get_field_index("value")
            keys = self.key_decoder.decode(batch.set_column(at, "value", key))
            key_data = [keys.column(c.name) for c in self.key_decoder.columns]
            key_values, error = merge_key(key_data, error, self.key_column, keys.column(ERROR_COL))
            data, names = [*data, key_values], [*names, self.key_column.name]
        bad = pc.is_valid(error)
        return self._assemble(data, names, coords, error, bad, unknown, key, value, headers)

    def _assemble(
        self,
        data: Sequence[pa.Array],
        names: Sequence[str],
        coords: Sequence[pa.Array],
        error: pa.Array,
        bad: pa.Array,
        unknown: pa.Array,
        key: pa.Array,
        value: pa.Array,
        headers: pa.Array,
    ) -> pa.RecordBatch:
        def on_error(col: pa.Array) -> pa.Array:
            return pc.if_else(bad, col, pa.nulls(len(col), type=col.type))

        arrays = [*data, *coords, error, on_error(key), on_error(value), on_error(headers), unknown]
        all_names = [
            *names,
            *KAFKA_COLS,
            ERROR_COL,
            "_raw_key",
            "_raw_value",
            "_raw_headers",
            UNKNOWN_COL,
        ]
        return pa.RecordBatch.from_arrays(arrays, names=all_names)

    # -- JSON --------------------------------------------------------------------------
    def _decode_json(
        self, value: pa.Array, too_big: pa.Array, big_msg: str
    ) -> tuple[list[pa.Array], pa.Array, pa.Array]:
        """(data columns, error, ``_unknown``), in input order."""
        n = len(value)
        # candidates for the vectorised parser: one object per line, nothing else
        candidate = pc.and_(
            pc.and_(pc.is_valid(value), pc.invert(too_big)),
            pc.and_(pc.starts_with(value, b"{"), pc.ends_with(value, b"}")),
        )
        candidate = pc.fill_null(candidate, False)
        if not self.fast:
            candidate = pa.array(np.zeros(n, dtype=bool))
        elif _any_line_break(value):  # rare: only then find the rows (a per-row scan costs
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
        for i, c in enumerate(self.columns):
            fast_col = fast_rows.column(c.name).combine_chunks()
            col = pa.concat_arrays([fast_col, slow[i]])
            data.append(pc.take(col, perm))
        err_fast = self._required_errors(fast_rows, len(fast_rows))
        error = pc.take(pa.concat_arrays([err_fast, slow[-2]]), perm)
        unknown_fast = fast_rows.column("__unknown").combine_chunks()
        unknown = pc.take(pa.concat_arrays([unknown_fast, slow[-1]]), perm)
        assert len(error) == n
        return data, error, unknown

    def _required_errors(self, rows: pa.Table, n: int) -> pa.Array:
        error: pa.Array = pa.nulls(n, type=pa.string())
        for c in reversed(self.columns):
            if c.required:
                missing = pc.is_null(rows.column(c.name).combine_chunks())
                error = pc.if_else(missing, pa.scalar(required_message(c.name)), error)
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
            block = self._parse_block(part)
            if block is not None:
                table, odd = self._finish_block(block[0])
                table = table.append_column("__unknown", block[1])
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
        schema = pa.schema([*self._schema(), ("__unknown", UNKNOWN_TYPE), ("__row", pa.uint64())])
        out = pa.concat_tables(parsed) if parsed else schema.empty_table()
        left = (
            pa.concat_arrays([a.cast(pa.uint64()) for a in leftover])
            if leftover
            else pa.array([], pa.uint64())
        )
        return out, left

    def _schema(self) -> pa.Schema:
        return pa.schema([(c.name, arrow_type(c.type)) for c in self.columns])

    def _fast_schema(self) -> pa.Schema:
        return pa.schema([(c.name, fast_type(c.type)) for c in self.columns])

    def _parse_block(self, values: pa.Array) -> tuple[pa.Table, pa.Array] | None:
        """(parsed columns, ``_unknown``), or None when pyarrow cannot parse the block.
        Unknown keys are inferred as extra columns; when their types clash from row to row
        the block is parsed again ignoring them, and its keys are listed in Python."""
        joined = pc.binary_join_element_wise(values, pa.scalar(b""), pa.scalar(b"\n"))
        span = _value_bytes(joined)
        data = span if span is not None else b""
        for behaviour in ("infer", "ignore"):
            try:
                table = pj.read_json(
                    pa.BufferReader(data),
                    read_options=pj.ReadOptions(
                        use_threads=False, block_size=max(len(data), 1 << 20)
                    ),
                    parse_options=pj.ParseOptions(
                        explicit_schema=self._fast_schema(), unexpected_field_behavior=behaviour
                    ),
                )
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
            if table.num_rows != len(values):  # e.g. two objects on one line
                return None
            if behaviour == "infer":
                return split_block(table, self.known)
            return table, keys_in_python(values.to_pylist(), self.known)
        return None

    def _finish_block(self, table: pa.Table) -> tuple[pa.Table, pa.Array | None]:
        """Parsed columns -> decoded columns; mask of rows needing the slow path (a date or
        timestamp in another shape, a binary value, a required nested value missing)."""
        odd: pa.Array | None = None
        arrays = []
        for c in self.columns:
            col, bad = finish(table.column(c.name).combine_chunks(), c.type)
            arrays.append(col)
            if bad is not None:
                odd = bad if odd is None else pc.or_(odd, bad)
        out = pa.Table.from_arrays(arrays, schema=self._schema())
        if odd is not None and not pc.any(odd).as_py():
            odd = None
        return out, odd

    # -- slow path -----------------------------------------------------------------------
    def _decode_rows(
        self, values: list[bytes | None], too_big: list[bool | None], big_msg: str
    ) -> list[pa.Array]:
        """Data columns, then error, then ``_unknown``."""
        cols: list[list[object]] = [[] for _ in self.columns]
        errors: list[str | None] = []
        unknown: list[list[str] | None] = []
        for raw, big in zip(values, too_big, strict=True):
            row: list[object] | None = None
            err: str | None = None
            names: list[str] | None = None
            if raw is None:
                err = "null value"
            elif big:
                err = big_msg
            else:
                row, problem, names = self.parser.parse(raw)
                err = problem.generic if problem is not None else None
            for i in range(len(self.columns)):
                cols[i].append(row[i] if row is not None else None)
            errors.append(err)
            unknown.append(names)
        out = [
            pa.array(v, type=arrow_type(c.type)) for v, c in zip(cols, self.columns, strict=True)
        ]
        out.append(pa.array(errors, type=pa.string()))
        out.append(pa.array(unknown, type=UNKNOWN_TYPE))
        return out


def refine_errors(error: pa.Array, value: pa.Array, parser: RecordParser) -> pa.Array:
    """``error`` with each generic reason (malformed, a required value missing) replaced by
    the one naming the exact path (``items[3].price``): a Python parse of the bad records
    only. Both engines' decoders give the generic reasons; the tasks refine them here."""
    generic = pc.or_(pc.equal(error, MALFORMED), pc.starts_with(error, pattern="required field "))
    rows = pc.indices_nonzero(pc.fill_null(generic, False)).to_pylist()
    if not rows:
        return error
    fixed = error.to_pylist()
    for i, raw in zip(rows, pc.take(value, pa.array(rows)).to_pylist(), strict=True):
        fixed[i] = parser.explain(raw) or fixed[i]
    return pa.array(fixed, pa.string())


def refine_batch(batch: pa.RecordBatch, parser: RecordParser) -> pa.RecordBatch:
    """A decoded batch (from either engine) with :func:`refine_errors` applied."""
    i = batch.schema.get_field_index(ERROR_COL)
    error = refine_errors(batch.column(i), batch.column("_raw_value"), parser)
    return batch.set_column(i, ERROR_COL, error)
