"""``decode.engine: arrow`` gives the same rows and dead letters as Spark's ``from_json``.

A corpus of edge cases (wrong types, numbers for strings, NaN, overflow, missing required
fields, nulls, over-size values, raw line breaks, arrays/scalars at top level, timestamp
shapes) goes through both decoders; every output column must match row for row. Also:
the vectorised path stays exact when bad records hide inside large blocks (bisecting).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from pipeline.columns import FieldSpec, data_columns, spark_ddl, table_columns
from pipeline.commit.offsets import OffsetRange, pack_ranges
from pipeline.config import DecodeConfig
from pipeline.decode.arrow import ArrowDecoder, refine_batch
from pipeline.decode.spark import decode
from pipeline.source.reader import record_schema

SCHEMA = [
    {"name": "id", "type": "long", "required": True},
    {"name": "s", "type": "string"},
    {"name": "n", "type": "int"},
    {"name": "d", "type": "double"},
    {"name": "f", "type": "float"},
    {"name": "b", "type": "boolean"},
    {"name": "ts", "type": "timestamptz"},
    {"name": "day", "type": "date"},
    {"name": "amt", "type": "decimal(10,2)"},
]

CORPUS: list[bytes | None] = [
    b'{"id":1,"s":"a","n":3,"d":1.5,"f":2.5,"b":true,"ts":"2024-01-02T03:04:05Z",'
    b'"day":"2024-01-02","amt":1.25}',
    b'{"id":2,"s":123}',
    b'{"id":3,"s":1.50}',
    b'{"id":4,"s":true}',
    b'{"id":5,"s":{"x":[1,2]}}',
    b'{"id":6,"n":1.0}',
    b'{"id":7,"n":3000000000}',
    b'{"id":8,"n":"5"}',
    b'{"id":9,"d":5}',
    b'{"id":10,"d":"NaN"}',
    b'{"id":11,"d":NaN}',
    b'{"id":12,"d":"1.5"}',
    b'{"id":13,"b":1}',
    b'{"id":14,"ts":"2024-01-02T03:04:05.123456+02:00"}',
    b'{"id":15,"ts":"2024-01-02 03:04:05"}',
    b'{"id":16,"ts":1700000000}',
    b'{"id":17,"ts":"not a time"}',
    b'{"id":18,"amt":"3.14"}',
    b'{"id":19,"amt":1.235}',
    b'{"id":20,"amt":123456789012}',
    b'{"s":"no id"}',
    b'{"id":null}',
    b"not json",
    b"",
    b"null",
    b"[1,2]",
    b'[{"id":21}]',
    b"42",
    None,
    b'{"id":22,\n"s":"line break between tokens"}',
    b'{"id":23,"s":"tab\\tescaped"}',
    b'{"id":41,\r\n"s":"CRLF between tokens"}',
    b'{"id":42,"s":"raw\nline break inside a string"}',
    b'{"id":24,"extra":"ignored","s":"x"}',
    b'{"id":43,"x":null,"s":"a null-valued unknown key is not counted"}',
    b'{"id":44,"z":{"a":1},"y":[1,2],"s":"two unknown keys, sorted"}',
    b'{"id":45,"n":"x","extra":1}',  # malformed and an unknown key
    b'{"id":25,"s":"x"}   ',
    b'  {"id":26}',
    b'{"id":27,"s":"' + b"x" * 300 + b'"}',  # over maxRecordBytes below
    b'{"id":28,"s":"unicode \xc3\xa9"}',
    b'{"id":29,"day":"2024-02-30"}',
    b'{"id":30,"f":1e39}',
    b'{"id":31,"d":-0.0,"n":-2147483648}',
]


KEPT_FOR_ERRORS = {"_error", "_raw_key", "_raw_value", "_raw_headers", "_kafka_offset"}


def _records(values: list[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([f"k{i}".encode() for i in range(n)], pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(["t"] * n),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([1_700_000_000_000_000] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ],
        schema=record_schema(False),
    )


def _normalise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What reaches the tables: all columns of good rows; for dead letters, the error,
    the raw record and its coordinates (their data columns are never written)."""
    out = []
    for r in rows:
        row = {}
        for k, v in r.items():
            if r["_error"] is not None and k not in KEPT_FOR_ERRORS:
                continue
            if isinstance(v, float) and v != v:
                v = "NaN"  # NaN != NaN
            elif hasattr(v, "tzinfo") and getattr(v, "tzinfo", None) is not None:
                v = v.timestamp()
            elif isinstance(v, bytearray):
                v = bytes(v)
            row[k] = v
        out.append(row)
    return out


