"""What a worker needs to stage data files for one Iceberg table: :class:`WriteContext`,
built on the driver, small and picklable (it travels to Spark's Python workers).

It carries the table metadata without snapshot history (schema, partition spec,
properties, location), the FileIO properties without the catalog's connection settings
(``uri`` may carry a database password), the batch's write uuid and the target file size.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import TableProperties
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil
from pyiceberg.utils.properties import property_as_int

from pipeline.formats.iceberg.pyiceberg_internals import staged_table_io, without_history

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

__all__ = ["WriteContext"]

# Catalog-only properties: not needed to read/write files, and ``uri`` may carry a
# database password. Everything else (warehouse, s3.*, gcs.*, adls.*, py-io-impl, ...) is
# kept so executors build the same FileIO as the driver.
_CATALOG_ONLY_KEYS = frozenset({"uri", "type", "credential", "token", "py-catalog-impl"})


def _io_properties(properties: dict[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in properties.items()
        if k not in _CATALOG_ONLY_KEYS and not k.startswith("rest.")
    }


def _slim_metadata_json(metadata: TableMetadata) -> str:
    """Metadata without snapshot history: workers only need schema, spec, properties."""
    slim = without_history(metadata, snapshots=[], refs={}, current_snapshot_id=None)
    return slim.model_dump_json()


def _target_file_size(properties: dict[str, str]) -> int:
    size = property_as_int(
        properties,
        TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
        TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT,
    )
    return max(
        1, size if size is not None else TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT
    )


@dataclass(frozen=True)
class WriteContext:
    """Everything a worker needs to stage data files for one table; small and picklable.

    ``table_metadata_json`` is the table metadata without snapshot history (schema,
    partition spec, properties, location); ``io_properties`` configure the FileIO (catalog
    connection settings are left out); ``write_uuid`` names the write (one per batch).
    """

    table_metadata_json: str
    io_properties: dict[str, str]
    table_location: str
    write_uuid: str
    target_file_size_bytes: int

    @classmethod
    def for_table(cls, table: Table, write_uuid: str) -> WriteContext:
        """Context for an existing table, from its current metadata."""
        metadata = table.metadata
        return cls(
            table_metadata_json=_slim_metadata_json(metadata),
            io_properties=_io_properties(dict(table.io.properties)),
            table_location=metadata.location,
            write_uuid=write_uuid,
            target_file_size_bytes=_target_file_size(metadata.properties),
        )

    @classmethod
    def for_new_table(
        cls,
        catalog: Catalog,
        identifier: str | tuple[str, ...],
        schema: Schema,
        partition_spec: PartitionSpec,
        properties: dict[str, str],
        location: str | None = None,
        write_uuid: str | None = None,
    ) -> WriteContext:
        """Context for a table that does not exist yet (its first commit creates it).

        The metadata is what ``catalog.create_table_transaction`` stages -- same field ids,
        spec and location -- without committing anything (for REST catalogs this is a
        staged create on the server). The namespace is created if missing. The driver
        must pass ``location=ctx.table_location`` to its own ``create_table_transaction``
        so the staged files lie under the table it creates.
        """
        from pyiceberg.catalog import Catalog as _Catalog

        namespace = _Catalog.namespace_from(identifier)
        if namespace:
            catalog.create_namespace_if_not_exists(namespace)
        txn = catalog.create_table_transaction(
            identifier,
            schema,
            location=location,
            partition_spec=partition_spec,
            properties=dict(properties),  # new_table_metadata pops format-version in place
        )
        metadata = txn.table_metadata
        # The staged table's FileIO (for REST: with the server's vended configuration).
        staged_io = staged_table_io(txn)
        return cls(
            table_metadata_json=_slim_metadata_json(metadata),
            io_properties=_io_properties(dict(staged_io.properties)),
            table_location=metadata.location,
            write_uuid=write_uuid or str(uuid.uuid4()),
            target_file_size_bytes=_target_file_size(metadata.properties),
        )

    def metadata(self) -> TableMetadata:
        """The parsed table metadata (cached per worker process)."""
        return _parse_metadata(self.table_metadata_json)


@functools.lru_cache(maxsize=8)
def _parse_metadata(metadata_json: str) -> TableMetadata:
    return TableMetadataUtil.parse_raw(metadata_json)
