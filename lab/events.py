"""Synthetic clickstream events for tests, drills and benchmarks: their table schema,
the deterministic stream, and what makes one valid.

:func:`generate_events` yields ``(key, value)`` pairs: the key is the user id, the value a
JSON object matching :func:`event_schema_fields`. The stream is fully deterministic for a
given :class:`GeneratorSpec` (same seed → same bytes), so a test can regenerate what was
produced. A configurable, exact fraction of values is malformed (truncated JSON, a string
where ``amount`` must be a double, or bytes that are not JSON at all);
:func:`is_valid_event` tells the two apart the way the table schema would.

Writing the stream to Kafka is :mod:`lab.generator`'s job.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = [
    "DEFAULT_START_TS",
    "GeneratorSpec",
    "event_schema_fields",
    "event_types",
    "generate_events",
    "generate_flagged",
    "is_valid_event",
]

DEFAULT_START_TS = datetime(2024, 6, 1, tzinfo=UTC)

_EVENT_TYPES: tuple[tuple[str, float], ...] = (
    ("view", 0.55),
    ("click", 0.25),
    ("add_to_cart", 0.08),
    ("search", 0.06),
    ("purchase", 0.04),
    ("refund", 0.02),
)
_MONETARY = {"add_to_cart", "purchase", "refund"}
_CURRENCIES = ("USD", "EUR", "GBP", "JPY", "INR", "BRL")
_PAGES = ("/", "/home", "/search", "/product", "/cart", "/checkout", "/account", "/help")
_DEVICES = ("desktop", "mobile", "tablet", "tv")
_COUNTRIES = ("US", "DE", "GB", "FR", "IN", "BR", "JP", "CA", "AU", "ES", "IT", "NL")
_MALFORMED_KINDS = ("truncated", "wrong_type", "not_json")


def event_schema_fields(payload: bool = False) -> list[dict[str, Any]]:
    """Table schema of the generated events, Iceberg-style type names.

    ``amount`` and ``currency`` are null for events that carry no money (view, click,
    search); everything else is always present. ``payload=True`` adds the optional string
    field ``payload`` that :attr:`GeneratorSpec.payload_bytes` fills (larger records).
    """
    fields = [
        {"name": "event_id", "type": "string", "required": True},
        {"name": "user_id", "type": "string", "required": True},
        {"name": "event_type", "type": "string", "required": True},
        {"name": "amount", "type": "double", "required": False},
        {"name": "currency", "type": "string", "required": False},
        {"name": "ts", "type": "timestamptz", "required": True},
        {"name": "session_id", "type": "string", "required": True},
        {"name": "page", "type": "string", "required": True},
        {"name": "device", "type": "string", "required": True},
        {"name": "country", "type": "string", "required": True},
    ]
    if payload:
        fields.append({"name": "payload", "type": "string", "required": False})
    return fields


def event_types() -> list[str]:
    """All values ``event_type`` can take."""
    return [name for name, _ in _EVENT_TYPES]


@dataclass(frozen=True)
class GeneratorSpec:
    count: int = 10_000
    rate: float | None = None  # events/second; None = as fast as possible
    key_cardinality: int = 1_000
    malformed_fraction: float = 0.0  # exactly round(count * fraction) malformed values
    seed: int = 42
    start_ts: datetime = DEFAULT_START_TS  # event time of the first event (UTC)
    # mean length of an extra ``payload`` string (text-like, 0.5x-1.5x the mean; 0: none).
    # The other fields stay byte-identical to the stream without it.
    payload_bytes: int = 0

    def __post_init__(self) -> None:
        if self.count < 0:
            raise ValueError("count must be >= 0")
        if self.rate is not None and self.rate <= 0:
            raise ValueError("rate must be > 0 or None")
        if self.key_cardinality < 1:
            raise ValueError("key_cardinality must be >= 1")
        if not 0.0 <= self.malformed_fraction <= 1.0:
            raise ValueError("malformed_fraction must be within [0, 1]")
        if self.payload_bytes < 0:
            raise ValueError("payload_bytes must be >= 0")

    @property
    def malformed_count(self) -> int:
        return round(self.count * self.malformed_fraction)


def _format_ts(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _malform(rng: random.Random, event: dict[str, Any], valid: bytes) -> bytes:
    kind = rng.choice(_MALFORMED_KINDS)
    if kind == "truncated":
        # a strict prefix of a JSON object is never valid JSON (the closing brace is gone)
        return valid[: rng.randint(1, len(valid) - 1)]
    if kind == "wrong_type":
        bad = dict(event)
        bad["amount"] = rng.choice(("abc", "12,50", "NaN-ish", "€"))
        return json.dumps(bad, separators=(",", ":"), ensure_ascii=False).encode()
    # not JSON at all, and not valid UTF-8 either
    junk = bytes(rng.getrandbits(8) for _ in range(rng.randint(4, 24)))
    return b"\x00\xc3(" + junk


def generate_events(spec: GeneratorSpec) -> Iterator[tuple[bytes, bytes]]:
    """Yield ``spec.count`` ``(key, value)`` pairs, deterministic for ``spec``.

    Keys (user ids ``user-000000``...) are skewed: low ids are hotter, like real traffic.
    Event time starts at ``spec.start_ts`` and advances 0-100 ms per event.
    Exactly ``spec.malformed_count`` values are malformed, spread uniformly at random.
    """
    for key, value, _ in _generate(spec):
        yield key, value


def generate_flagged(spec: GeneratorSpec) -> Iterator[tuple[bytes, bytes, bool]]:
    """:func:`generate_events` with each value's malformed flag: ``(key, value, bad)``."""
    return _generate(spec)


