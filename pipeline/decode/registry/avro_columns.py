"""Avro datums decoded many at once, field by field (numpy and Arrow; no Python per datum).

:func:`compile_reader` turns a writer schema into a tree of readers; :meth:`_Node.read`
reads one field for every datum together. A cursor per datum walks the schema: zig-zag
varints are read a byte position at a time over all datums; strings, bytes and fixed
values become Arrow views into the batch's own value buffer (Arrow copies them once);
a union of null and one type splits the datums by branch; arrays and maps are read one
item index at a time (a round per index, not per datum).

Only what it reads exactly as fastavro does is compiled (else None, and the caller reads
each datum with fastavro): null, boolean, int, long, float, double, bytes, string, fixed,
enum, records, unions of null and one type, arrays and maps of types at least a byte long,
and the logical types decimal (up to 38 digits), date, timestamp-millis/-micros,
local-timestamp-millis/-micros and uuid. A datum it cannot read — one that runs past its
end or leaves bytes over, a string that is not UTF-8, a union branch or enum index out of
range, a boolean byte other than 0 or 1, a date or timestamp near the ends of Python's
years 1 to 9999, a uuid not in canonical form, a decimal wider than 128 bits — is marked
*odd* (:class:`Cursor`), and the caller reads it with fastavro, which decodes it or names
the reason. So both readers give the same rows, and only well-formed datums take this one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.decode.registry.avro_cursor import Cursor

__all__ = ["compile_reader"]

_UUID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
# within Python's datetime range (fastavro's values), with a year to spare at each end:
# what lies beyond is fastavro's to accept or refuse
_EPOCH = datetime(1970, 1, 1)
_MIN_US = int((datetime(2, 1, 1) - _EPOCH).total_seconds()) * 1_000_000
_MAX_US = int((datetime(9998, 12, 31) - _EPOCH).total_seconds()) * 1_000_000
_MIN_DAY = (date(2, 1, 1) - _EPOCH.date()).days
_MAX_DAY = (date(9998, 12, 31) - _EPOCH.date()).days
_INT32 = (-(2**31), 2**31 - 1)


class _Node(Protocol):
    """Reads one schema node's value at each of ``rows``' positions; advances them."""

    @property
    def typ(self) -> pa.DataType: ...

    @property
    def min_size(self) -> int: ...  # bytes a value takes at least

    def read(self, cur: Cursor, rows: np.ndarray) -> pa.Array: ...


@dataclass
class _Varint:
    """int, long, and the logical types on them: ``scale`` units of ``typ`` per unit read."""

    typ: pa.DataType
    lo: int
    hi: int
    scale: int = 1
    min_size: int = 1

    def read(self, cur: Cursor, rows: np.ndarray) -> pa.Array:
        raw = cur.varint(rows)
        lo, hi = -(-self.lo // self.scale), self.hi // self.scale
        bad = (raw < lo) | (raw > hi)
        cur.odd[rows[bad]] = True
        value = np.where(bad, 0, raw) * self.scale
        if pa.types.is_int32(self.typ) or pa.types.is_date(self.typ):
            return pa.array(value.astype(np.int32)).cast(self.typ)
        return pa.array(value).cast(self.typ)


@dataclass
class _Fixed:
    """float, double, boolean: a fixed width read as a numpy type."""

    typ: pa.DataType
    min_size: int
    dtype: str

    def read(self, cur: Cursor, rows: np.ndarray) -> pa.Array:
        start = cur.take(rows, np.full(len(rows), self.min_size, np.int64))
        raw = np.ascontiguousarray(cur.gather(start, self.min_size))
        if self.dtype == "bool":
            cur.odd[rows[raw[:, 0] > 1]] = True
            return pa.array(raw[:, 0] == 1)
        return pa.array(raw.view(self.dtype).ravel(), self.typ)


@dataclass
class _Bytes:
    """bytes, string (uuid: canonical only), fixed (``size``): views, then one copy."""

    typ: pa.DataType
    size: int | None = None
    uuid: bool = False
    min_size: int = 1

    def read(self, cur: Cursor, rows: np.ndarray) -> pa.Array:
        fixed = self.size is not None
        length = np.full(len(rows), self.size, np.int64) if fixed else cur.varint(rows)
        start = cur.take(rows, length)
        views = cur.views(start, length)
        if not pa.types.is_string(self.typ):
            return views.cast(self.typ)
        try:
            text = views.cast(pa.string())
        except pa.ArrowInvalid:  # some value is not UTF-8: those datums are odd (rare:
            # only then a look at each value)
            bad = np.array([_not_utf8(v) for v in views.to_pylist()], bool)
            cur.odd[rows[bad]] = True
            length[bad] = 0
            text = cur.views(start, length).cast(pa.string())
        if self.uuid:
            cur.odd[rows[~pc.match_substring_regex(text, _UUID).to_numpy(False)]] = True
        return text


def _not_utf8(value: bytes) -> bool:
    try:
        value.decode()
    except UnicodeDecodeError:
        return True
    return False


@dataclass
class _Decimal:
    """Avro's decimal: big-endian two's complement bytes (or a fixed) -> decimal128."""

    precision: int
    scale: int
    size: int | None = None  # a fixed's size; None: bytes
    min_size: int = 1

    @property
    def typ(self) -> pa.DataType:
        return pa.decimal128(self.precision, self.scale)

    def read(self, cur: Cursor, rows: np.ndarray) -> pa.Array:
        n, fixed = len(rows), self.size is not None
        length = np.full(n, self.size, np.int64) if fixed else cur.varint(rows)
        start = cur.take(rows, length)
        wide = length > 16  # beyond 128 bits: fastavro's to read
        cur.odd[rows[wide]] = True
        length[wide] = 0
        # the value's bytes right-aligned in 16, the sign extended to the left
        at = start[:, None] + (length[:, None] - 16) + np.arange(16)
        first = cur.buf[np.minimum(start, cur.last)]
        sign = np.where((length > 0) & (first >= 0x80), 0xFF, 0).astype(np.uint8)
        value = np.where(at >= start[:, None], cur.buf[np.clip(at, 0, cur.last)], sign[:, None])
        little = np.ascontiguousarray(value[:, ::-1])  # Arrow's decimal128: little-endian
        wide_type = pa.decimal128(38, self.scale)
        out = pa.Array.from_buffers(wide_type, n, [None, pa.py_buffer(little)])
        try:
            return out.cast(self.typ)  # a value beyond the precision raises
        except pa.ArrowInvalid:  # leave the whole column to fastavro
            cur.odd[rows] = True
            return pa.nulls(n, self.typ)


@dataclass
class _Enum:
    symbols: pa.Array
    min_size: int = 1

    @property
    def typ(self) -> pa.DataType:
        return pa.string()

    def read(self, cur: Cursor, rows: np.ndarray) -> pa.Array:
        index = cur.varint(rows)
        bad = (index < 0) | (index >= len(self.symbols))
        cur.odd[rows[bad]] = True
        return self.symbols.take(pa.array(np.where(bad, 0, index)))


@dataclass
class _Null:
    min_size: int = 0

    @property
    def typ(self) -> pa.DataType:
        return pa.null()

    def read(self, cur: Cursor, rows: np.ndarray) -> pa.Array:
        return pa.nulls(len(rows))


@dataclass
class _Record:
    names: tuple[str, ...]
    fields: tuple[_Node, ...]

    @property
    def typ(self) -> pa.DataType:
        return pa.struct([pa.field(n, f.typ) for n, f in zip(self.names, self.fields, strict=True)])

    @property
    def min_size(self) -> int:
        return sum(f.min_size for f in self.fields)

    def read(self, cur: Cursor, rows: np.ndarray) -> pa.Array:
        arrays = [f.read(cur, rows) for f in self.fields]
        fields = [pa.field(n, a.type) for n, a in zip(self.names, arrays, strict=True)]
        return pa.StructArray.from_arrays(arrays, fields=fields)


@dataclass
class _Optional:
    """A union of null (branch ``null_at``) and one type."""

    value: _Node
    null_at: int
    min_size: int = 1

    @property
    def typ(self) -> pa.DataType:
        return self.value.typ

    def read(self, cur: Cursor, rows: np.ndarray) -> pa.Array:
        branch = cur.varint(rows)
        cur.odd[rows[(branch < 0) | (branch > 1)]] = True
        present = np.flatnonzero(branch == 1 - self.null_at)
        values = self.value.read(cur, rows[present])
        if len(present) == len(rows):  # no null here: nothing to place
            return values
        at = np.full(len(rows), -1, np.int64)
        at[present] = np.arange(len(present))
        return values.take(pa.array(at, mask=at < 0))


@dataclass
class _Repeated:
    """An array (``key`` None) or a map (string keys): Avro's blocks, an item per round."""

    item: _Node
    key: _Node | None = None
    min_size: int = 1

    @property
    def typ(self) -> pa.DataType:
        if self.key is None:
            return pa.list_(self.item.typ)
        return pa.map_(self.key.typ, self.item.typ)

    def read(self, cur: Cursor, rows: np.ndarray) -> pa.Array:
        n = len(rows)
        remaining = np.zeros(n, np.int64)
        live = np.ones(n, bool)
        owners: list[np.ndarray] = []
        keys: list[pa.Array] = []
        items: list[pa.Array] = []
        least = self.item.min_size + (self.key.min_size if self.key is not None else 0)
        while live.any():
            need = np.flatnonzero(live & (remaining == 0))
            if len(need):
                count = cur.varint(rows[need])
                sized = np.flatnonzero(count < 0)  # a block with its byte size: skipped
                if len(sized):
                    cur.varint(rows[need[sized]])
                count = np.abs(count)
                room = cur.end[rows[need]] - cur.pos[rows[need]]
                cur.odd[rows[need[count * least > room]]] = True
                remaining[need] = count
                live[need[count == 0]] = False
            live &= ~cur.odd[rows]
            go = np.flatnonzero(live & (remaining > 0))
            if not len(go):
                continue
            if self.key is not None:
                keys.append(self.key.read(cur, rows[go]))
            items.append(self.item.read(cur, rows[go]))
            owners.append(go)
            remaining[go] -= 1
        owner = np.concatenate(owners) if owners else np.zeros(0, np.int64)
        order = pa.array(np.argsort(owner, kind="stable"))
        offsets = pa.array(
            np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=n))]), pa.int32()
        )
        values = _joined(items, self.item.typ).take(order)
        if self.key is None:
            return pa.ListArray.from_arrays(offsets, values)
        return pa.MapArray.from_arrays(offsets, _joined(keys, self.key.typ).take(order), values)


