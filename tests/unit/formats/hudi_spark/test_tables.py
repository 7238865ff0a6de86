"""A Hudi table stays with the writer that made it: Hudi's own Spark writer (table version
9) refuses a native table (version 6), which it would upgrade in place beyond the native
writer's reach, and the native writer refuses a version-9 table -- each in one line that
names the writer to keep (docs/hudi.md, "Switching writers")."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.generator import event_schema_fields
from pipeline.columns import table_columns
from pipeline.columns.model import FieldSpec
from pipeline.errors import ConfigError
from pipeline.formats.hudi.cow_table import HudiTable
from pipeline.formats.hudi.schema import HudiTableSpec
from pipeline.formats.hudi.storage import open_location
from pipeline.formats.hudi_spark.tables import check_table_version


def _table(base: Path, version: str) -> None:
    meta = base / ".hoodie"
    meta.mkdir(parents=True)
    (meta / "hoodie.properties").write_text(
        f"hoodie.table.name=events\nhoodie.table.version={version}\n"
        "hoodie.table.type=COPY_ON_WRITE\n"
    )


def test_the_spark_writer_refuses_a_native_table(tmp_path: Path) -> None:
    _table(tmp_path / "native", "6")
    with pytest.raises(ConfigError) as info:
        check_table_version(open_location(str(tmp_path / "native"), {}))
    line = str(info.value)
    assert "\n" not in line and "table version 6" in line and "writer: native" in line, line
    _table(tmp_path / "hudi", "9")
    check_table_version(open_location(str(tmp_path / "hudi"), {}))  # its own: fine
    check_table_version(open_location(str(tmp_path / "none"), {}))  # none yet: fine


def test_the_native_writer_refuses_a_table_of_hudis_writer(tmp_path: Path) -> None:
    base = tmp_path / "events"
    _table(base, "9")
    fields = [FieldSpec(**f) for f in event_schema_fields()]
    spec = HudiTableSpec.build(str(base), "db", "events", table_columns(fields))
    with pytest.raises(ConfigError) as info:
        HudiTable(spec).check()
    line = str(info.value)
    assert "\n" not in line and "table version 9" in line and "writer: spark" in line, line
