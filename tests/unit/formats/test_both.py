"""``both``: the route of a worker's tagged descriptors to the Iceberg and the Hudi main
table, for what the workers return now and for what an older release journaled."""

from __future__ import annotations

import json

from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

from pipeline.commit.types import MAIN
from pipeline.formats.both import HUDI_MAIN, route_both
from pipeline.formats.hudi.writer import describe
from pipeline.formats.iceberg.data_file_codec import deserialize_data_file, serialize_data_file


def _iceberg_descriptor() -> bytes:
    data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path="s3://warehouse/db/events/data/a.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=3,
        file_size_in_bytes=1200,
    )
    return serialize_data_file(data_file)


def _hudi_descriptor() -> bytes:
    path = "country=NL/f-0_0-1-1_20260101000000000.parquet"
    doc = {"format": "ingest-hudi-file:1", "path": path, "size": 900, "records": 3}
    return json.dumps(doc).encode()


def test_tagged_descriptors_go_to_their_table_untagged() -> None:
    ice, hud = _iceberg_descriptor(), _hudi_descriptor()
    table, own = route_both(b"I" + ice)
    assert (table, own) == (MAIN, ice)
    assert deserialize_data_file(own).file_path.endswith("/a.parquet")
    assert route_both(b"H" + hud) == (HUDI_MAIN, hud)


def test_a_routed_descriptor_is_never_taken_for_a_tagged_one() -> None:
    """An INFLIGHT journaled since the route lists Iceberg files under ``main`` untagged;
    re-routing them on recovery must leave them as they are (the tags are neither the
    Iceberg codec's first byte nor a JSON document's)."""
    ice, hud = _iceberg_descriptor(), _hudi_descriptor()
    assert route_both(ice) == (MAIN, ice)
    assert ice[:1] not in (b"I", b"H") and hud[:1] not in (b"I", b"H")


def test_the_hudi_descriptor_shape_used_here_is_the_writers() -> None:
    doc = describe(_hudi_descriptor())
    assert doc["path"].endswith(".parquet") and doc["records"] == 3
