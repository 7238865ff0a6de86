"""The ``decode`` section's Avro part: the same records as JSON and as Avro (Confluent wire
format, the schema in a real Schema Registry this section starts), each decoded by the
pipeline's task decoder (:class:`pipeline.decode.arrow.ArrowDecoder`), CPU seconds per
million records (best of three rounds, one core) and records per CPU-second.

Data sets: the generator's flat events at ~270 B and ~1.2 KB (as JSON; Avro is smaller), and
the nested ~1.2 KB event of :mod:`lab.bench.decode_cost`. The Avro path decodes
each record with fastavro's compiled reader (one call per record) and converts the batch to
Arrow in one call; the JSON path is pyarrow's vectorised parser.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import fastavro

from lab.bench.decode_cost import NESTED_FIELDS, _best_cpu, nested_events
from pipeline.source.reader import records_at

__all__ = ["avro_cost"]

_AVRO_PRIMITIVE = {
    "string": "string",
    "long": "long",
    "int": "int",
    "double": "double",
    "boolean": "boolean",
    "timestamptz": {"type": "long", "logicalType": "timestamp-micros"},
}


def _avro_type(spec: Any, name: str) -> Any:
    if isinstance(spec, str):
        return _AVRO_PRIMITIVE[spec]
    if spec["type"] == "list":
        return {"type": "array", "items": _avro_type(spec["element"], name + "_item")}
    return {"type": "record", "name": name, "fields": _avro_fields(spec["fields"], name)}


def _avro_fields(fields: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    out = []
    for f in fields:
        t = _avro_type(f["type"], f"{prefix}_{f['name']}")
        if f.get("required"):
            out.append({"name": f["name"], "type": t})
        else:
            out.append({"name": f["name"], "type": ["null", t], "default": None})
    return out


def _schema(fields: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "record", "name": "BenchEvent", "fields": _avro_fields(fields, "BenchEvent")}


def _as_avro(json_values: list[bytes], schema: dict[str, Any], schema_id: int) -> list[bytes]:
    parsed = fastavro.parse_schema(schema)
    prefix = b"\x00" + schema_id.to_bytes(4, "big")
    out = []
    for v in json_values:
        record = json.loads(v)
        record["ts"] = datetime.fromisoformat(record["ts"].replace("Z", "+00:00"))
        buf = io.BytesIO()
        buf.write(prefix)
        fastavro.schemaless_writer(buf, parsed, record)
        out.append(buf.getvalue())
    return out


def _cpu_per_million(decoder: Any, values: list[bytes], label: str) -> float:
    batch = records_at(values)
    out = decoder.decode(batch)
    bad = out.num_rows - out.column("_error").null_count
    assert bad == 0, f"{label}: {bad} records did not decode"
    return _best_cpu(lambda: decoder.decode(batch)) / len(values) * 1e6


def avro_cost(records: int, work: Path, say: Callable[[str], None]) -> list[dict[str, Any]]:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from lab.events import GeneratorSpec, event_schema_fields, generate_events
    from lab.registry import start_registry
    from pipeline.config import DecodeConfig
    from pipeline.decode.arrow import ArrowDecoder

    sets: list[tuple[str, list[dict[str, Any]], list[bytes]]] = []
    for label, payload in (("flat ~270 B", 0), ("flat ~1.2 KB", 940)):
        spec = GeneratorSpec(count=records, seed=11, payload_bytes=payload)
        sets.append(
            (label, event_schema_fields(payload > 0), [v for _, v in generate_events(spec)])
        )
    sets.append(("nested ~1.2 KB", NESTED_FIELDS, nested_events(records, False)))
    say("decode cost (Avro): starting a Schema Registry")
    registry = start_registry(work / "registry")
    try:
        client = SchemaRegistryClient({"url": registry.url})
        out = []
        for i, (label, fields, json_values) in enumerate(sets):
            say(f"decode cost (Avro): {label} ({len(json_values):,} records)")
            schema = _schema(fields)
            sid = int(
                client.register_schema(f"bench-{i}-value", Schema(json.dumps(schema), "AVRO"))
            )
            avro_values = _as_avro(json_values, schema, sid)
            json_cfg = DecodeConfig.model_validate({"schema": fields})
            avro_cfg = json_cfg.model_copy(
                update={
                    "format": "avro",
                    "registry": DecodeConfig.model_validate(
                        {"format": "avro", "registry": {"url": registry.url, "schemaId": sid}}
                    ).registry,
                }
            )
            json_cpu = _cpu_per_million(ArrowDecoder(json_cfg, False), json_values, label)
            avro_cpu = _cpu_per_million(ArrowDecoder(avro_cfg, False), avro_values, label)
            out.append(
                {
                    "data_set": label,
                    "records": len(json_values),
                    "json_mean_bytes": round(sum(map(len, json_values)) / len(json_values)),
                    "avro_mean_bytes": round(sum(map(len, avro_values)) / len(avro_values)),
                    "json_cpu_s_per_million": round(json_cpu, 2),
                    "avro_cpu_s_per_million": round(avro_cpu, 2),
                    "json_records_per_cpu_s": round(1e6 / json_cpu),
                    "avro_records_per_cpu_s": round(1e6 / avro_cpu),
                    "avro_to_json": round(avro_cpu / json_cpu, 2),
                    "goal_met": avro_cpu <= json_cpu,
                }
            )
        return out
    finally:
        registry.close()
