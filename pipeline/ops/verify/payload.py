"""Decode Kafka values the way the configured schema says, and compare rows with them.

The values are decoded by the pipeline's own Arrow decoder
(:class:`pipeline.decode.arrow.ArrowDecoder`, held equal to Spark's ``from_json`` by
``tests/integration/decode/test_decode_engines.py``), so a row verifies exactly when it
holds what either
engine would have written. A main-table row whose record does not decode is reported as
a mismatch on ``_decode``.

Limits (documented in docs/verify.md): Spark's JSON reader is more lenient than the Arrow
decoder in corner cases (single quotes, trailing text, exotic date-time shapes); such rows
show as ``_decode`` mismatches, never as passes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.config import DecodeConfig
from pipeline.decode.arrow import ArrowDecoder
from pipeline.decode.spark import ERROR_COL
from pipeline.source.reader import records_at


class ValueDecoder:
    """Kafka value bytes → one typed column per ``decode.schema`` field (with ``decode.key``,
    the key's column from the key bytes)."""

    def __init__(self, cfg: DecodeConfig) -> None:
        self._decoder = ArrowDecoder(cfg, include_headers=False)
        key = self._decoder.key_column
        names = [c.name for c in self._decoder.columns] + ([key.name] if key else [])
        self.schema = pa.schema(
            [
                self._decoder.decode(records_at(pa.array([], pa.binary()))).schema.field(n)
                for n in names
            ]
        )

    def decode(self, values: pa.Array, keys: pa.Array | None = None) -> tuple[pa.Table, np.ndarray]:
        """(decoded rows aligned with ``values``, bool mask of rows that decoded)."""
        out = self._decoder.decode(records_at(values, keys))
        ok = pc.is_null(out.column(ERROR_COL)).to_numpy(zero_copy_only=False)
        table = pa.Table.from_batches([out]).select(self.schema.names)
        return table, np.asarray(ok, dtype=bool)


def _nested(t: pa.DataType) -> bool:
    return pa.types.is_nested(t)


def differs(actual: pa.Array | pa.ChunkedArray, expected: pa.Array) -> np.ndarray:
    """Row-wise ``actual != expected`` with nulls equal to nulls, as a numpy bool mask.
    ``actual`` is cast to ``expected``'s type first (tables store time zones as
    ``UTC`` or ``+00:00``, Hudi hands back its own widths). Nested values (structs,
    lists, maps: Arrow has no comparison kernel for them) are compared as Python values."""
    if isinstance(actual, pa.ChunkedArray):
        actual = actual.combine_chunks()
    if not actual.type.equals(expected.type):
        try:
            actual = pc.cast(actual, expected.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return np.ones(len(actual), dtype=bool)
    if _nested(expected.type):
        return np.array(
            [a != e for a, e in zip(actual.to_pylist(), expected.to_pylist(), strict=True)],
            dtype=bool,
        )
    neq = pc.fill_null(pc.not_equal(actual, expected), False)
    one_null = pc.xor(pc.is_null(actual), pc.is_null(expected))
    return np.asarray(pc.or_(neq, one_null).to_numpy(zero_copy_only=False), dtype=bool)
