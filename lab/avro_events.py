"""The generator's events as Avro in the Confluent wire format (``ingest produce --format
avro``, ``ingest demo --format avro``, the registry tests and the decode bench).

:func:`event_avro_schema` is :func:`~lab.events.event_schema_fields` as an Avro
record (optional fields a union with null, default null; ``ts`` a ``timestamp-micros``);
:class:`AvroEventEncoder` registers it under the topic's subject (``<topic>-value``) and
turns a generated JSON event into magic byte + schema id + Avro binary. Malformed records of
the generator stay as they are: not in the wire format, they are dead letters downstream.
"""

from __future__ import annotations

import io
import json
from datetime import datetime
from typing import Any

import fastavro

from lab.events import event_schema_fields

__all__ = ["AvroEventEncoder", "event_avro_schema"]

_AVRO = {
    "string": "string",
    "double": "double",
    "long": "long",
    "int": "int",
    "boolean": "boolean",
    "timestamptz": {"type": "long", "logicalType": "timestamp-micros"},
}


def event_avro_schema(payload: bool = False) -> dict[str, Any]:
    fields: list[dict[str, Any]] = []
    for f in event_schema_fields(payload):
        avro = _AVRO[f["type"]]
        if f["required"]:
            fields.append({"name": f["name"], "type": avro})
        else:
            fields.append({"name": f["name"], "type": ["null", avro], "default": None})
    return {"type": "record", "name": "ClickEvent", "namespace": "ingest.demo", "fields": fields}


class AvroEventEncoder:
    """Registers the events' schema for ``topic`` at ``registry_url``; encodes events."""

    def __init__(
        self,
        registry_url: str,
        topic: str,
        payload: bool = False,
        schema: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        """``schema``: another version of the events' schema (default
        :func:`event_avro_schema`); ``extra``: values of its added fields, in every event."""
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

        schema = schema or event_avro_schema(payload)
        self._extra = dict(extra or {})
        client = SchemaRegistryClient({"url": registry_url})
        self.schema_id = int(
            client.register_schema(f"{topic}-value", Schema(json.dumps(schema), "AVRO"))
        )
        self._parsed = fastavro.parse_schema(schema)
        self._prefix = b"\x00" + self.schema_id.to_bytes(4, "big")

    def encode_event(self, event: dict[str, Any]) -> bytes:
        record = {**event, **self._extra}
        record["ts"] = datetime.fromisoformat(str(record["ts"]).replace("Z", "+00:00"))
        buf = io.BytesIO()
        buf.write(self._prefix)
        fastavro.schemaless_writer(buf, self._parsed, record)
        return buf.getvalue()

    def encode_value(self, value: bytes, malformed: bool) -> bytes:
        """A generated value (JSON bytes) as Avro; a malformed one unchanged."""
        return value if malformed else self.encode_event(json.loads(value))
