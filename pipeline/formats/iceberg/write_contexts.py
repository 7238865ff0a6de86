"""Where the workers stage a batch's files: :class:`WriteContexts`.

A batch's :class:`~pipeline.formats.iceberg.write_context.WriteContext` comes from the
table's current metadata, or, for a table that does not exist yet, from the metadata a
staged ``create_table_transaction`` would commit: the first commit then creates the table
at that location in the same catalog operation (docs/design.md invariant 9).
"""

from __future__ import annotations

from pyiceberg.table import Table

from pipeline.formats.iceberg.schema_evolution import SchemaEvolution
from pipeline.formats.iceberg.write_context import WriteContext

__all__ = ["WriteContexts"]


class WriteContexts(SchemaEvolution):
    """The write context of each batch and the table's location (fixed once resolved)."""

    def write_context(self, write_uuid: str) -> WriteContext:
        """What the workers need to stage files for the next commit."""

        def context_of(table: Table | None) -> WriteContext | None:
            if table is None:
                return None
            self._check_schema(table)
            return WriteContext.for_table(table, write_uuid)

        if (ctx := self._confirmed(context_of)) is not None:
            return ctx
        ctx = self._new_table_context(write_uuid)
        self._location = ctx.table_location
        return ctx

    def table_location(self) -> str:
        """Where the table lives (or will live: fixed once resolved for a new table)."""
        if self._location is None:
            table = self._load_for_read()
            if table is not None:
                self._location = table.location().rstrip("/")
            else:
                self._location = self._new_table_context("location-probe").table_location
        return self._location

    def _new_table_context(self, write_uuid: str) -> WriteContext:
        # creates the namespace and stages the create: catalog round trips, so they get
        # the same patience as a load (a pooled connection can die with a restarted catalog)
        return self._with_retries(
            "create staging",
            lambda: WriteContext.for_new_table(
                self.catalog,
                self.identifier,
                self.schema,
                self.partition_spec,
                self.table_properties,
                location=self._location,
                write_uuid=write_uuid,
            ),
        )