@pytest.mark.parametrize("unknown_fields", ["ignore", "dead-letter"])
def test_arrow_engine_matches_spark_from_json(spark: Any, unknown_fields: str) -> None:
    rows = _assert_engines_agree(spark, SCHEMA, CORPUS, 256, unknown_fields)
    by_id = {r["id"]: r for r in rows if r["id"] is not None}
    assert by_id[43]["_unknown"] is None
    if unknown_fields == "ignore":
        assert by_id[24]["_unknown"] == ["extra"] and by_id[24]["_error"] is None
        assert by_id[44]["_unknown"] == ["y", "z"]
    else:
        assert by_id[44]["_error"] == "unknown field(s): y, z"
        assert by_id[45]["_error"].startswith("malformed")  # the other reasons come first


def _assert_engines_agree(
    spark: Any,
    schema: list[dict[str, Any]],
    corpus: list[bytes | None],
    max_record_bytes: int,
    unknown_fields: str = "ignore",
) -> list[dict[str, Any]]:
    """Both engines decode ``corpus``; every column of every row must match (after the
    tasks' refinement of dead-letter reasons, which both engines go through)."""
    cfg = DecodeConfig.model_validate(
        {"schema": schema, "maxRecordBytes": max_record_bytes, "unknownFields": unknown_fields}
    )
    columns = table_columns(
        [FieldSpec(f["name"], f["type"], f.get("required", False)) for f in schema]
    )
    data_ddl = spark_ddl(data_columns(columns))
    batch = _records(corpus)
    df = spark.createDataFrame(pa.Table.from_batches([batch]).to_pandas())
    df = df.selectExpr(
        "key",
        "value",
        "topic",
        "cast(partition as int) partition",
        "offset",
        "timestamp",
        "cast(timestampType as int) timestampType",
    )
    decoder = ArrowDecoder(cfg, False)
    from_spark = decode(df, cfg, data_ddl, False).orderBy("_kafka_offset").toArrow()
    expected = pa.Table.from_batches(
        [refine_batch(b, decoder.parser) for b in from_spark.to_batches()]
    ).to_pylist()
    got = decoder.decode(batch).to_pylist()
    assert len(got) == len(expected) == len(corpus)
    diffs = [
        (raw, {k: (g[k], e[k]) for k in e if g.get(k) != e[k]})
        for e, g, raw in zip(_normalise(expected), _normalise(got), corpus, strict=True)
        if g != e
    ]
    assert not diffs, "\n".join(f"{raw!r}: arrow, spark = {d}" for raw, d in diffs)
    return got


NESTED_SCHEMA: list[dict[str, Any]] = [
    {"name": "id", "type": "long", "required": True},
    {
        "name": "device",
        "type": {
            "type": "struct",
            "fields": [
                {"name": "id", "type": "string", "required": True},
                {"name": "seen", "type": "timestamptz"},
                {
                    "name": "os",
                    "type": {
                        "type": "struct",
                        "fields": [
                            {"name": "name", "type": "string"},
                            {"name": "build", "type": {"type": "list", "element": "int"}},
                        ],
                    },
                },
            ],
        },
    },
    {
        "name": "items",
        "type": {
            "type": "list",
            "element": {
                "type": "struct",
                "fields": [
                    {"name": "sku", "type": "string", "required": True},
                    {"name": "price", "type": "decimal(9,2)"},
                    {"name": "day", "type": "date"},
                ],
            },
        },
    },
    {"name": "scores", "type": {"type": "list", "element": "double", "elementRequired": True}},
]
NESTED_CORPUS: list[bytes | None] = [
    b'{"id":1,"device":{"id":"d1","seen":"2024-01-02T03:04:05Z","os":{"name":"linux",'
    b'"build":[1,2,3]}},"items":[{"sku":"a","price":1.25,"day":"2024-01-02"},'
    b'{"sku":"b","price":null}],"scores":[1.5,2]}',
    b'{"id":2}',
    b'{"id":3,"device":null,"items":[],"scores":[]}',
    b'{"id":4,"device":{"id":"d4","os":{"build":null}},"items":[{"sku":"c"}]}',
    b'{"id":5,"device":{"id":"d5","seen":"2024-01-02 03:04:05"}}',  # naive: slow path
    b'{"id":6,"device":{"seen":"2024-01-02T03:04:05Z"}}',  # device.id missing
    b'{"id":7,"items":[{"sku":"a"},{"price":2}]}',  # items[1].sku missing
    b'{"id":8,"items":[{"sku":"a","price":"x"}]}',  # wrong type deep inside
    b'{"id":9,"device":{"id":"d9","os":{"build":[1,"two"]}}}',
    b'{"id":10,"scores":[1,null,3]}',  # a required element missing
    b'{"id":11,"device":[1]}',  # an array for a struct
    b'{"id":12,"items":{"sku":"a"}}',  # an object for a list
    b'{"id":13,"device":{"id":"d13","os":{"name":{"x":1}}}}',  # an object for a string
    b'{"id":14,"items":[{"sku":"a","day":"2024-1-2"}]}',  # a date in another shape
    b'{"device":{"id":"x"}}',  # id missing
]