def _joined(parts: list[pa.Array], typ: pa.DataType) -> pa.Array:
    return pa.concat_arrays(parts) if parts else pa.array([], typ)


# -- compiling a schema --------------------------------------------------------------------
_PRIMITIVES: dict[str, Callable[[], _Node]] = {
    "null": _Null,
    "boolean": lambda: _Fixed(pa.bool_(), 1, "bool"),
    "int": lambda: _Varint(pa.int32(), *_INT32),
    "long": lambda: _Varint(pa.int64(), -(2**63), 2**63 - 1),
    "float": lambda: _Fixed(pa.float32(), 4, "<f4"),
    "double": lambda: _Fixed(pa.float64(), 8, "<f8"),
    "bytes": lambda: _Bytes(pa.binary()),
    "string": lambda: _Bytes(pa.string()),
}


def _times(unit: int, tz: str | None) -> _Node:
    return _Varint(pa.timestamp("us", tz=tz), _MIN_US, _MAX_US, unit)


_LOGICAL: dict[tuple[str, str], Callable[[], _Node]] = {
    ("int", "date"): lambda: _Varint(pa.date32(), _MIN_DAY, _MAX_DAY),
    ("long", "timestamp-micros"): lambda: _times(1, "UTC"),
    ("long", "timestamp-millis"): lambda: _times(1000, "UTC"),
    ("long", "local-timestamp-micros"): lambda: _times(1, None),
    ("long", "local-timestamp-millis"): lambda: _times(1000, None),
    ("string", "uuid"): lambda: _Bytes(pa.string(), uuid=True),
}


