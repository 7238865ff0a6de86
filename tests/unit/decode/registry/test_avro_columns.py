"""The all-at-once Avro reader against fastavro, datum by datum: every datum it does not
mark odd is one fastavro decodes, using every byte, to the same value; corrupt datums
(truncated, bytes flipped, bytes left over) are odd or agree; schemas it does not take
compile to None."""

from __future__ import annotations

import io
import math
import random
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pytest

from pipeline.decode.registry.avro import plain_values
from pipeline.decode.registry.avro_columns import compile_reader
from pipeline.decode.registry.avro_cursor import Cursor

POINT = {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "int"}]}
SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Everything",
    "fields": [
        {"name": "s", "type": "string"},
        {"name": "l", "type": "long"},
        {"name": "i", "type": "int"},
        {"name": "b", "type": "boolean"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": ["null", "double"], "default": None},
        {"name": "raw", "type": "bytes"},
        {"name": "fx", "type": {"type": "fixed", "name": "F4", "size": 4}},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "tm", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "lt", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
        },
        {
            "name": "big",
            "type": {
                "type": "fixed",
                "name": "Big",
                "size": 16,
                "logicalType": "decimal",
                "precision": 38,
                "scale": 0,
            },
        },
        {"name": "tags", "type": {"type": "map", "values": ["long", "null"]}},
        {"name": "points", "type": {"type": "array", "items": POINT}},
        {
            "name": "nested",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Nested",
                    "fields": [
                        {"name": "words", "type": {"type": "array", "items": "string"}},
                        {"name": "deep", "type": ["null", "string"]},
                    ],
                },
            ],
        },
    ],
}


def _datum(rng: random.Random) -> dict[str, Any]:
    def text() -> str:
        return "".join(rng.choice("aé字b ") for _ in range(rng.choice([0, 3, 12, 13, 40])))

    when = datetime(2024, 1, 1, tzinfo=UTC).timestamp() + rng.uniform(-1e9, 1e9)
    return {
        "s": text(),
        "l": rng.choice([0, -1, 2**40, -(2**63), 2**63 - 1]),
        "i": rng.choice([0, 1, -(2**31), 2**31 - 1]),
        "b": rng.random() < 0.5,
        "f": rng.choice([0.5, -2.25, 1e30]),
        "d": rng.choice([None, 3.5]),
        "raw": bytes(rng.randrange(256) for _ in range(rng.choice([0, 5, 20]))),
        "fx": bytes(rng.randrange(256) for _ in range(4)),
        "e": rng.choice("ABC"),
        "ts": datetime.fromtimestamp(when, UTC),
        "tm": datetime.fromtimestamp(round(when, 3), UTC),
        "lt": datetime.fromtimestamp(when, UTC).replace(tzinfo=None),
        "day": date(2020, 1, 1).fromordinal(rng.randrange(700_000, 750_000)),
        "u": uuid.UUID(int=rng.getrandbits(128)),
        "price": Decimal(rng.choice([0, 1, -1, 12345, -9999999, 9999999, -128, 128, 255])) / 100,
        "big": Decimal(rng.choice([0, -1, 10**37, -(10**38) + 1, 10**38 - 1, 2**63])),
        "tags": {text(): rng.choice([None, 7]) for _ in range(rng.choice([0, 1, 3]))},
        "points": [{"x": rng.randrange(-5, 5)} for _ in range(rng.choice([0, 1, 9]))],
        "nested": rng.choice(
            [None, {"words": [text() for _ in range(rng.choice([0, 2]))], "deep": text()}]
        ),
    }


def _encode(schema: Any, datum: Any) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), datum)
    return buf.getvalue()


def _fastavro(schema: Any, raw: bytes) -> Any:
    """fastavro's value, or None when it refuses the datum or leaves bytes over."""
    buf = io.BytesIO(raw)
    try:
        value = fastavro.schemaless_reader(buf, fastavro.parse_schema(schema), None)
    except Exception:
        return None
    return value if buf.tell() == len(raw) else None


def _ours(schema: Any, raws: list[bytes]) -> tuple[list[Any], np.ndarray]:
    reader = compile_reader(schema)
    assert reader is not None
    cursor = Cursor(pa.array(raws, pa.binary()), 0)
    out = reader.read(cursor, np.arange(len(raws)))
    odd = cursor.odd | (cursor.pos != cursor.end)
    return out.to_pylist(), odd


