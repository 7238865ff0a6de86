"""What an Iceberg table references, for orphan cleanup (:mod:`pipeline.formats.orphans`).

Referenced: every live data file of every snapshot the metadata still holds (a manifest's
DELETED entries are skipped: the snapshots before the delete reference those files through
their own manifests), so time travel to any retained snapshot keeps working. Files that
only expired snapshots referenced (replaced by a compaction, then expired) are orphans
like a killed task attempt's or a rolled-back batch's files.
"""

from __future__ import annotations

from pyiceberg.table import Table

from pipeline.formats.orphans import StoredFile, list_data_files

__all__ = ["StoredFile", "data_location", "list_data_files", "referenced_paths"]

_DATA_PATH_PROPERTIES = (
    "write.data.path",
    "write.object-storage.path",
    "write.folder-storage.path",
)


def data_location(table: Table) -> str:
    """Where the table's writers put data files."""
    props = table.metadata.properties
    for key in _DATA_PATH_PROPERTIES:
        if props.get(key):
            return props[key].rstrip("/")
    return f"{table.metadata.location.rstrip('/')}/data"


def referenced_paths(table: Table) -> set[str]:
    """Paths of the data (and delete) files any retained snapshot reads."""
    seen_manifests: set[str] = set()
    paths: set[str] = set()
    for snapshot in table.metadata.snapshots:
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in seen_manifests:
                continue
            seen_manifests.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                paths.add(entry.data_file.file_path)
    return paths
