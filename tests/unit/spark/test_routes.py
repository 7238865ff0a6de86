"""The workers' router: rows to table indices, by exact value, pattern, or default."""

from __future__ import annotations

import pyarrow as pa

from pipeline.spark.routes import Router


def _batch(values: list[str | None]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"k": values, "n": list(range(len(values)))})


def test_exact_values_then_patterns_then_the_default_pick_each_rows_table() -> None:
    router = Router("k", {"a": 1}, (("b.*", 2), ("bc", 3)), default=0)
    batch = _batch(["a", "bc", "x", None, "a", "b"])
    assert router.table_indices(batch).to_pylist() == [1, 2, 0, 0, 1, 2]
    split = {i: rows.column("n").to_pylist() for i, rows in router.split(batch)}
    assert split == {0: [2, 3], 1: [0, 4], 2: [1, 5]}


def test_a_pattern_matches_the_whole_value() -> None:
    router = Router("k", patterns=(("view|click", 1),))
    assert router.table_indices(_batch(["view", "clicks", "click"])).to_pylist() == [1, 0, 1]


def test_a_batch_for_one_table_passes_through_whole() -> None:
    batch = _batch(["a", "a"])
    ((index, rows),) = Router("k", {"a": 3}).split(batch)
    assert index == 3 and rows is batch


def test_a_non_string_column_routes_by_its_text() -> None:
    batch = pa.RecordBatch.from_pydict({"k": [1, 2, 1]})
    assert Router("k", {"2": 1}).table_indices(batch).to_pylist() == [0, 1, 0]
