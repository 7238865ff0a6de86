"""The generator's events as Protobuf in the Confluent wire format (``ingest produce --format
protobuf`` and the registry tests).

:func:`event_proto_schema` is :func:`~lab.events.event_schema_fields` as a
proto3 message (optional fields ``optional``; ``ts`` a ``google.protobuf.Timestamp``);
:class:`ProtobufEventEncoder` registers it under the topic's subject (``<topic>-value``) as
``.proto`` text and turns a generated JSON event into magic byte + schema id + message index
``[0]`` + the message. Malformed records of the generator stay as they are: not in the wire
format, they are dead letters downstream.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from google.protobuf import message_factory

from lab.events import event_schema_fields

__all__ = ["ProtobufEventEncoder", "event_proto_schema"]

_PROTO = {
    "string": "string",
    "double": "double",
    "long": "int64",
    "int": "int32",
    "boolean": "bool",
    "timestamptz": "google.protobuf.Timestamp",
}
FIRST_MESSAGE = b"\x00"  # the message index path [0], as the wire format abbreviates it


def event_proto_schema(payload: bool = False) -> str:
    lines = [
        'syntax = "proto3";',
        "package ingest.demo;",
        'import "google/protobuf/timestamp.proto";',
        "message ClickEvent {",
    ]
    for number, f in enumerate(event_schema_fields(payload), 1):
        kind = _PROTO[f["type"]]
        optional = "" if f["required"] or kind.startswith("google.") else "optional "
        lines.append(f"  {optional}{kind} {f['name']} = {number};")
    return "\n".join([*lines, "}", ""])


class ProtobufEventEncoder:
    """Registers the events' schema for ``topic`` at ``registry_url``; encodes events."""

    def __init__(self, registry_url: str, topic: str, payload: bool = False) -> None:
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

        from pipeline.decode.registry.client import RegistrySchema
        from pipeline.decode.registry.proto_files import compile_schema

        text = event_proto_schema(payload)
        client = SchemaRegistryClient({"url": registry_url})
        self.schema_id = int(client.register_schema(f"{topic}-value", Schema(text, "PROTOBUF")))
        compiled = compile_schema(None, RegistrySchema(self.schema_id, "PROTOBUF", text))  # type: ignore[arg-type]
        self._cls: Any = message_factory.GetMessageClass(compiled.message(None))
        self._prefix = b"\x00" + self.schema_id.to_bytes(4, "big") + FIRST_MESSAGE

    def encode_event(self, event: dict[str, Any]) -> bytes:
        record = {k: v for k, v in event.items() if v is not None and k != "ts"}
        message = self._cls(**record)
        message.ts.FromDatetime(datetime.fromisoformat(str(event["ts"]).replace("Z", "+00:00")))
        return self._prefix + message.SerializeToString()

    def encode_value(self, value: bytes, malformed: bool) -> bytes:
        """A generated value (JSON bytes) as Protobuf; a malformed one unchanged."""
        return value if malformed else self.encode_event(json.loads(value))
