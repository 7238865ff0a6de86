"""The schema-change planner: which column changes a restart may apply, and the one-line
refusal (naming the column and the change) for every other."""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.columns import FieldSpec, parse_type, table_columns
from pipeline.columns.evolution import (
    AddColumn,
    MakeOptional,
    RenameColumn,
    Rules,
    UpdateDoc,
    WidenType,
    describe,
    plan_changes,
)
from pipeline.errors import SchemaChangeRefused

DEVICE: dict[str, Any] = {
    "type": "struct",
    "fields": [{"name": "id", "type": "string", "required": True}],
}
BASE = [
    FieldSpec("id", "int", True),
    FieldSpec("price", "decimal(9,2)"),
    FieldSpec("device", DEVICE),
    FieldSpec("items", {"type": "list", "element": {"type": "struct", "fields": [
        {"name": "sku", "type": "string"}, {"name": "qty", "type": "float"}]}}),
]  # fmt: skip


def _plan(new: list[FieldSpec], renames: bool = True) -> list[Any]:
    return plan_changes(table_columns(BASE), table_columns(new), Rules("db.t", renames))


def test_the_same_columns_change_nothing() -> None:
    assert _plan(BASE) == []


def test_additions_widenings_optional_docs_and_renames_are_planned() -> None:
    device = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "string", "required": False, "doc": "the device"},
            {"name": "model", "type": "string"},
        ],
    }
    items = {"type": "list", "element": {"type": "struct", "fields": [
        {"name": "code", "type": "string", "renamedFrom": "sku"},
        {"name": "qty", "type": "double"},
        {"name": "color", "type": "string"}]}}  # fmt: skip
    new = [
        FieldSpec("id", "long", True),
        FieldSpec("amount", "decimal(12,2)", renamed_from="price"),
        FieldSpec("device", device),
        FieldSpec("items", items),
        FieldSpec("tags", {"type": "map", "value": "string"}),
    ]
    changes = _plan(new)
    assert [describe(c) for c in changes] == [
        "widen id int -> long",
        "rename price to amount",
        "widen price decimal(9, 2) -> decimal(12, 2)",
        "make device.id optional",
        "update the doc of device.id",
        "add device.model (string)",
        "rename items.element.sku to code",
        "widen items.element.qty float -> double",
        "add items.element.color (string)",
        "add tags (map<string, string>)",
    ]
    assert isinstance(changes[0], WidenType) and isinstance(changes[1], RenameColumn)
    assert isinstance(changes[3], MakeOptional) and isinstance(changes[4], UpdateDoc)
    assert isinstance(changes[5], AddColumn) and changes[5].path == ("device", "model")
    # a restart after the rename was applied: nothing more to do
    renamed_base = table_columns(new)
    assert plan_changes(renamed_base, table_columns(new), Rules("t")) == []


@pytest.mark.parametrize(
    ("new", "message"),
    [
        (BASE[:3], "column 'items': is in the table but not configured: dropping a column"),
        ([FieldSpec("id", "long", True), *BASE[1:3]], "column 'items'"),
        ([FieldSpec("id", "string", True), *BASE[1:]], "column 'id': type change int -> string"),
        ([FieldSpec("id", "int", True), FieldSpec("price", "decimal(9,3)"), *BASE[2:]],
         "type change decimal(9, 2) -> decimal(9, 3) is not a widening"),
        ([*BASE, FieldSpec("extra", "int", True)], "column 'extra': a new column must be optional"),
        ([FieldSpec("id", "int", True), FieldSpec("price", "decimal(9,2)", True), *BASE[2:]],
         "column 'price': an optional column cannot become required"),
        ([*BASE[:3], FieldSpec("items", "string")],
         "type change list<struct<sku: string, qty: float>> -> string"),
        ([*BASE, FieldSpec("x", "int", renamed_from="nope")], "renamedFrom 'nope' names no column"),
        ([FieldSpec("id", "int", True), FieldSpec("cost", "decimal(9,2)"), *BASE[2:]],
         "column 'price': is in the table but not configured"),
    ],
)  # fmt: skip
def test_every_other_change_is_refused_in_one_line(new: list[FieldSpec], message: str) -> None:
    with pytest.raises(SchemaChangeRefused) as err:
        _plan(new)
    text = str(err.value)
    assert text.startswith("[ingest:schema-change] db.t: ") and message in text, text
    assert "\n" not in text


def test_renames_are_refused_where_the_readers_do_not_follow_them() -> None:
    new = [BASE[0], FieldSpec("amount", "decimal(9,2)", renamed_from="price"), *BASE[2:]]
    with pytest.raises(SchemaChangeRefused, match="renaming to 'amount' is not supported"):
        _plan(new, renames=False)
    wider = [BASE[0], FieldSpec("price", "decimal(12,2)"), *BASE[2:]]
    rules = Rules("db.t", renames=False, decimal_widening=False)
    with pytest.raises(
        SchemaChangeRefused, match="widening decimal.9, 2. -> decimal.12, 2. is not"
    ):
        plan_changes(table_columns(BASE), table_columns(wider), rules)
    assert parse_type("int") != parse_type("long")
