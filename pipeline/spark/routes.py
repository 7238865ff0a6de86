"""Worker side of routing: which of the set's tables each decoded row goes to.

A :class:`Router` is pickled into the task plan. Per Arrow batch it resolves the routing
column's *distinct* values (a dictionary encoding of the column), not its rows: the
Python work is per distinct topic or field value, the per-row work is Arrow's
(``take``, ``filter``), so routing adds no per-row Python to the hot path.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["Router"]


@dataclass(frozen=True)
class Router:
    """Rows -> table index (into the set's ordered main tables).

    ``exact`` maps a value of ``column`` to its table; else the first of ``patterns``
    whose regular expression matches the whole value; else ``default`` (a null value
    too)."""

    column: str
    exact: dict[str, int] = field(default_factory=dict)
    patterns: tuple[tuple[str, int], ...] = ()
    default: int = 0

    def table_of(self, value: str | None) -> int:
        if value is None:
            return self.default
        found = self.exact.get(value)
        if found is not None:
            return found
        for pattern, index in self.patterns:
            if re.fullmatch(pattern, value):
                return index
        return self.default

    def table_indices(self, batch: pa.RecordBatch) -> pa.Array:
        """One table index per row of ``batch``."""
        column = batch.column(self.column)
        if not pa.types.is_string(column.type) and not pa.types.is_large_string(column.type):
            column = pc.cast(column, pa.string())
        encoded = pc.dictionary_encode(column)
        tables = pa.array([self.table_of(v) for v in encoded.dictionary.to_pylist()], pa.int32())
        return pc.fill_null(pc.take(tables, encoded.indices), self.default)

    def split(self, batch: pa.RecordBatch) -> Iterator[tuple[int, pa.RecordBatch]]:
        """``(table index, its rows)`` for every table ``batch`` has rows for."""
        indices = self.table_indices(batch)
        present = pc.unique(indices).to_pylist()
        if len(present) == 1:
            yield present[0], batch
            return
        for index in sorted(present):
            yield index, batch.filter(pc.equal(indices, index))
