"""Fields a record has but ``decode.schema`` lacks: found, counted, and dead-lettered on
request (``decode.unknownFields: ignore | dead-letter``).

Both decoders add a column ``_unknown`` (list of names, null when there are none): the
top-level keys of the record's JSON object whose value is not null and that name no
configured column, sorted. Keys inside nested objects are not looked at (a nested
struct's unknown keys are dropped, as Spark's ``from_json`` drops them).

* Arrow engine: pyarrow's JSON reader infers the unknown keys as extra columns
  (:func:`split_block`); a block whose unknown keys change type from row to row cannot be
  inferred, so it is parsed again ignoring them, and its rows' keys are listed in Python
  (:func:`keys_in_python`: only those blocks).
* Spark engine: ``from_json`` as ``map<string, string>``, non-null values, minus the
  configured names (:mod:`pipeline.decode.spark`).

With ``dead-letter`` a record that decodes but carries unknown fields becomes a dead
letter (``unknown field(s): a, b``; the other reasons come first). The tasks count the
records with unknown fields among the rows they write (:func:`tally`); the driver adds
them up for the metrics and ``ingest status``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

UNKNOWN_COL = "_unknown"
UNKNOWN_TYPE = pa.list_(pa.string())
MAX_NAMES = 20  # distinct unknown names a task reports (bounded: keys can be unbounded)


def message(names: Iterable[str]) -> str:
    return "unknown field(s): " + ", ".join(names)


def split_block(table: pa.Table, known: frozenset[str]) -> tuple[pa.Table, pa.Array]:
    """(``table`` without the columns pyarrow inferred for unknown keys, ``_unknown`` per
    row): the names of the extra columns whose value is not null in that row."""
    extra = sorted(n for n in table.column_names if n not in known)
    n = table.num_rows
    if not extra:
        return table, pa.nulls(n, UNKNOWN_TYPE)
    present = np.column_stack(
        [pc.is_valid(table.column(name)).to_numpy(zero_copy_only=False) for name in extra]
    )
    counts = present.sum(axis=1)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    names = np.array(extra, dtype=object)[np.nonzero(present)[1]]
    lists = pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(names, pa.string()), mask=pa.array(counts == 0)
    )
    return table.drop_columns(extra), lists


def keys_in_python(values: Iterable[bytes | None], known: frozenset[str]) -> pa.Array:
    """``_unknown`` of JSON objects parsed one by one (the blocks pyarrow cannot infer)."""
    out: list[list[str] | None] = []
    for raw in values:
        try:
            obj = json.loads(raw) if raw is not None else None
        except ValueError:
            obj = None
        names = (
            sorted(k for k, v in obj.items() if k not in known and v is not None)
            if isinstance(obj, dict)
            else []
        )
        out.append(names or None)
    return pa.array(out, UNKNOWN_TYPE)


def apply_policy(error: pa.Array, unknown: pa.Array, dead_letter: bool) -> pa.Array:
    """``error`` with ``unknown field(s): …`` where a row has no other error and, with
    ``dead_letter``, carries unknown fields."""
    if not dead_letter or unknown.null_count == len(unknown):
        return error
    joined = pc.binary_join(unknown, ", ")
    reason = pc.binary_join_element_wise(pa.scalar("unknown field(s): "), joined, "")
    return pc.coalesce(error, reason)


def tally(unknown: pa.Array) -> tuple[int, list[str]]:
    """(rows carrying unknown fields, their distinct names, at most :data:`MAX_NAMES`)."""
    rows = len(unknown) - unknown.null_count
    if not rows:
        return 0, []
    names = pc.unique(pc.list_flatten(unknown)).to_pylist()
    return rows, sorted(names)[:MAX_NAMES]