class _Unsupported(Exception):
    """Read per datum by fastavro instead."""


def compile_reader(schema: Any) -> _Node | None:
    """The reader of a writer schema (parsed JSON), or None where fastavro must read it."""
    try:
        return _compile(schema)
    except _Unsupported:
        return None


def _compile(schema: Any) -> _Node:
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]()
        raise _Unsupported(schema)  # a named reference
    if isinstance(schema, list):
        if len(schema) != 2 or "null" not in schema or schema[0] == schema[1]:
            raise _Unsupported("union")
        null_at = schema.index("null")
        return _Optional(_compile(schema[1 - null_at]), null_at)
    if not isinstance(schema, Mapping):
        raise _Unsupported(repr(schema))
    kind, logical = schema.get("type"), schema.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        if not 0 < precision <= 38 or not 0 <= scale <= precision:
            raise _Unsupported("decimal")
        size = int(schema["size"]) if kind == "fixed" else None
        return _Decimal(precision, scale, size, max(size or 1, 1))
    if logical is not None:
        make = _LOGICAL.get((str(kind), str(logical)))
        if make is None:
            raise _Unsupported(str(logical))
        return make()
    if kind == "record":
        names = tuple(str(f["name"]) for f in schema["fields"])
        return _Record(names, tuple(_compile(f["type"]) for f in schema["fields"]))
    if kind == "enum":
        return _Enum(pa.array([str(s) for s in schema["symbols"]], pa.string()))
    if kind == "fixed":
        return _Bytes(pa.binary(), size=int(schema["size"]), min_size=int(schema["size"]))
    if kind in ("array", "map"):
        item = _compile(schema["items" if kind == "array" else "values"])
        node = _Repeated(item, _Bytes(pa.string()) if kind == "map" else None)
        if item.min_size < 1:
            raise _Unsupported("items of no size")  # a count would bound nothing
        return node
    return _compile(kind)  # {"type": "long"} and the like
