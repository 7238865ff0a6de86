"""The Schema Registry as the pipeline sees it: the table's schema for a topic (its subject's
pinned or latest version) and a writer schema by id, through confluent-kafka's registry client.

* Subjects follow ``decode.registry.subjectStrategy`` (the Confluent serializers' names):
  ``topic-name`` → ``<topic>-value`` (``<topic>-key`` for the key), ``record-name`` →
  ``<record>``, ``topic-record-name`` → ``<topic>-<record>``.
* An unreachable registry (connection refused, timeouts, HTTP 5xx) is retried for
  ``retrySeconds``, then :class:`RegistryUnavailable` (one line, exit 2). An answer that says
  "no such schema" (HTTP 404) is not retried: it is the record's problem
  (:class:`UnknownSchema`), and the record goes to the dead letters.
* Schemas are cached for ``cacheSeconds`` by id (ids never change meaning) and by subject.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Literal

from pipeline.config import RegistryConfig
from pipeline.errors import RegistryUnavailable

__all__ = ["RegistrySchema", "SchemaRegistry", "UnknownSchema", "subject_name"]


Role = Literal["value", "key"]  # which part of a record a subject describes


class UnknownSchema(Exception):
    """The registry answered that there is no such schema id, subject or version."""


@dataclass(frozen=True)
class RegistrySchema:
    """One registered schema: its id, type (``AVRO``, ``PROTOBUF``, ``JSON``) and text;
    ``subject``/``version`` when it was looked up by subject."""

    schema_id: int
    schema_type: str
    text: str
    subject: str | None = None
    version: int | None = None
    # the schemas it imports (Protobuf): (the name it imports, subject, version)
    references: tuple[tuple[str, str, int], ...] = ()

    def parsed(self) -> Any:
        return json.loads(self.text)


def subject_name(reg: RegistryConfig, topic: str, role: Role = "value") -> str:
    if reg.subject_strategy == "topic-name":
        return f"{topic}-{role}"
    if reg.subject_strategy == "record-name":
        return str(reg.record_name)
    return f"{topic}-{reg.record_name}"


def client_config(reg: RegistryConfig) -> dict[str, Any]:
    """confluent-kafka's ``SchemaRegistryClient`` settings (its own retries off: ours span
    ``retrySeconds``)."""
    conf: dict[str, Any] = {"url": reg.url, "max.retries": 0, "timeout": 10}
    auth = reg.auth
    if auth is not None and auth.kind == "basic":
        assert auth.password is not None
        conf["basic.auth.user.info"] = f"{auth.username}:{auth.password.get_secret_value()}"
    elif auth is not None:
        assert auth.token is not None
        conf["bearer.auth.credentials.source"] = "STATIC_TOKEN"
        conf["bearer.auth.token"] = auth.token.get_secret_value()
        conf["bearer.auth.logical.cluster"] = auth.logical_cluster
    return conf


class SchemaRegistry:
    """Lookups with the retry window and the cache of ``decode.registry``."""

    def __init__(self, reg: RegistryConfig, latest_ttl_s: float | None = None) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient

        self.reg = reg
        conf = client_config(reg)
        conf["cache.latest.ttl.sec"] = reg.cache_seconds if latest_ttl_s is None else latest_ttl_s
        self._client = SchemaRegistryClient(conf)
        self._by_id: dict[int, RegistrySchema] = {}

    def table_schema(self, topic: str, role: Role = "value") -> RegistrySchema:
        """The subject's pinned version, or its latest (of the value's subject, or the
        key's)."""
        subject = subject_name(self.reg, topic, role)

        def lookup() -> Any:
            if self.reg.version == "latest":
                return self._client.get_latest_version(subject)
            return self._client.get_version(subject, self.reg.version)

        return self._registered(self._call(lookup, f"subject {subject!r}"), subject)

    def version_of(self, subject: str, version: int) -> RegistrySchema:
        """One version of a subject (a schema's reference)."""
        found = self._call(
            lambda: self._client.get_version(subject, version),
            f"subject {subject!r} version {version}",
        )
        return self._registered(found, subject)

    @staticmethod
    def _registered(found: Any, subject: str) -> RegistrySchema:
        s = found.schema
        return RegistrySchema(
            found.schema_id, s.schema_type, s.schema_str, subject, found.version, _refs(s)
        )

    def by_id(self, schema_id: int) -> RegistrySchema:
        """The schema with this id (the wire format's writer schema)."""
        cached = self._by_id.get(schema_id)
        if cached is None:
            s = self._call(lambda: self._client.get_schema(schema_id), f"schema id {schema_id}")
            cached = RegistrySchema(
                schema_id, s.schema_type or "AVRO", s.schema_str, references=_refs(s)
            )
            self._by_id[schema_id] = cached
        return cached

    def _call(self, fn: Any, what: str) -> Any:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        deadline = time.monotonic() + self.reg.retry_seconds
        delay = 0.2
        while True:
            try:
                return fn()
            except SchemaRegistryError as e:
                if e.http_status_code == 404:
                    raise UnknownSchema(f"{what}: not in the registry ({e.error_message})") from e
                if e.http_status_code < 500:
                    raise RegistryUnavailable(
                        f"Schema Registry {self.reg.url} refused {what}: HTTP "
                        f"{e.http_status_code} {e.error_message}"
                    ) from None
                last = f"HTTP {e.http_status_code} {e.error_message}"
            except Exception as e:  # connection refused, timeouts: the registry is away
                last = f"{type(e).__name__}: {str(e)[:200]}"
            if time.monotonic() >= deadline:
                raise RegistryUnavailable(
                    f"Schema Registry {self.reg.url} did not answer for {what} within "
                    f"decode.registry.retrySeconds={self.reg.retry_seconds:g}: {last}"
                )
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 5.0)


def _refs(schema: Any) -> tuple[tuple[str, str, int], ...]:
    return tuple((r.name, r.subject, int(r.version)) for r in schema.references or ())
