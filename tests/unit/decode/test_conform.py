"""A decoded batch conformed to each format's file schema and written as Parquet: an
optional struct that is null (or a list element struct that is null) while its fields are
required. Parquet refuses a null in a required column even under a null parent, so the
conformed batch must carry placeholders there, and only there."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import schema_to_pyarrow

from pipeline.columns import FieldSpec, table_columns
from pipeline.decode.conform import conform_batch
from pipeline.errors import PipelineError
from pipeline.formats.hudi.schema import HudiTableSpec
from pipeline.formats.iceberg.schema import build_schema

POINT = {"type": "struct", "fields": [{"name": "x", "type": "string", "required": True}]}
FIELDS = [
    FieldSpec(
        "device",
        {
            "type": "struct",
            "fields": [
                {"name": "id", "type": "string", "required": True},
                {"name": "at", "type": POINT, "required": True},
            ],
        },
    ),
    FieldSpec("points", {"type": "list", "element": POINT}),
]


def _struct(children: list[pa.Array], names: list[str], null: list[bool]) -> pa.StructArray:
    fields = [pa.field(n, c.type) for n, c in zip(names, children, strict=True)]
    return pa.StructArray.from_arrays(children, fields=fields, mask=pa.array(null))


def _batch() -> pa.RecordBatch:
    """What the decoders build: null structs whose children are null too."""
    at = _struct([pa.array(["a", None, "c"])], ["x"], [False, True, False])
    devices = _struct([pa.array(["d0", None, "d2"]), at], ["id", "at"], [False, True, False])
    elements = _struct([pa.array(["p", None])], ["x"], [False, True])
    points = pa.ListArray.from_arrays(
        pa.array([0, 2, 2, 2]), elements, mask=pa.array([False, True, False])
    )
    return pa.RecordBatch.from_arrays([devices, points], names=["device", "points"])


def _targets() -> dict[str, pa.Schema]:
    iceberg = schema_to_pyarrow(build_schema(FIELDS))
    hudi = HudiTableSpec.build("/t", "db", "t", table_columns(FIELDS)).arrow_schema
    user = ["device", "points"]
    return {
        "iceberg": pa.schema([iceberg.field(n) for n in user]),
        "hudi": pa.schema([hudi.field(n) for n in user]),
    }


@pytest.mark.parametrize("fmt", ["iceberg", "hudi"])
def test_a_null_struct_with_required_fields_conforms_and_writes(fmt: str) -> None:
    target = _targets()[fmt]
    out = conform_batch(_batch(), target, PipelineError)
    assert out.schema == target
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_batches([out]), buf)  # refused before: nulls in a required column
    back = pq.read_table(io.BytesIO(buf.getvalue())).to_pylist()
    assert [r["device"] for r in back] == [
        {"id": "d0", "at": {"x": "a"}},
        None,
        {"id": "d2", "at": {"x": "c"}},
    ]
    assert [r["points"] for r in back] == [[{"x": "p"}, None], None, []]


def test_a_null_required_field_under_a_present_struct_is_still_refused() -> None:
    target = _targets()["iceberg"]
    batch = _batch()
    device = _struct(
        [pa.array([None], pa.string()), batch.column("device").field("at")[:1]],
        ["id", "at"],
        [False],
    )
    points = pa.nulls(1, batch.schema.field("points").type)
    bad = pa.RecordBatch.from_arrays([device, points], names=["device", "points"])
    with pytest.raises(PipelineError, match="column 'device'"):
        conform_batch(bad, target, PipelineError)


@pytest.mark.parametrize("fmt", ["iceberg", "hudi"])
def test_json_with_a_null_or_absent_struct_decodes_and_writes(fmt: str) -> None:
    """The same through the JSON decoder: ``device`` null, absent, present."""
    from pipeline.config import DecodeConfig
    from pipeline.decode.arrow import ArrowDecoder
    from pipeline.source.reader import records_at

    schema = [{"name": f.name, "type": f.type} for f in FIELDS]
    decoder = ArrowDecoder(DecodeConfig.model_validate({"schema": schema}), include_headers=False)
    values = [b'{"device": null}', b"{}", b'{"device": {"id": "d", "at": {"x": "y"}}}']
    out = decoder.decode(records_at(values))
    assert out.column("_error").to_pylist() == [None, None, None]
    target = _targets()[fmt]
    conformed = conform_batch(out.select(["device", "points"]), target, PipelineError)
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_batches([conformed]), buf)
    back = pq.read_table(io.BytesIO(buf.getvalue())).column("device").to_pylist()
    assert back == [None, None, {"id": "d", "at": {"x": "y"}}]
