"""Which Hudi tables the native writer may write: :func:`check_writable`.

Table version 6, timeline layout 1, copy-on-write, Parquet base files, no metadata table
(Java readers would list files from it and miss ours), and the configured record key and
partition fields (a table's keys and partitioning cannot change). A table written by
Hudi's own writer (version 8 and later) is refused with the way out: keep
``sink.hudi.writer: spark`` for it.
"""

from __future__ import annotations

from pipeline.errors import CommitError, ConfigError
from pipeline.formats.hudi.layout import PROPERTIES, TABLE_VERSION, TIMELINE_LAYOUT_VERSION
from pipeline.formats.hudi.schema import HudiTableSpec

__all__ = ["check_writable"]


def check_writable(props: dict[str, str] | None, spec: HudiTableSpec, where: str) -> None:
    """Refuse (CommitError / ConfigError) a table with ``hoodie.properties`` ``props``
    (None: missing) that this writer must not write; ``where`` names it."""
    if props is None:
        raise CommitError(f"{where}: .hoodie exists but has no {PROPERTIES}")
    version = props.get("hoodie.table.version", "")
    if version.isdigit() and int(version) >= 8:
        raise ConfigError(
            f"{where} was written by Hudi's own writer (table version {version}); the "
            "native writer writes version 6 tables only: keep sink.hudi.writer: spark "
            "for it, or write a new table"
        )
    problems = []
    if props.get("hoodie.table.version") != TABLE_VERSION:
        problems.append(f"table version {props.get('hoodie.table.version')} (need 6)")
    layout = props.get("hoodie.timeline.layout.version", TIMELINE_LAYOUT_VERSION)
    if layout != TIMELINE_LAYOUT_VERSION:
        problems.append(f"timeline layout {layout} (need 1)")
    if props.get("hoodie.table.type", "COPY_ON_WRITE") != "COPY_ON_WRITE":
        problems.append(f"table type {props.get('hoodie.table.type')} (need COPY_ON_WRITE)")
    if props.get("hoodie.table.base.file.format", "PARQUET").upper() != "PARQUET":
        problems.append("base file format is not PARQUET")
    if props.get("hoodie.table.metadata.partitions", "").strip():
        # Java readers would list files from the metadata table and miss ours; a Hudi
        # table service run with the metadata table off drops it (docs/hudi.md)
        problems.append(
            "the metadata table is enabled (hoodie.table.metadata.partitions): run one "
            "Hudi table service on it with hoodie.metadata.enable=false to drop it"
        )
    if problems:
        raise CommitError(f"{where} cannot be written natively: {'; '.join(problems)}")
    for key, mine in (
        ("hoodie.table.recordkey.fields", spec.record_key_fields),
        ("hoodie.table.partition.fields", spec.partition_fields),
    ):
        theirs = tuple(x for x in props.get(key, "").split(",") if x)
        if theirs != mine:
            raise ConfigError(
                f"{where} has {key}={','.join(theirs)} but the configuration says "
                f"{','.join(mine)}; a table's keys and partitioning cannot change"
            )
