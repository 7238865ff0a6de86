"""``sink``: the table format, Iceberg catalog and Hudi table settings."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from pipeline.config.base import _Model
from pipeline.config.routes import IDENTIFIER, RoutesConfig
from pipeline.errors import ConfigError

#: The catalog property that carries ``requestTimeoutSeconds`` to the REST catalog
#: (pipeline/formats/iceberg/rest_catalog.py), and its default.
REST_REQUEST_TIMEOUT = "request-timeout"
DEFAULT_REQUEST_TIMEOUT_S = 30.0


class CatalogConfig(_Model):
    name: str = "lake"
    type: Literal["sql", "rest"] = "sql"
    uri: str | None = None  # default: SQLite file under the warehouse directory
    warehouse: str = "./lake/warehouse"
    properties: dict[str, str] = Field(default_factory=dict)
    # REST: the deadline of one catalog request; a commit past it is an unknown outcome,
    # decided on a fresh read of the table before any retry
    request_timeout_seconds: float = Field(default=DEFAULT_REQUEST_TIMEOUT_S, gt=0)

    def pyiceberg_properties(self) -> dict[str, str]:
        props = dict(self.properties)
        props["type"] = self.type
        if self.type == "rest":
            props.setdefault(REST_REQUEST_TIMEOUT, f"{self.request_timeout_seconds:g}")
        warehouse = self.warehouse
        if "://" not in warehouse:
            path = Path(warehouse).expanduser().resolve()
            path.mkdir(parents=True, exist_ok=True)
            warehouse = path.as_uri()
        props["warehouse"] = warehouse
        if self.uri:
            props["uri"] = self.uri
        elif self.type == "sql":
            if not warehouse.startswith("file://"):
                raise ConfigError(
                    "sink.catalog.uri is required when the warehouse is not a local path"
                )
            props["uri"] = f"sqlite:///{warehouse[len('file://') :]}/catalog.db"
        else:
            raise ConfigError("sink.catalog.uri is required for a REST catalog")
        return props


class HudiConfig(_Model):
    """The ``hudi`` table format's settings: a native copy-on-write table (docs/hudi.md)."""

    base_path: str = Field(min_length=1)  # local path, file:///, or s3://bucket/prefix
    record_key_fields: list[str] = Field(default_factory=list)  # default: Kafka coordinates
    partition_fields: list[str] = Field(default_factory=list)  # hive-style, by column value
    dead_letter_base_path: str | None = None  # default: <basePath>_dead_letter
    # s3:// tables: pyiceberg-style s3.* keys (s3.endpoint, s3.access-key-id, ...);
    # unset keys fall back to the AWS default credential chain
    properties: dict[str, str] = Field(default_factory=dict)
    # native: our copy-on-write writer (table version 6); spark: Hudi's own writer through
    # its Spark bundle (table version 9, metadata table; PySpark 3.5 only)
    writer: Literal["native", "spark"] = "native"
    # writer spark: Hudi's write operation (insert may rewrite small file groups;
    # bulk_insert never touches existing files)
    operation: Literal["insert", "bulk_insert"] = "insert"


class SinkConfig(_Model):
    format: Literal["iceberg", "hudi", "both"] = "iceberg"  # both: one query, two tables
    hudi: HudiConfig | None = None
    catalog: CatalogConfig = Field(default_factory=CatalogConfig)
    table: str = Field(pattern=IDENTIFIER)
    # several tables from one pipeline (pipeline/config/routes.py); sink.table is then the
    # default table, and holds the instant journal
    routes: RoutesConfig | None = None
    partition_by: list[str] = Field(default_factory=list)
    dead_letter_table: str | None = None
    table_properties: dict[str, str] = Field(default_factory=dict)
    target_file_size_bytes: int = Field(default=128 * 1024 * 1024, ge=1024)
    # Commits of history kept (Iceberg: snapshots of main, older ones expired, metadata
    # only; Hudi: completed commits on the active timeline) so commit latency stays flat.
    # Dedupe sees only these; older replays hit the overlap check. Each retained Iceberg
    # snapshot makes every commit dearer (pyiceberg re-reads, deep-copies and rewrites the
    # whole metadata); 30 keeps that small (figures: docs/bench.md, "Figures behind the
    # code's choices").
    max_snapshots: int = Field(default=30, ge=10, le=100_000)

    @property
    def dead_letter_identifier(self) -> str:
        return self.dead_letter_table or f"{self.table}_dead_letter"
