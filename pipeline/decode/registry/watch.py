"""The driver's check, before each batch, that the table still follows its subject's latest
version (``decode.registry.version: latest``, no pinned ``schemaId``).

Why before each batch, once its end offsets are fixed: a serializer registers (or looks up)
its schema before it produces, so every schema a record of the batch was written with is
registered by the time the batch's offsets exist. One uncached request per batch therefore
sees any new version such a record may carry, and :class:`~pipeline.errors.SchemaAdvanced`
is raised before the batch has a side effect. The run then starts again on the new version
(the table's columns evolve first, exactly once: docs/design.md invariant 13) and Spark
replays the batch with the same offsets. A record written with a schema that is not the
subject's (another subject, an older id) is read through Avro's resolution as always, its
extra fields counted as unknown (``decode.unknownFields``).
"""

from __future__ import annotations

import logging

from pipeline.config import PipelineConfig
from pipeline.decode.registry.client import SchemaRegistry
from pipeline.decode.registry.table_schema import schema_topic
from pipeline.errors import SchemaAdvanced

__all__ = ["SchemaWatch", "schema_watch"]

log = logging.getLogger(__name__)
_UNCACHED_S = 0.001  # the client's cache of the latest version: expired by the next batch


class SchemaWatch:
    def __init__(self, cfg: PipelineConfig, topic: str, table_schema_id: int) -> None:
        assert cfg.decode.registry is not None
        self._registry = SchemaRegistry(cfg.decode.registry, latest_ttl_s=_UNCACHED_S)
        self._topic = topic
        self.table_schema_id = table_schema_id

    def check(self) -> None:
        latest = self._registry.table_schema(self._topic)
        if latest.schema_id != self.table_schema_id:
            raise SchemaAdvanced(
                f"subject {latest.subject!r} has version {latest.version} (schema id "
                f"{latest.schema_id}); the table follows schema id {self.table_schema_id}: "
                "restarting on the new version"
            )


def schema_watch(given: PipelineConfig, resolved: PipelineConfig) -> SchemaWatch | None:
    """The watch for a configuration that follows its subject's latest version; None when
    it pins a version or a schema id, or is not a registry format."""
    reg = given.decode.registry
    if not given.decode.registry_format or reg is None:
        return None
    if reg.schema_id is not None or reg.version != "latest":
        return None
    pinned = resolved.decode.registry
    assert pinned is not None and pinned.schema_id is not None
    return SchemaWatch(resolved, schema_topic(resolved), pinned.schema_id)
