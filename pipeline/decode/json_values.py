"""Decode one JSON record in Python, naming the path of what is wrong with it.

The vectorised decoders (:mod:`pipeline.decode.arrow`, Spark's ``from_json``) take almost
every record; this module takes the rest: the records pyarrow's parser refuses, records
with ``map`` columns (pyarrow's JSON reader has no map type), and the dead letters whose
reason must name a nested path.

Rules (Spark's ``from_json``, PERMISSIVE, as the README documents): numbers written as
strings keep their JSON text in string columns; a value of the wrong type anywhere makes
the whole record malformed; ``NaN``/``Infinity`` are accepted for floating point; decimals
are rounded half-up to the scale; timestamps are ISO-8601 strings or epoch seconds; keys
the schema lacks are ignored.

Invariants
  * :func:`parse_record` returns the values :func:`pyarrow.array` takes for each column's
    Arrow type (dicts for structs, lists, ``(key, value)`` pairs for maps) and, for a bad
    record, a :class:`Problem`.
  * Precedence: a wrong type (the first in document order) beats a missing required value;
    among missing required values the first in schema order (:func:`required_paths`,
    depth first) wins, so the Spark decoder's ``CASE WHEN`` chain picks the same one.
  * :attr:`Problem.generic` is what both vectorised decoders can say without per-record
    work (no list index); :attr:`Problem.message` names the exact path (``items[3].price``).
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

from pipeline.columns import Column, ColumnType, Decimal, ListOf, MapOf, StructOf

MALFORMED = "malformed JSON or a value of the wrong type"

# what the Python path accepts as a date-time (Spark's lenient parser accepts more)
_TS = re.compile(
    r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})(?:[T ](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,9}))?)?)?"
    r"\s*(Z|UTC|[+-]\d{1,2}(?::?\d{2})?)?\s*$"
)
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


def required_message(path: str) -> str:
    return f"required field {path!r} is missing or null"


@dataclass(frozen=True)
class Problem:
    """Why a record cannot be a row: ``generic`` (what the vectorised decoders report)
    and ``message`` (the dead letter's reason, with the exact path)."""

    generic: str
    message: str


class _Bad(Exception):
    """A value of the wrong type at ``path``."""

    def __init__(self, path: str, expected: ColumnType | str) -> None:
        super().__init__(path)
        self.path, self.expected = path, str(expected)


@dataclass
class _Missing:
    """Required values found missing: (pattern, exact path), in document order."""

    found: list[tuple[str, str]]


Converter = Callable[[Any, str, _Missing], Any]


def pattern_of(path: str) -> str:
    """``items[3].price`` -> ``items[].price``; map keys ``tags{"a"}`` -> ``tags{}``."""
    return re.sub(r"\{[^}]*\}", "{}", re.sub(r"\[\d+\]", "[]", path))


def required_paths(columns: Sequence[Column]) -> list[tuple[str, Column | None, ColumnType]]:
    """Every place a value is required, depth first in schema order, as
    ``(pattern, column or None for a list element / map value, type)``. The order is the
    precedence of "required field ... is missing" among several."""
    out: list[tuple[str, Column | None, ColumnType]] = []

    def walk(t: ColumnType, path: str) -> None:
        if isinstance(t, StructOf):
            for c in t.fields:
                visit(c, f"{path}.{c.name}")
        elif isinstance(t, ListOf):
            if t.element_required:
                out.append((f"{path}[]", None, t.element))
            walk(t.element, f"{path}[]")
        elif isinstance(t, MapOf):
            if t.value_required:
                out.append((f"{path}{{}}", None, t.value))
            walk(t.value, f"{path}{{}}")

    def visit(c: Column, path: str) -> None:
        if c.required:
            out.append((path, c, c.type))
        walk(c.type, path)

    for c in columns:
        visit(c, c.name)
    return out


class RecordParser:
    """Parses records for one set of columns (built once, used per record)."""

    def __init__(self, columns: Sequence[Column]) -> None:
        self.columns = tuple(columns)
        self._order = {p: i for i, (p, _, _) in enumerate(required_paths(self.columns))}
        self._convs = [(c, converter(c.type), c.required) for c in self.columns]
        self._known = frozenset(c.name for c in self.columns)

    def parse_record(self, raw: bytes) -> tuple[list[Any] | None, Problem | None]:
        """(values per column or None, problem or None). Like Spark's PERMISSIVE mode a
        column of the wrong type becomes null while the others keep their values."""
        values, problem, _ = self.parse(raw)
        return values, problem

    def parse(self, raw: bytes) -> tuple[list[Any] | None, Problem | None, list[str] | None]:
        """:meth:`parse_record` and the record's unknown fields: its top-level keys with a
        non-null value that name no column, sorted (None: none)."""
        try:
            obj = json.loads(raw.decode("utf-8", errors="replace"), parse_float=decimal.Decimal)
        except ValueError:
            return None, Problem(MALFORMED, MALFORMED), None
        if not isinstance(obj, dict):
            return None, Problem(MALFORMED, MALFORMED), None
        unknown = sorted(k for k, v in obj.items() if k not in self._known and v is not None)
        values, problem = self._convert(obj)
        return values, problem, unknown or None

    def _convert(self, obj: dict[str, Any]) -> tuple[list[Any], Problem | None]:
        row: list[Any] = []
        bad: _Bad | None = None
        missing = _Missing([])
        for c, conv, required in self._convs:
            value = obj.get(c.name)
            if value is None and required:
                missing.found.append((c.name, c.name))
            try:
                row.append(conv(value, c.name, missing))
            except (_Bad, ValueError, ArithmeticError, OverflowError) as e:
                row.append(None)
                if bad is None:
                    bad = e if isinstance(e, _Bad) else _Bad(c.name, c.type)
        if bad is not None:
            return row, Problem(MALFORMED, f"{MALFORMED}: {bad.path} is not {bad.expected}")
        if missing.found:
            pattern, path = min(missing.found, key=lambda m: self._order[m[0]])
            return row, Problem(required_message(pattern), required_message(path))
        return row, None

    def explain(self, raw: bytes | None) -> str | None:
        """The exact reason a record is bad, or None if this parser finds none."""
        if raw is None:
            return None
        _, problem = self.parse_record(raw)
        return problem.message if problem is not None else None


def converter(t: ColumnType) -> Converter:
    """``(json value, path, missing) -> value`` for ``t``; raises :class:`_Bad`."""
    if isinstance(t, StructOf):
        kids = [(c, converter(c.type)) for c in t.fields]

        def struct(v: Any, path: str, missing: _Missing) -> Any:
            if v is None:
                return None
            if not isinstance(v, dict):
                raise _Bad(path, "an object")
            out = {}
            for c, conv in kids:
                child = f"{path}.{c.name}"
                value = v.get(c.name)
                if value is None and c.required:
                    missing.found.append((pattern_of(child), child))
                out[c.name] = conv(value, child, missing)
            return out

        return struct
    if isinstance(t, ListOf):
        element = converter(t.element)

        def array(v: Any, path: str, missing: _Missing) -> Any:
            if v is None:
                return None
            if not isinstance(v, list):
                raise _Bad(path, "an array")
            out = []
            for i, item in enumerate(v):
                at = f"{path}[{i}]"
                if item is None and t.element_required:
                    missing.found.append((pattern_of(at), at))
                out.append(element(item, at, missing))
            return out

        return array
    if isinstance(t, MapOf):
        value_of = converter(t.value)

        def mapping(v: Any, path: str, missing: _Missing) -> Any:
            if v is None:
                return None
            if not isinstance(v, dict):
                raise _Bad(path, "an object")
            out = []
            for key, item in v.items():
                at = f"{path}{{{json.dumps(key)}}}"
                if item is None and t.value_required:
                    missing.found.append((pattern_of(at), at))
                out.append((key, value_of(item, at, missing)))
            return out

        return mapping
    leaf = _leaf(t)

    def primitive(v: Any, path: str, missing: _Missing) -> Any:
        if v is None:
            return None
        try:
            return leaf(v)
        except (_LeafBad, ValueError, ArithmeticError, OverflowError):
            raise _Bad(path, t) from None

    return primitive


class _LeafBad(Exception):
    pass


def _leaf(t: ColumnType) -> Callable[[Any], Any]:
    name = str(t)

    def string(v: Any) -> Any:
        if isinstance(v, str):
            return v
        return json.dumps(v, separators=(",", ":"), default=_json_number)

    def integer(bits: int) -> Callable[[Any], Any]:
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

        def conv(v: Any) -> Any:
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise _LeafBad
            return v

        return conv

    def floating(v: Any) -> Any:
        if isinstance(v, bool):
            raise _LeafBad
        if isinstance(v, int | float | decimal.Decimal):
            return float(v)
        if isinstance(v, str) and v in _FLOAT_WORDS:
            return _FLOAT_WORDS[v]
        raise _LeafBad

    def boolean(v: Any) -> Any:
        if isinstance(v, bool):
            return v
        raise _LeafBad

    def dec(v: Any) -> Any:
        assert isinstance(t, Decimal)
        if isinstance(v, bool | float):
            raise _LeafBad
        d = decimal.Decimal(v) if isinstance(v, int | str) else v
        if not isinstance(d, decimal.Decimal) or not d.is_finite():
            raise _LeafBad
        q = d.quantize(decimal.Decimal(1).scaleb(-t.scale), rounding=decimal.ROUND_HALF_UP)
        if len(q.as_tuple().digits) > t.precision:
            raise _LeafBad
        return q

    def binary(v: Any) -> Any:
        if not isinstance(v, str):
            raise _LeafBad
        try:
            return base64.b64decode(v, validate=True)
        except binascii.Error:
            raise _LeafBad from None

    def date(v: Any) -> Any:
        if not isinstance(v, str):
            raise _LeafBad
        m = _TS.match(v)
        if m is None or m.group(4) is not None or m.group(8) is not None:
            raise _LeafBad
        return dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))

    def timestamp(zoned: bool) -> Callable[[Any], Any]:
        def conv(v: Any) -> Any:
            if isinstance(v, bool):
                raise _LeafBad
            if isinstance(v, int):  # epoch seconds
                return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=v)
            if not isinstance(v, str):
                raise _LeafBad
            m = _TS.match(v)
            if m is None:
                raise _LeafBad
            y, mo, d, h, mi, s, frac, zone = m.groups()
            if zone is not None and not zoned:
                raise _LeafBad
            micros = int((frac or "0")[:6].ljust(6, "0"))
            ts = dt.datetime(
                int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0), micros, dt.UTC
            )
            return ts - _offset(zone)

        return conv

    if isinstance(t, Decimal):
        return dec
    by_name: dict[str, Callable[[Any], Any]] = {
        "string": string,
        "int": integer(32),
        "long": integer(64),
        "float": floating,
        "double": floating,
        "boolean": boolean,
        "binary": binary,
        "date": date,
        "timestamp": timestamp(False),
        "timestamptz": timestamp(True),
    }
    if name not in by_name:
        raise ValueError(f"no JSON conversion for {name}")
    return by_name[name]


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