def test_nested_columns_decode_alike_on_both_engines(spark: Any) -> None:
    rows = _assert_engines_agree(spark, NESTED_SCHEMA, NESTED_CORPUS, 4096)
    by_id = {r["id"]: r for r in rows if r["_error"] is None}
    assert sorted(by_id) == [1, 2, 3, 4, 5, 13, 14]
    first = by_id[1]
    assert first["device"]["os"] == {"name": "linux", "build": [1, 2, 3]}
    assert [i["sku"] for i in first["items"]] == ["a", "b"]
    assert str(first["items"][0]["price"]) == "1.25" and first["items"][1]["price"] is None
    assert first["scores"] == [1.5, 2.0]
    assert by_id[13]["device"]["os"]["name"] == '{"x":1}'  # JSON text, as Spark keeps it
    errors = {r["_kafka_offset"]: r["_error"] for r in rows if r["_error"] is not None}
    malformed = "malformed JSON or a value of the wrong type: "
    assert errors == {
        5: "required field 'device.id' is missing or null",
        6: "required field 'items[1].sku' is missing or null",
        7: malformed + "items[0].price is not decimal(9, 2)",
        8: malformed + "device.os.build[1] is not int",
        9: "required field 'scores[1]' is missing or null",
        10: malformed + "device is not an object",
        11: malformed + "items is not an array",
        14: "required field 'id' is missing or null",
    }


@pytest.mark.parametrize("bad_at", [0, 777, 19_999])
def test_bad_record_inside_a_large_block_is_isolated(bad_at: int) -> None:
    cfg = DecodeConfig.model_validate({"schema": SCHEMA})
    values: list[bytes | None] = [
        json.dumps({"id": i, "s": f"v{i}", "ts": "2024-01-02T03:04:05Z"}).encode()
        for i in range(20_000)
    ]
    values[bad_at] = b'{"id": "oops"}'
    out = ArrowDecoder(cfg, False).decode(_records(values))
    errors = out.column("_error").to_pylist()
    assert [i for i, e in enumerate(errors) if e] == [bad_at]
    ids = out.column("id").to_pylist()
    assert ids[:bad_at] == list(range(bad_at))
    assert ids[bad_at + 1 :] == list(range(bad_at + 1, 20_000))
    assert out.column("_raw_value").to_pylist()[bad_at] == b'{"id": "oops"}'
    assert out.column("_raw_value").null_count == 19_999


def test_unknown_keys_of_changing_types_are_still_found() -> None:
    """pyarrow cannot infer an unknown key whose type changes from row to row: such a block
    is parsed ignoring it, and its rows' keys are listed in Python; rows stay aligned."""
    cfg = DecodeConfig.model_validate({"schema": SCHEMA})
    values: list[bytes | None] = [
        json.dumps({"id": i, "s": f"v{i}", "debug": i if i % 2 else f"t{i}"}).encode()
        for i in range(5_000)
    ]
    values[7] = b'{"id":7,"s":"v7"}'
    out = ArrowDecoder(cfg, False).decode(_records(values))
    assert out.column("_error").null_count == 5_000
    unknown = out.column("_unknown").to_pylist()
    assert unknown[7] is None and unknown[:7] == [["debug"]] * 7
    assert sum(u == ["debug"] for u in unknown) == 4_999
    assert out.column("id").to_pylist() == list(range(5_000))


def test_line_breaks_inside_a_large_block_keep_rows_aligned() -> None:
    """Values with raw line breaks cannot share the NDJSON fast path: they are found by
    one scan of the block and decoded on their own, every other row stays in place."""
    cfg = DecodeConfig.model_validate({"schema": SCHEMA})
    values: list[bytes | None] = [
        json.dumps({"id": i, "s": f"v{i}"}).encode() for i in range(20_000)
    ]
    values[5] = b'{"id":5,\r\n"s":"v5"}'
    values[777] = b'{"id":777,\n"s":"v777"}'
    values[19_999] = b'{"id":19999,"s":"raw\nbreak"}'  # a raw control character: malformed
    out = ArrowDecoder(cfg, False).decode(_records(values))
    errors = out.column("_error").to_pylist()
    assert [i for i, e in enumerate(errors) if e] == [19_999]
    assert out.column("id").to_pylist()[:19_999] == list(range(19_999))
    assert out.column("s").to_pylist()[:19_999] == [f"v{i}" for i in range(19_999)]


def test_pack_ranges_balances_and_keeps_every_range() -> None:
    ranges = [OffsetRange("t", p, 0, 100 * (p + 1)) for p in range(8)]
    groups = pack_ranges(ranges, 3)
    assert len(groups) == 3
    assert sorted(r for g in groups for r in g) == sorted(ranges)
    loads = [sum(r.size for r in g) for g in groups]
    assert max(loads) - min(loads) <= max(r.size for r in ranges)  # greedy LPT bound
    assert pack_ranges(ranges, 3) == groups  # deterministic
    assert len(pack_ranges(ranges[:2], 16)) == 2  # never an empty task
