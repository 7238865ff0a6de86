"""The per-record JSON decoder (pipeline/decode/json_values.py): Spark's PERMISSIVE
``from_json`` rules per type, nested values in the shapes ``pyarrow.array`` takes, and the
dead letter's reason with its exact path (and the precedence among several problems)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from typing import Any

import pytest

from pipeline.columns import Column, ColumnType, Decimal, ListOf, MapOf, Primitive, StructOf
from pipeline.decode.json_values import (
    MALFORMED,
    Problem,
    RecordParser,
    converter,
    pattern_of,
    required_message,
    required_paths,
)

UTC = dt.UTC


def _value(t: ColumnType, raw: Any) -> Any:
    """The value of one column ``v`` of type ``t`` parsed from ``{"v": raw}``."""
    values, problem = RecordParser([Column("v", t)]).parse_record(json.dumps({"v": raw}).encode())
    assert problem is None, problem
    assert values is not None
    return values[0]


def _problem(t: ColumnType, raw: Any) -> Problem:
    """The problem of ``{"v": raw}`` for one column ``v`` of type ``t`` (its value: null)."""
    values, problem = RecordParser([Column("v", t)]).parse_record(json.dumps({"v": raw}).encode())
    assert problem is not None, f"{raw!r} accepted as {t}: {values}"
    assert values == [None]
    return problem


def _wrong_type(path: str, expected: str) -> Problem:
    return Problem(MALFORMED, f"{MALFORMED}: {path} is not {expected}")


# ---------------------------------------------------------------------------------------
# Primitive types: what each accepts, what it refuses
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("text", "text"),
        (12, "12"),  # a number in a string column keeps its JSON text
        (1.5, "1.5"),
        (True, "true"),
        ({"a": 1, "b": [1, 2.5]}, '{"a":1,"b":[1,2.5]}'),
        ([], "[]"),
    ],
)
def test_string_takes_any_json_value_as_its_text(raw: Any, expected: str) -> None:
    assert _value(Primitive("string"), raw) == expected


@pytest.mark.parametrize(
    ("type_name", "raw"),
    [
        ("int", 0),
        ("int", 2**31 - 1),
        ("int", -(2**31)),
        ("long", 2**63 - 1),
        ("long", -(2**63)),
    ],
)
def test_integers_take_integers_within_their_range(type_name: str, raw: int) -> None:
    value = _value(Primitive(type_name), raw)
    assert value == raw and type(value) is int


@pytest.mark.parametrize(
    ("type_name", "raw"),
    [
        ("int", 2**31),
        ("int", -(2**31) - 1),
        ("long", 2**63),
        ("int", 1.0),  # a JSON fraction, even a whole one
        ("int", "1"),  # a number written as a string
        ("int", True),  # JSON booleans are not numbers
        ("long", False),
        ("long", [1]),
    ],
)
def test_integers_refuse_other_values(type_name: str, raw: Any) -> None:
    assert _problem(Primitive(type_name), raw) == _wrong_type("v", type_name)


@pytest.mark.parametrize("type_name", ["float", "double"])
@pytest.mark.parametrize(
    ("raw", "expected"),
    [(1.25, 1.25), (3, 3.0), (-0.5, -0.5), ("Infinity", math.inf), ("+INF", math.inf)],
)
def test_floating_point_takes_numbers_and_infinity_words(
    type_name: str, raw: Any, expected: float
) -> None:
    value = _value(Primitive(type_name), raw)
    assert value == expected and type(value) is float


@pytest.mark.parametrize("word", ["-Infinity", "-INF"])
def test_floating_point_takes_negative_infinity_words(word: str) -> None:
    assert _value(Primitive("double"), word) == -math.inf


@pytest.mark.parametrize("word", ["NaN", "+NaN", "-NaN"])
def test_floating_point_takes_nan(word: str) -> None:
    assert math.isnan(_value(Primitive("double"), word))


@pytest.mark.parametrize("raw", ["1.5", "nan", "inf", True, {"x": 1}, [1.0]])
def test_floating_point_refuses_strings_booleans_and_containers(raw: Any) -> None:
    assert _problem(Primitive("double"), raw) == _wrong_type("v", "double")


def test_boolean_takes_only_json_booleans() -> None:
    assert _value(Primitive("boolean"), True) is True
    assert _value(Primitive("boolean"), False) is False
    for raw in (1, 0, "true", "false"):
        assert _problem(Primitive("boolean"), raw) == _wrong_type("v", "boolean")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (1.005, "1.01"),  # half-up, on the JSON text (a binary float would round down)
        (1.004, "1.00"),
        (-1.005, "-1.01"),  # half-up is away from zero
        (3, "3.00"),
        ("2.5", "2.50"),  # a decimal written as a string
        (999.994, "999.99"),
    ],
)
def test_decimal_rounds_half_up_to_its_scale(raw: Any, expected: str) -> None:
    value = _value(Decimal(5, 2), raw)
    assert isinstance(value, decimal.Decimal)
    assert str(value) == expected


@pytest.mark.parametrize(
    "raw",
    [
        1234.5,  # 1234.50: six digits for precision 5
        999.995,  # rounds up to 1000.00: too many digits
        "abc",
        "NaN",
        "Infinity",
        True,
        [1],
    ],
)
def test_decimal_refuses_values_beyond_its_precision_or_not_numbers(raw: Any) -> None:
    assert _problem(Decimal(5, 2), raw) == _wrong_type("v", "decimal(5, 2)")


def test_binary_is_strict_base64() -> None:
    assert _value(Primitive("binary"), "aGVsbG8=") == b"hello"
    assert _value(Primitive("binary"), "") == b""
    # characters outside the alphabet are refused, not skipped
    for raw in ("not base64!", "aGVsbG8", "aG k=", "aGk=!", 5, ["aGk="]):
        assert _problem(Primitive("binary"), raw) == _wrong_type("v", "binary")


def test_date_is_an_iso_date_without_time_or_zone() -> None:
    assert _value(Primitive("date"), "2024-02-29") == dt.date(2024, 2, 29)
    assert _value(Primitive("date"), " 2024-1-5 ") == dt.date(2024, 1, 5)
    for raw in ("2024-02-30", "2023-02-29", "2024-02-29T10:00", "2024-02-29Z", "29.02.2024", 20):
        assert _problem(Primitive("date"), raw) == _wrong_type("v", "date")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2024-01-02T03:04:05", dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2024-01-02 03:04", dt.datetime(2024, 1, 2, 3, 4, tzinfo=UTC)),
        ("2024-01-02", dt.datetime(2024, 1, 2, tzinfo=UTC)),
        ("2024-01-02T03:04:05.5", dt.datetime(2024, 1, 2, 3, 4, 5, 500000, tzinfo=UTC)),
        # nanoseconds are cut to microseconds
        ("2024-01-02T03:04:05.123456789", dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)),
        (0, dt.datetime(1970, 1, 1, tzinfo=UTC)),  # epoch seconds
        (86401, dt.datetime(1970, 1, 2, 0, 0, 1, tzinfo=UTC)),
        (-1, dt.datetime(1969, 12, 31, 23, 59, 59, tzinfo=UTC)),
    ],
)
def test_timestamps_take_iso_strings_and_epoch_seconds(raw: Any, expected: dt.datetime) -> None:
    assert _value(Primitive("timestamp"), raw) == expected
    assert _value(Primitive("timestamptz"), raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2024-01-02T03:04:05Z", dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2024-01-02T03:04:05 UTC", dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2024-01-02T03:04:05+02:00", dt.datetime(2024, 1, 2, 1, 4, 5, tzinfo=UTC)),
        ("2024-01-02T03:04:05-0530", dt.datetime(2024, 1, 2, 8, 34, 5, tzinfo=UTC)),
        ("2024-01-02T03:04:05+5", dt.datetime(2024, 1, 1, 22, 4, 5, tzinfo=UTC)),
    ],
)
def test_timestamptz_converts_a_zone_to_utc(raw: str, expected: dt.datetime) -> None:
    value = _value(Primitive("timestamptz"), raw)
    assert value == expected and value.utcoffset() == dt.timedelta(0)


def test_timestamp_without_zone_refuses_a_zone() -> None:
    assert _problem(Primitive("timestamp"), "2024-01-02T03:04:05Z") == _wrong_type("v", "timestamp")
    assert _problem(Primitive("timestamp"), "2024-01-02T03:04:05+01:00") == _wrong_type(
        "v", "timestamp"
    )


@pytest.mark.parametrize("raw", [True, 1.5, "yesterday", "2024-13-01T00:00:00", [0], {"s": 0}])
def test_timestamps_refuse_booleans_fractions_and_other_text(raw: Any) -> None:
    for name in ("timestamp", "timestamptz"):
        assert _problem(Primitive(name), raw) == _wrong_type("v", name)


def test_a_type_without_a_json_conversion_is_refused_when_the_parser_is_built() -> None:
    with pytest.raises(ValueError, match="no JSON conversion for uuid"):
        converter(Primitive("uuid"))
    with pytest.raises(ValueError, match="no JSON conversion for uuid"):
        RecordParser([Column("v", ListOf(Primitive("uuid"), False))])


def test_null_and_absent_values_are_null_for_every_type() -> None:
    types: list[ColumnType] = [
        Primitive(n)
        for n in ("string", "int", "long", "double", "boolean", "binary", "date", "timestamp")
    ] + [
        Decimal(10, 2),
        ListOf(Primitive("int"), True),
        MapOf(Primitive("int"), True),
        StructOf((Column("x", Primitive("int"), required=True),)),
    ]
    parser = RecordParser([Column(f"c{i}", t) for i, t in enumerate(types)])
    nulls = {f"c{i}": None for i in range(len(types))}
    assert parser.parse_record(json.dumps(nulls).encode()) == ([None] * len(types), None)
    assert parser.parse_record(b"{}") == ([None] * len(types), None)


# ---------------------------------------------------------------------------------------
# Nested values: the shapes pyarrow.array takes
# ---------------------------------------------------------------------------------------

ITEM = StructOf(
    (Column("sku", Primitive("string"), required=True), Column("qty", Primitive("int")))
)


def test_struct_is_a_dict_of_its_fields_with_unknown_keys_dropped() -> None:
    raw = {"sku": "a", "qty": 2, "extra": 1}
    assert _value(ITEM, raw) == {"sku": "a", "qty": 2}
    assert _value(ITEM, {"sku": "a"}) == {"sku": "a", "qty": None}


def test_list_is_a_list_of_converted_elements() -> None:
    assert _value(ListOf(Primitive("long"), False), [1, None, 3]) == [1, None, 3]
    assert _value(ListOf(ITEM, False), [{"sku": "a", "qty": 1}, None]) == [
        {"sku": "a", "qty": 1},
        None,
    ]
    assert _value(ListOf(Decimal(4, 1), False), [1.25]) == [decimal.Decimal("1.3")]


def test_map_is_a_list_of_key_value_pairs_in_document_order() -> None:
    t = MapOf(Primitive("double"), False)
    pairs = _value(t, {"b": 1, "a": 2.5, "c": None})
    assert pairs == [("b", 1.0), ("a", 2.5), ("c", None)]


def test_nested_containers_convert_all_the_way_down() -> None:
    t = StructOf(
        (
            Column("tags", MapOf(ListOf(Primitive("date"), False), False)),
            Column("at", Primitive("timestamptz")),
        )
    )
    raw = {"tags": {"x": ["2024-01-01"]}, "at": "2024-01-01T00:00:00+01:00"}
    assert _value(t, raw) == {
        "tags": [("x", [dt.date(2024, 1, 1)])],
        "at": dt.datetime(2023, 12, 31, 23, tzinfo=UTC),
    }


@pytest.mark.parametrize(
    ("t", "raw", "expected"),
    [
        (ITEM, [1], "an object"),
        (ITEM, "sku", "an object"),
        (ListOf(Primitive("int"), False), {"0": 1}, "an array"),
        (ListOf(Primitive("int"), False), "1,2", "an array"),
        (MapOf(Primitive("int"), False), [["a", 1]], "an object"),
    ],
)
def test_a_container_of_the_wrong_kind_is_malformed(t: ColumnType, raw: Any, expected: str) -> None:
    assert _problem(t, raw) == _wrong_type("v", expected)


def test_a_wrong_type_deep_inside_names_its_exact_path() -> None:
    t = StructOf(
        (Column("items", ListOf(ITEM, False)), Column("tags", MapOf(Primitive("int"), False)))
    )
    problem = _problem(t, {"items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": "2"}]})
    assert problem == _wrong_type("v.items[1].qty", "int")
    problem = _problem(t, {"tags": {"ok": 1, "bad key": 1.5}})
    assert problem == _wrong_type('v.tags{"bad key"}', "int")


# ---------------------------------------------------------------------------------------
# Records: malformed JSON, permissive columns, unknown fields
# ---------------------------------------------------------------------------------------

COLUMNS = (
    Column("id", Primitive("long"), required=True),
    Column("name", Primitive("string")),
    Column("score", Primitive("double")),
)


@pytest.mark.parametrize("raw", [b"", b"{", b"not json", b'{"id": 1,}', b"[1, 2]", b'"x"', b"1"])
def test_malformed_json_or_not_an_object_is_a_malformed_record(raw: bytes) -> None:
    parser = RecordParser(COLUMNS)
    assert parser.parse(raw) == (None, Problem(MALFORMED, MALFORMED), None)
    assert parser.parse_record(raw) == (None, Problem(MALFORMED, MALFORMED))
    assert parser.explain(raw) == MALFORMED


def test_a_good_record_gives_one_value_per_column_in_column_order() -> None:
    parser = RecordParser(COLUMNS)
    assert parser.parse_record(b'{"score": 2, "id": 7, "name": "n"}') == ([7, "n", 2.0], None)
    assert parser.explain(b'{"id": 7}') is None
    assert parser.explain(None) is None


def test_a_column_of_the_wrong_type_is_null_and_the_others_keep_their_values() -> None:
    values, problem = RecordParser(COLUMNS).parse_record(b'{"id": 7, "name": "n", "score": true}')
    assert values == [7, "n", None]
    assert problem == _wrong_type("score", "double")


def test_invalid_utf8_is_replaced_not_refused() -> None:
    values, problem = RecordParser(COLUMNS).parse_record(b'{"id": 1, "name": "a\xffb"}')
    assert problem is None
    assert values == [1, "a\ufffdb", None]


def test_unknown_fields_are_the_sorted_top_level_keys_with_a_value_and_no_column() -> None:
    parser = RecordParser(COLUMNS)
    _, _, unknown = parser.parse(b'{"id": 1, "zeta": 1, "alpha": {"x": 1}, "gone": null}')
    assert unknown == ["alpha", "zeta"]
    assert parser.parse(b'{"id": 1, "gone": null}') == ([1, None, None], None, None)
    # reported for a bad record too (the dead letter may name them)
    _, problem, unknown = parser.parse(b'{"id": "x", "extra": 0}')
    assert problem is not None and unknown == ["extra"]


# ---------------------------------------------------------------------------------------
# Required values, and which problem a record reports
# ---------------------------------------------------------------------------------------


def test_required_message_quotes_the_path() -> None:
    assert required_message("a.b[]") == "required field 'a.b[]' is missing or null"


def test_pattern_of_drops_list_indexes_and_map_keys() -> None:
    assert pattern_of("items[3].price") == "items[].price"
    assert pattern_of('tags{"a.b"}.x[12][0]') == "tags{}.x[][]"
    assert pattern_of("plain") == "plain"


def test_a_missing_or_null_required_column_names_it() -> None:
    parser = RecordParser(COLUMNS)
    for raw in (b'{"name": "n"}', b'{"id": null, "name": "n"}'):
        values, problem = parser.parse_record(raw)
        assert values == [None, "n", None]
        assert problem == Problem(required_message("id"), required_message("id"))


def test_a_missing_required_element_names_its_index_and_the_generic_its_pattern() -> None:
    t = ListOf(ITEM, True)
    parser = RecordParser([Column("items", t)])
    values, problem = parser.parse_record(b'{"items": [{"sku": "a"}, {"qty": 1}]}')
    assert values == [[{"sku": "a", "qty": None}, {"sku": None, "qty": 1}]]
    assert problem == Problem(required_message("items[].sku"), required_message("items[1].sku"))
    _, problem = parser.parse_record(b'{"items": [{"sku": "a"}, null]}')
    assert problem == Problem(required_message("items[]"), required_message("items[1]"))


def test_a_missing_required_map_value_names_its_key() -> None:
    parser = RecordParser([Column("tags", MapOf(Primitive("string"), True))])
    values, problem = parser.parse_record(b'{"tags": {"a": "x", "b": null}}')
    assert values == [[("a", "x"), ("b", None)]]
    assert problem == Problem(required_message("tags{}"), required_message('tags{"b"}'))


def test_a_null_optional_struct_does_not_require_its_fields() -> None:
    parser = RecordParser([Column("item", ITEM)])
    assert parser.parse_record(b'{"item": null}') == ([None], None)
    _, problem = parser.parse_record(b'{"item": {}}')
    assert problem == Problem(required_message("item.sku"), required_message("item.sku"))


def test_a_wrong_type_beats_a_missing_required_value() -> None:
    parser = RecordParser(COLUMNS)
    _, problem = parser.parse_record(b'{"score": "high"}')  # id missing, score wrong
    assert problem == _wrong_type("score", "double")


def test_the_first_wrong_type_in_column_order_is_reported() -> None:
    parser = RecordParser(COLUMNS)
    _, problem = parser.parse_record(b'{"score": "high", "id": "seven"}')
    assert problem == _wrong_type("id", "long")


def test_among_missing_values_the_first_in_schema_order_wins_not_the_first_found() -> None:
    # in the document the element's field (items[0].sku) comes before the null element
    # (items[1]); in schema order the element itself (items[]) comes first
    parser = RecordParser([Column("items", ListOf(ITEM, True))])
    _, problem = parser.parse_record(b'{"items": [{"qty": 1}, null]}')
    assert problem == Problem(required_message("items[]"), required_message("items[1]"))
    # the same pattern twice: the first found is the exact path
    _, problem = parser.parse_record(b'{"items": [{"sku": "a"}, {}, {}]}')
    assert problem == Problem(required_message("items[].sku"), required_message("items[1].sku"))


def test_required_paths_lists_every_required_place_depth_first_in_schema_order() -> None:
    sku = ITEM.fields[0]
    columns = [
        Column("id", Primitive("long"), required=True),
        Column("items", ListOf(ITEM, True)),
        Column("tags", MapOf(Primitive("int"), True), required=True),
        Column("opt", ListOf(Primitive("int"), False)),
    ]
    assert required_paths(columns) == [
        ("id", columns[0], Primitive("long")),
        ("items[]", None, ITEM),
        ("items[].sku", sku, Primitive("string")),
        ("tags", columns[2], MapOf(Primitive("int"), True)),
        ("tags{}", None, Primitive("int")),
    ]
