"""Schema evolution of an Iceberg table: :class:`SchemaEvolution`.

The configured columns (with ``renamedFrom``) are compared with the table's at start;
what they change is applied in one catalog commit (:meth:`SchemaEvolution.evolve_schema`:
a crash leaves the old schema or the new one), and a running pipeline refuses to write
once the table's columns changed under it (docs/design.md invariant 14 for the refusal:
decided on a fresh load). The comparison and the update: :mod:`pipeline.formats.iceberg.schema`.
"""

from __future__ import annotations

from pyiceberg.table import Table

from pipeline.columns.evolution import Change, describe
from pipeline.errors import CommitError
from pipeline.formats.iceberg.schema import apply_changes, planned_changes
from pipeline.formats.iceberg.table_view import TableView

__all__ = ["SchemaEvolution"]


class SchemaEvolution(TableView):
    """What the configured columns change in the table, and their application."""

    def schema_changes(self) -> list[Change]:
        """What the configured columns change in the table's (none for a new table);
        SchemaChangeRefused, before any side effect, for what no restart may change."""
        return self._confirmed(
            lambda table: planned_changes(table, self.columns, self.name) if table else []
        )

    def evolve_schema(self) -> list[Change]:
        """Apply :meth:`schema_changes` in one catalog commit (atomic: a crash leaves the
        old schema or the new one); planned again on every attempt, so a restart, or a
        commit that lost a race, applies only what is still missing. The changes applied."""

        def once() -> list[Change]:
            table = self.load()
            changes = planned_changes(table, self.columns, self.name) if table else []
            if changes:
                assert table is not None
                with table.update_schema() as update:
                    apply_changes(update, changes)
                self.refresh()
            return changes

        return self._with_retries("schema update", once)

    def _check_schema(self, table: Table) -> None:
        """The table must have exactly the configured columns (evolved at start)."""
        if changes := planned_changes(table, self.columns, self.name):
            raise CommitError(
                f"table {self.name}'s columns changed under the running pipeline "
                f"({'; '.join(describe(c) for c in changes)}); restart it to evolve them"
            )
