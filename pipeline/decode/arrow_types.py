"""Arrow types of the decoded columns, and the vectorised JSON path's conversions level by
level (:mod:`pipeline.decode.arrow` uses them).

* :func:`arrow_type` is what Spark's ``from_json`` gives, as Arrow; :func:`fast_type` what
  pyarrow's JSON reader is asked for (dates and timestamps as strings, binary as int8);
  :func:`has_map` tells a schema the reader cannot parse (it has no map type);
  :func:`from_python_type` what Python rows are converted to before that cast.
* :func:`finish` turns a parsed column into the decoded one, recursing through structs
  and lists, and returns the mask of its values the slow path must take instead: a date or
  timestamp in another shape than the canonical ISO one, a binary value, a required nested
  value missing (the slow path names it). Struct children are picked by name: with
  unknown keys inferred, pyarrow adds children of its own.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.columns import ColumnType, Decimal, ListOf, MapOf, Primitive, StructOf

# canonical ISO-8601 date-time: the shape converted vectorised
_ISO_TS = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})?$"
_ISO_TS_ZONED = r"(Z|[+-]\d{2}:\d{2})$"


_PRIMITIVE_TYPES: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
}


def arrow_type(t: ColumnType) -> pa.DataType:
    """Arrow type of a decoded column (what Spark's ``from_json`` gives, as Arrow)."""
    if isinstance(t, Primitive):
        return _PRIMITIVE_TYPES[t.name]
    if isinstance(t, Decimal):
        return pa.decimal128(t.precision, t.scale)
    if isinstance(t, ListOf):
        return pa.list_(arrow_type(t.element))
    if isinstance(t, MapOf):
        return pa.map_(pa.string(), arrow_type(t.value))
    return pa.struct([pa.field(c.name, arrow_type(c.type)) for c in t.fields])


def from_python_type(t: ColumnType) -> pa.DataType:
    """The type Python rows (the registry decoders') are converted to first:
    :func:`arrow_type` with zoned timestamps naive. pyarrow converts an aware ``datetime``
    to a naive timestamp (as UTC) several times faster than to a zoned one (docs/bench.md,
    "Figures behind the code's choices"); the cast to :func:`arrow_type` after it only sets
    the zone."""
    if isinstance(t, Primitive) and t.name == "timestamptz":
        return pa.timestamp("us")
    if isinstance(t, ListOf):
        return pa.list_(from_python_type(t.element))
    if isinstance(t, MapOf):
        return pa.map_(pa.string(), from_python_type(t.value))
    if isinstance(t, StructOf):
        return pa.struct([pa.field(c.name, from_python_type(c.type)) for c in t.fields])
    return arrow_type(t)


def has_map(t: ColumnType) -> bool:
    if isinstance(t, MapOf):
        return True
    if isinstance(t, ListOf):
        return has_map(t.element)
    return isinstance(t, StructOf) and any(has_map(c.type) for c in t.fields)


def fast_type(t: ColumnType) -> pa.DataType:
    """What pyarrow's JSON reader is asked for: dates and timestamps as strings (only the
    canonical shape is converted vectorised), binary as int8 (base64 fails on purpose, so
    the row takes the slow path)."""
    if isinstance(t, Primitive) and t.name in ("date", "timestamp", "timestamptz"):
        return pa.string()
    if isinstance(t, Primitive) and t.name == "binary":
        return pa.int8()
    if isinstance(t, ListOf):
        return pa.list_(fast_type(t.element))
    if isinstance(t, StructOf):
        return pa.struct([pa.field(c.name, fast_type(c.type)) for c in t.fields])
    return arrow_type(t)


_ISO_DATE = r"^\d{4}-\d{2}-\d{2}$"


def finish(col: pa.Array, t: ColumnType) -> tuple[pa.Array, pa.Array | None]:
    """(``col`` as parsed -> as decoded, mask of its elements needing the slow path)."""
    if isinstance(t, StructOf):
        return _finish_struct(col, t)
    if isinstance(t, ListOf):
        return _finish_list(col, t)
    if isinstance(t, Primitive) and t.name == "binary":
        # parsed as int8: any value there is not base64 text
        return pa.nulls(len(col), pa.binary()), pc.fill_null(pc.is_valid(col), False)
    if isinstance(t, Primitive) and t.name in ("date", "timestamp", "timestamptz"):
        return _finish_time(col, arrow_type(t))
    return col, None


def _finish_struct(col: pa.Array, t: StructOf) -> tuple[pa.Array, pa.Array | None]:
    present = pc.is_valid(col)
    odd: pa.Array | None = None
    children, fields = [], []
    parsed = dict(zip([f.name for f in col.type], col.flatten(), strict=True))
    for c in t.fields:  # by name: pyarrow adds the keys it inferred (not ours) as children
        child = parsed[c.name]
        done, bad = finish(child, c.type)
        if c.required:  # present struct, missing value: the slow path names it
            missing = pc.and_(present, pc.is_null(child))
            bad = missing if bad is None else pc.or_(bad, missing)
        if bad is not None:
            odd = bad if odd is None else pc.or_(odd, bad)
        children.append(done)
        fields.append(pa.field(c.name, done.type))
    out = pa.StructArray.from_arrays(children, fields=fields, mask=pc.invert(present))
    return out, odd


def _finish_list(col: pa.Array, t: ListOf) -> tuple[pa.Array, pa.Array | None]:
    values = col.flatten()
    done, bad = finish(values, t.element)
    if t.element_required:
        bad = pc.is_null(values) if bad is None else pc.or_(bad, pc.is_null(values))
    lengths = pc.fill_null(pc.list_value_length(col), 0).to_numpy(zero_copy_only=False)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    out = pa.ListArray.from_arrays(pa.array(offsets), done, mask=pc.is_null(col))
    if bad is None or not pc.any(bad).as_py():
        return out, None
    parents = pc.filter(pc.list_parent_indices(col), bad).to_numpy()
    rows = np.zeros(len(col), dtype=bool)
    rows[parents] = True
    return out, pa.array(rows)


def _finish_time(col: pa.Array, typ: pa.DataType) -> tuple[pa.Array, pa.Array]:
    """Canonical ISO strings -> timestamps/dates; mask of values in another shape."""
    if pa.types.is_date(typ):
        ok = pc.match_substring_regex(col, _ISO_DATE)
        zoned = None
    else:
        ok = pc.match_substring_regex(col, _ISO_TS)
        zoned = pc.match_substring_regex(col, _ISO_TS_ZONED)
        if typ.tz is None:  # TIMESTAMP_NTZ: a zone makes the value invalid
            ok = pc.and_(ok, pc.invert(zoned))
    bad = pc.fill_null(pc.invert(ok), False)
    clean = pc.if_else(bad, pa.scalar(None, pa.string()), col)
    if pa.types.is_date(typ):
        return clean.cast(pa.date32()), bad
    if typ.tz is None:
        return pc.replace_substring(clean, "T", " ").cast(typ), bad
    assert zoned is not None
    naive = pc.if_else(pc.fill_null(zoned, False), pa.scalar(None, pa.string()), clean)
    with_zone = pc.if_else(pc.fill_null(zoned, False), clean, None)
    conv = pc.coalesce(
        with_zone.cast(typ),
        pc.replace_substring(naive, "T", " ").cast(pa.timestamp("us")).cast(typ),
    )
    return conv, bad
