"""The ``decode`` section: what decoding a record costs, against the raw consumer's decode.

In this process, no Kafka and no Spark: the same records decoded two ways, CPU seconds per
million records (``time.process_time``, best of three rounds; one core):

* **pipeline**: :class:`pipeline.decode.arrow.ArrowDecoder` (``decode.engine: arrow``):
  the vectorised JSON parse, the nested conversions, required checks, unknown fields,
  dead-letter reasons; what a task does to every record.
* **raw**: what the raw ceiling's consumer does (:mod:`lab.bench.raw`):
  ``pyarrow.json.read_json`` with the same explicit schema, nothing else.

Data sets: the generator's flat events at ~270 B and ~1.2 KB, and a nested ~1.2 KB event
(a ``device`` struct with a nested struct and a list, an ``items`` list of structs, three
levels). A fourth set adds a ``tags`` map to the nested event: pyarrow's JSON reader has no
map type, so the Arrow engine decodes such records in Python; its baseline is
``json.loads`` alone (the least any Python decode costs), not pyarrow.
"""

from __future__ import annotations

import io
import json
import random
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.json as pj

NESTED_FIELDS: list[dict[str, Any]] = [
    {"name": "event_id", "type": "string", "required": True},
    {"name": "ts", "type": "timestamptz", "required": True},
    {
        "name": "device",
        "type": {
            "type": "struct",
            "fields": [
                {"name": "id", "type": "string", "required": True},
                {"name": "model", "type": "string"},
                {
                    "name": "os",
                    "type": {
                        "type": "struct",
                        "fields": [
                            {"name": "name", "type": "string"},
                            {"name": "patches", "type": {"type": "list", "element": "int"}},
                        ],
                    },
                },
            ],
        },
    },
    {
        "name": "items",
        "type": {
            "type": "list",
            "element": {
                "type": "struct",
                "fields": [
                    {"name": "sku", "type": "string", "required": True},
                    {"name": "title", "type": "string"},
                    {"name": "price", "type": "double"},
                    {"name": "qty", "type": "int"},
                ],
            },
        },
    },
]
MAP_FIELD = {"name": "tags", "type": {"type": "map", "value": "string"}}


def nested_events(count: int, with_map: bool, seed: int = 7) -> list[bytes]:
    """``count`` nested events of ~1.2 KB (deterministic)."""
    rng = random.Random(seed)
    words = ["".join(rng.choices("abcdefghijklmnop", k=rng.randint(3, 9))) for _ in range(300)]
    out = []
    for i in range(count):
        event: dict[str, Any] = {
            "event_id": f"e-{i:09d}",
            "ts": f"2024-06-01T{i % 24:02d}:{i % 60:02d}:{(i * 7) % 60:02d}Z",
            "device": {
                "id": f"d-{rng.randrange(10_000):05d}",
                "model": rng.choice(words),
                "os": {
                    "name": rng.choice(words),
                    "patches": [rng.randrange(100) for _ in range(4)],
                },
            },
            "items": [
                {
                    "sku": f"sku-{rng.randrange(1_000_000):07d}",
                    "title": " ".join(rng.choices(words, k=8)),
                    "price": round(rng.uniform(1, 500), 2),
                    "qty": rng.randint(1, 5),
                }
                for _ in range(9)
            ],
        }
        if with_map:
            event["tags"] = {rng.choice(words): rng.choice(words) for _ in range(4)}
        out.append(json.dumps(event, separators=(",", ":")).encode())
    return out


def _best_cpu(run: Callable[[], Any], rounds: int = 3) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        run()
        best = min(best, time.process_time() - t0)
    return best


def _measure(name: str, fields: list[dict[str, Any]], values: list[bytes]) -> dict[str, Any]:
    from pipeline.config import DecodeConfig
    from pipeline.decode.arrow import ArrowDecoder, arrow_type
    from pipeline.source.reader import records_at

    cfg = DecodeConfig.model_validate({"schema": fields})
    decoder = ArrowDecoder(cfg, include_headers=False)
    batch = records_at(values)
    out = decoder.decode(batch)
    bad = out.num_rows - out.column("_error").null_count
    assert bad == 0, f"{name}: {bad} records did not decode"
    ours = _best_cpu(lambda: decoder.decode(batch))
    if decoder.fast:
        schema = pa.schema([(c.name, arrow_type(c.type)) for c in decoder.columns])
        text = b"\n".join(values)
        opts = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
        read = pj.ReadOptions(block_size=1 << 24)
        raw = _best_cpu(
            lambda: pj.read_json(io.BytesIO(text), read_options=read, parse_options=opts)
        )
        baseline = "pyarrow.json.read_json, the same explicit schema (the raw consumer's decode)"
    else:
        raw = _best_cpu(lambda: [json.loads(v) for v in values])
        baseline = "json.loads per record (no pyarrow: it has no map type)"
    n = len(values)
    return {
        "data_set": name,
        "records": n,
        "mean_bytes": round(sum(map(len, values)) / n),
        "pipeline_cpu_s_per_million": round(ours / n * 1e6, 2),
        "raw_cpu_s_per_million": round(raw / n * 1e6, 2),
        "ratio": round(ours / raw, 2) if raw else None,
        "baseline": baseline,
        "vectorised": decoder.fast,
    }


def decode_cost(records: int, say: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """The section's report: one entry per data set (see the module docstring)."""
    from lab.events import GeneratorSpec, event_schema_fields, generate_events

    sets: list[tuple[str, list[dict[str, Any]], list[bytes]]] = []
    for label, payload in (("flat ~270 B", 0), ("flat ~1.2 KB", 940)):
        spec = GeneratorSpec(count=records, seed=11, payload_bytes=payload)
        values = [v for _, v in generate_events(spec)]
        sets.append((label, event_schema_fields(payload=payload > 0), values))
    sets.append(("nested ~1.2 KB", NESTED_FIELDS, nested_events(records, False)))
    sets.append(("nested + map", [*NESTED_FIELDS, MAP_FIELD], nested_events(records, True)))
    out = []
    for label, fields, values in sets:
        say(f"decode cost: {label} ({len(values):,} records)")
        out.append(_measure(label, fields, values))
    return {"records_per_set": records, "sets": out}