def _same(ours: Any, theirs: Any) -> bool:
    if isinstance(theirs, dict) and isinstance(ours, list):  # a map: pairs
        return dict(ours) == theirs
    if isinstance(theirs, dict):
        return set(ours) == set(theirs) and all(_same(ours[k], theirs[k]) for k in theirs)
    if isinstance(theirs, list):
        return len(ours) == len(theirs) and all(map(_same, ours, theirs))
    if isinstance(theirs, float):
        return ours == theirs or (math.isnan(theirs) and math.isnan(ours))
    return bool(ours == theirs)


def test_well_formed_datums_read_as_fastavro_reads_them() -> None:
    rng = random.Random(7)
    datums = [_datum(rng) for _ in range(300)]
    raws = [_encode(SCHEMA, d) for d in datums]
    rows, odd = _ours(SCHEMA, raws)
    assert not odd.any()
    for row, raw in zip(rows, raws, strict=True):
        assert _same(row, plain_values(_fastavro(SCHEMA, raw))), (row, _fastavro(SCHEMA, raw))


@pytest.mark.parametrize("damage", ["truncate", "flip", "extra"])
def test_a_damaged_datum_is_odd_or_read_as_fastavro_reads_it(damage: str) -> None:
    rng = random.Random(len(damage))  # a fixed seed per kind
    raws = []
    for _ in range(400):
        raw = bytearray(_encode(SCHEMA, _datum(rng)))
        if damage == "truncate":
            raw = raw[: rng.randrange(len(raw))]
        elif damage == "flip":
            for _ in range(rng.choice([1, 2])):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
        else:
            raw += bytes(rng.randrange(1, 4))
        raws.append(bytes(raw))
    rows, odd = _ours(SCHEMA, raws)
    if damage != "flip":
        assert odd.all()  # every one of them is fastavro's to refuse
    for row, raw, is_odd in zip(rows, raws, odd, strict=True):
        if not is_odd:
            theirs = _fastavro(SCHEMA, raw)
            assert theirs is not None and _same(row, plain_values(theirs)), raw


def test_out_of_range_and_non_canonical_values_are_left_to_fastavro() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        ],
    }
    plain = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "u", "type": "string"}, {"name": "day", "type": "int"}],
    }
    canonical = str(uuid.UUID(int=2**128 - 1))  # all "f": lower case
    raws = [
        _encode(plain, {"u": canonical, "day": 0}),
        _encode(plain, {"u": canonical.upper(), "day": 0}),  # fastavro lower-cases it
        _encode(plain, {"u": canonical, "day": 5_000_000}),  # beyond year 9999
        b"\x02\xff\x00",  # a 1-byte string that is not UTF-8, then day 0
    ]
    _, odd = _ours(schema, raws)
    assert odd.tolist() == [False, True, True, True]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2},
        {"type": "int", "logicalType": "time-millis"},
        ["null", "string", "long"],
        {"type": "array", "items": "null"},
        "SomeNamedType",
    ],
)
def test_what_it_does_not_take_compiles_to_none(schema: Any) -> None:
    assert compile_reader(schema) is None


def test_a_primitive_schema_reads_into_one_array() -> None:
    raws = [_encode("string", "k0"), _encode("string", "")]
    rows, odd = _ours("string", raws)
    assert rows == ["k0", ""] and not odd.any()


def test_a_decimal_beyond_its_precision_or_128_bits_is_left_to_fastavro() -> None:
    decimal = {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}
    fits = [_encode(decimal, Decimal("12.34")), _encode(decimal, Decimal("-0.01"))]
    rows, odd = _ours(decimal, fits)
    assert rows == [Decimal("12.34"), Decimal("-0.01")] and not odd.any()
    wide = _encode("bytes", b"\x01" * 17)  # 17 bytes: beyond decimal128
    _, odd = _ours(decimal, [fits[0], wide])
    assert odd.tolist() == [False, True]
    over = _encode("bytes", (12345).to_bytes(2, "big"))  # 123.45: five digits
    _, odd = _ours(decimal, [fits[0], over])
    assert odd.tolist() == [True, True]  # the column is fastavro's to read


def test_a_slice_of_a_batch_reads_its_own_datums() -> None:
    raws = [_encode("string", f"k{n}" * n) for n in range(20)]
    sliced = pa.array(raws, pa.binary())[7:12]
    reader = compile_reader("string")
    assert reader is not None
    cursor = Cursor(sliced, 0)
    out = reader.read(cursor, np.arange(len(sliced)))
    assert out.to_pylist() == [f"k{n}" * n for n in range(7, 12)]
    assert not cursor.odd.any() and (cursor.pos == cursor.end).all()
