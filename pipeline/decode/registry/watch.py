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
extra fields counted as unknown (``decode.unknownFields``). With ``decode.key`` the key's
subject is followed the same way.
"""

from __future__ import annotations

import logging

from pipeline.config import PipelineConfig, RegistryConfig
from pipeline.decode.registry.client import Role, SchemaRegistry
from pipeline.decode.registry.keys import key_registry
from pipeline.decode.registry.table_schema import schema_topic
from pipeline.errors import SchemaAdvanced

__all__ = ["SchemaWatch", "schema_watch"]

log = logging.getLogger(__name__)
_UNCACHED_S = 0.001  # the client's cache of the latest version: expired by the next batch


class SchemaWatch:
    """The subjects a table follows (the value's; the key's too with ``decode.key``), each
    with the schema id the table was built from."""

    def __init__(self, topic: str, followed: list[tuple[RegistryConfig, Role, int]]) -> None:
        self._topic = topic
        self._followed = [
            (SchemaRegistry(reg, latest_ttl_s=_UNCACHED_S), role, schema_id)
            for reg, role, schema_id in followed
        ]

    def check(self) -> None:
        for registry, role, schema_id in self._followed:
            latest = registry.table_schema(self._topic, role)
            if latest.schema_id != schema_id:
                raise SchemaAdvanced(
                    f"subject {latest.subject!r} has version {latest.version} (schema id "
                    f"{latest.schema_id}); the table follows schema id {schema_id}: "
                    "restarting on the new version"
                )


def schema_watch(given: PipelineConfig, resolved: PipelineConfig) -> SchemaWatch | None:
    """The watch for a configuration that follows a subject's latest version (the value's
    or the key's); None when both pin a version or a schema id, or it is not a registry
    format."""
    reg = given.decode.registry
    if not given.decode.registry_format or reg is None:
        return None
    followed: list[tuple[RegistryConfig, Role, int]] = []
    pinned = resolved.decode.registry
    assert pinned is not None and pinned.schema_id is not None
    if reg.schema_id is None and reg.version == "latest":
        followed.append((pinned, "value", pinned.schema_id))
    key, resolved_key = given.decode.key, resolved.decode.key
    if key is not None and key.schema_id is None and key.version == "latest":
        assert resolved_key is not None and resolved_key.schema_id is not None
        followed.append((key_registry(resolved.decode), "key", resolved_key.schema_id))
    return SchemaWatch(schema_topic(resolved), followed) if followed else None