_PAYLOAD_CORPUS_CHARS = 1 << 22  # 4 MiB: larger than a producer batch, so zstd sees text


def _payloads(spec: GeneratorSpec) -> Callable[[], str]:
    """A deterministic source of text-like payload strings (words of a fixed vocabulary,
    compressing about like real text), drawn from a corpus built once per spec with its
    own random stream: the events' other fields do not change."""
    prng = random.Random(spec.seed ^ 0x5EED)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(prng.choices(letters, k=prng.randint(2, 10))) for _ in range(1024)]
    words = prng.choices(vocab, k=_PAYLOAD_CORPUS_CHARS // 6)
    corpus = " ".join(words)[:_PAYLOAD_CORPUS_CHARS]
    lo, hi = spec.payload_bytes // 2, spec.payload_bytes * 3 // 2

    def take() -> str:
        n = prng.randint(lo, hi)
        start = prng.randrange(0, len(corpus) - n)
        return corpus[start : start + n]

    return take


def _generate(spec: GeneratorSpec) -> Iterator[tuple[bytes, bytes, bool]]:
    """(key, value, malformed) triples; see :func:`generate_events`."""
    rng = random.Random(spec.seed)
    payload = _payloads(spec) if spec.payload_bytes > 0 else None
    names = [name for name, _ in _EVENT_TYPES]
    weights = [w for _, w in _EVENT_TYPES]
    sessions: dict[int, tuple[str, str, str, int]] = {}  # user -> (session, device, country, n)
    ts = spec.start_ts if spec.start_ts.tzinfo else spec.start_ts.replace(tzinfo=UTC)
    remaining_bad = spec.malformed_count
    width = max(6, len(str(spec.key_cardinality - 1)))
    for i in range(spec.count):
        user = min(int(spec.key_cardinality * rng.random() ** 1.5), spec.key_cardinality - 1)
        user_id = f"user-{user:0{width}d}"
        state = sessions.get(user)
        if state is None or state[3] <= 0:
            country = state[2] if state else rng.choice(_COUNTRIES)
            state = (
                str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                rng.choice(_DEVICES),
                country,
                rng.randint(3, 40),
            )
        session_id, device, country, left = state
        sessions[user] = (session_id, device, country, left - 1)
        event_type = rng.choices(names, weights)[0]
        amount: float | None = None
        currency: str | None = None
        if event_type in _MONETARY:
            amount = round(rng.lognormvariate(3.0, 1.0), 2)
            if event_type == "refund":
                amount = -amount
            currency = rng.choice(_CURRENCIES)
        page = {
            "search": "/search",
            "add_to_cart": "/product",
            "purchase": "/checkout",
            "refund": "/account",
        }.get(event_type) or rng.choice(_PAGES)
        ts += timedelta(microseconds=rng.randint(0, 100_000))
        event: dict[str, Any] = {
            "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "user_id": user_id,
            "event_type": event_type,
            "amount": amount,
            "currency": currency,
            "ts": _format_ts(ts),
            "session_id": session_id,
            "page": page,
            "device": device,
            "country": country,
        }
        if payload is not None:
            event["payload"] = payload()
        value = json.dumps(event, separators=(",", ":")).encode()
        # selection sampling: exactly malformed_count picks, uniformly spread
        bad = remaining_bad > 0 and rng.random() * (spec.count - i) < remaining_bad
        if bad:
            remaining_bad -= 1
            value = _malform(rng, event, value)
        yield user_id.encode(), value, bad


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "timestamp": (str,),
    "timestamptz": (str,),
    "double": (float, int),
    "long": (int,),
    "int": (int,),
    "boolean": (bool,),
}


def is_valid_event(value: bytes | None) -> bool:
    """Whether ``value`` parses as a JSON object that fits :func:`event_schema_fields`
    (required fields present and non-null, every present field of the right JSON type,
    ``ts`` an ISO-8601 instant)."""
    if value is None:
        return False
    try:
        obj = json.loads(value.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return False
    if not isinstance(obj, dict):
        return False
    for f in event_schema_fields(payload=True):
        v = obj.get(f["name"])
        if v is None:
            if f["required"]:
                return False
            continue
        allowed = _JSON_TYPES[f["type"]]
        if isinstance(v, bool) and bool not in allowed:
            return False
        if not isinstance(v, allowed):
            return False
        if f["type"] in ("timestamp", "timestamptz") and isinstance(v, str):
            try:
                datetime.fromisoformat(v.replace("Z", "+00:00"))
            except ValueError:
                return False
    return True
