"""The instant journal on an S3-compatible object store.

``S3JournalStore`` implements the ``JournalStore`` contract of :mod:`pipeline.commit.journal`
with one primitive: a conditional ``PutObject`` carrying ``If-None-Match: *``. The store
writes the object whole or not at all and refuses it when the key exists (``412
PreconditionFailed`` -> :class:`~pipeline.commit.journal.AlreadyExists`). Every state file
also carries its SHA-256 (``encode_entry``), so a foreign or truncated object is reported as
corrupt by the timeline and treated as not written.

Retries, and why botocore's own are off. A PUT whose response is lost (connection reset, read
timeout, 5xx) may have been applied. botocore would retry it silently and then see ``412``
for our *own* object, and we would report ``AlreadyExists`` for a file this writer created.
So botocore makes exactly one attempt per call, and tenacity retries here. Every create sends
a random token as user metadata (``x-amz-meta-ingest-token``). When an earlier attempt had
an unknown outcome and a later one gets ``412``, the object's token decides: ours means
created, anything else means ``AlreadyExists``. A ``409 ConditionalRequestConflict`` (another
conditional write to the same key is in flight, as AWS reports it) means our request was
refused, not applied. It is retried. If the conflict persists through every attempt, the key
is looked up: it exists -> ``AlreadyExists``; it does not -> :class:`JournalStoreError`.
When every attempt fails otherwise, :class:`JournalStoreError` too, and the entry may or may
not exist: the caller fails, and recovery reads the journal as it would after a crash.

Stores that ignore ``If-None-Match`` would silently overwrite, and two writers could then
both "acquire" the same epoch. So the first create on a (endpoint, bucket) pair checks the
store once: it creates a probe object twice and insists the second create is refused.

Properties (pyiceberg-style, as in the catalog configuration): ``s3.endpoint``,
``s3.access-key-id``, ``s3.secret-access-key``, ``s3.session-token``, ``s3.region``,
``s3.profile-name`` (each also as ``client.*``), ``s3.path-style-access``,
``s3.force-virtual-addressing``, ``s3.connect-timeout``, ``s3.request-timeout`` (seconds);
parsed by :mod:`pipeline.storage.s3_settings`. The client: :mod:`pipeline.storage.s3_client`;
the errors and their classification: :mod:`pipeline.storage.s3_errors`; the store for a
root URI: :mod:`pipeline.storage.journal_stores`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from pipeline.commit.journal import AlreadyExists
from pipeline.errors import ConfigError
from pipeline.storage.s3_client import make_s3_client
from pipeline.storage.s3_errors import (
    JournalStoreError,
    client_error_parts,
    describe,
    is_conflict,
    is_connection_error,
    is_precondition_failed,
    retryable,
)
from pipeline.storage.s3_settings import S3Settings, split_s3_uri

log = logging.getLogger(__name__)
_T = TypeVar("_T")

__all__ = ["S3JournalStore"]

TOKEN_KEY = "ingest-token"  # user metadata: x-amz-meta-ingest-token

_verified: set[tuple[str, str]] = set()
_verified_lock = threading.Lock()


class S3JournalStore:
    """``JournalStore`` on ``s3://<bucket>/<prefix>/`` with conditional PUTs (If-None-Match)."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        region: str | None = None,
        *,
        session_token: str | None = None,
        profile: str | None = None,
        virtual_addressing: bool | None = None,
        connect_timeout: float | None = None,
        request_timeout: float | None = None,
        max_attempts: int = 6,
        max_wait: float = 5.0,
        verify_conditional_writes: bool = True,
        client: Any = None,
    ) -> None:
        if not bucket:
            raise ConfigError("S3JournalStore needs a bucket")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint = endpoint.rstrip("/") if endpoint else None
        self.max_attempts = max(1, max_attempts)
        self.max_wait = max_wait
        self.verify_conditional_writes = verify_conditional_writes
        self._client = (
            client
            if client is not None
            else make_s3_client(
                endpoint=self.endpoint,
                access_key=access_key,
                secret_key=secret_key,
                session_token=session_token,
                region=region,
                profile=profile,
                virtual_addressing=virtual_addressing,
                connect_timeout=connect_timeout,
                request_timeout=request_timeout,
            )
        )

    @classmethod
    def from_uri(
        cls, uri: str, properties: Mapping[str, str] | None = None, **kwargs: Any
    ) -> S3JournalStore:
        """A store at ``s3://bucket/prefix`` configured by pyiceberg-style ``s3.*`` props."""
        bucket, prefix = split_s3_uri(uri)
        settings = S3Settings.from_properties(properties or {})
        return cls.from_settings(bucket, prefix, settings, **kwargs)

    @classmethod
    def from_settings(
        cls, bucket: str, prefix: str, s: S3Settings, **kwargs: Any
    ) -> S3JournalStore:
        """A store at ``bucket``/``prefix`` reached with the connection settings ``s``."""
        return cls(
            bucket,
            prefix,
            s.endpoint,
            s.access_key,
            s.secret_key,
            s.region,
            session_token=s.session_token,
            profile=s.profile,
            virtual_addressing=s.virtual_addressing,
            connect_timeout=s.connect_timeout,
            request_timeout=s.request_timeout,
            **kwargs,
        )

    # -- helpers --------------------------------------------------------------------------
    def __repr__(self) -> str:
        where = f" at {self.endpoint}" if self.endpoint else ""
        return f"S3JournalStore(s3://{self.bucket}/{self.prefix}{where})"

    def _key(self, name: str) -> str:
        name = name.strip("/")
        if not name:
            return self.prefix
        return f"{self.prefix}/{name}" if self.prefix else name

    def _where(self, key: str) -> str:
        where = f" at {self.endpoint}" if self.endpoint else ""
        return f"s3://{self.bucket}/{key}{where}"

    def _retrying(self) -> Retrying:
        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log.info(
                "object store call failed (attempt %d of %d), retrying: %s",
                state.attempt_number,
                self.max_attempts,
                describe(exc) if exc else "?",
            )

        return Retrying(
            stop=stop_after_attempt(self.max_attempts),
            wait=wait_exponential(multiplier=0.1, max=self.max_wait) + wait_random(0, 0.1),
            retry=retry_if_exception(retryable),
            before_sleep=before_sleep,
            reraise=True,
        )

    def _call(self, what: str, key: str, fn: Callable[[], _T]) -> _T:
        try:
            return self._retrying()(fn)
        except (AlreadyExists, ConfigError):
            raise
        except Exception as e:
            if client_error_parts(e) is None and not is_connection_error(e):
                raise
            gave_up = f" after {self.max_attempts} attempts" if retryable(e) else ""
            raise JournalStoreError(
                f"journal {what} of {self._where(key)} failed{gave_up}: {describe(e)}"
            ) from e

    # -- JournalStore -----------------------------------------------------------------------
    def create(self, name: str, data: bytes) -> None:
        """Create ``name`` with ``data`` unless it exists (then ``AlreadyExists``)."""
        self._verify_conditional_writes()
        key = self._key(name)
        token = uuid.uuid4().hex
        unknown_outcome = False  # an earlier attempt may have created the object

        def attempt() -> None:
            nonlocal unknown_outcome
            try:
                self._client.put_object(
                    Bucket=self.bucket,
                    Key=key,
                    Body=data,
                    IfNoneMatch="*",
                    Metadata={TOKEN_KEY: token},
                    ContentType="application/json",
                )
            except Exception as e:
                if is_precondition_failed(e):
                    if unknown_outcome and self._created_by(key, token, data):
                        log.info("journal entry %s: an earlier attempt created it", name)
                        return
                    raise AlreadyExists(f"journal entry {name} already exists") from None
                if retryable(e) and not is_conflict(e):
                    unknown_outcome = True  # a 409 is a refusal; anything else may have landed
                raise

        try:
            self._call("create", key, attempt)
        except JournalStoreError as e:
            if not isinstance(e.__cause__, Exception) or not is_conflict(e.__cause__):
                raise
            # the conflict never cleared: the key's existence is the outcome
            if self._exists(key):
                if unknown_outcome and self._created_by(key, token, data):
                    return
                raise AlreadyExists(
                    f"journal entry {name} already exists (after conditional-write conflicts)"
                ) from None
            raise

    def read(self, name: str) -> bytes | None:
        return self._read_key(self._key(name))

    def list(self, prefix: str) -> list[str]:
        """Names directly under ``prefix`` (like a directory listing; dot-names skipped)."""
        prefix = prefix.strip("/")
        key_prefix = f"{self._key(prefix)}/" if self._key(prefix) else ""

        def attempt() -> list[str]:
            out: list[str] = []
            token: str | None = None
            while True:
                kwargs: dict[str, Any] = {
                    "Bucket": self.bucket,
                    "Prefix": key_prefix,
                    "Delimiter": "/",
                }
                if token:
                    kwargs["ContinuationToken"] = token
                page = self._client.list_objects_v2(**kwargs)
                for obj in page.get("Contents", []) or []:
                    base = str(obj["Key"])[len(key_prefix) :]
                    if base and "/" not in base and not base.startswith("."):
                        out.append(f"{prefix}/{base}" if prefix else base)
                if not page.get("IsTruncated"):
                    return sorted(out)
                token = page.get("NextContinuationToken")
                if not token:
                    return sorted(out)

        return self._call("list", key_prefix, attempt)

    def delete(self, name: str) -> None:
        key = self._key(name)

        def attempt() -> None:
            try:
                self._client.delete_object(Bucket=self.bucket, Key=key)
            except Exception as e:
                parts = client_error_parts(e)
                if parts is not None and parts[0] in ("NoSuchKey", "404"):
                    return
                raise

        self._call("delete", key, attempt)

    # -- internals --------------------------------------------------------------------------
    def _head(self, key: str) -> dict[str, Any] | None:
        def attempt() -> dict[str, Any] | None:
            try:
                return dict(self._client.head_object(Bucket=self.bucket, Key=key))
            except Exception as e:
                parts = client_error_parts(e)
                if parts is not None and (parts[1] == 404 or parts[0] in ("NoSuchKey", "404")):
                    return None
                raise

        return self._call("head", key, attempt)

    def _exists(self, key: str) -> bool:
        return self._head(key) is not None

    def _created_by(self, key: str, token: str, data: bytes) -> bool:
        """Whether the object at ``key`` is the one a create with ``token`` wrote."""
        head = self._head(key)
        if head is None:
            return False
        metadata = {str(k).lower(): str(v) for k, v in (head.get("Metadata") or {}).items()}
        if TOKEN_KEY in metadata:
            return metadata[TOKEN_KEY] == token
        # a store that drops user metadata: identical content is the best evidence left
        log.warning("object store kept no metadata on %s; comparing content", self._where(key))
        return self._read_key(key) == data

    def _read_key(self, key: str) -> bytes | None:
        def attempt() -> bytes | None:
            try:
                response = self._client.get_object(Bucket=self.bucket, Key=key)
            except Exception as e:
                parts = client_error_parts(e)
                if parts is not None and parts[0] in ("NoSuchKey", "404"):
                    return None
                raise
            body = response["Body"]
            try:
                return bytes(body.read())
            finally:
                body.close()

        return self._call("read", key, attempt)

    def _verify_conditional_writes(self) -> None:
        """Once per (endpoint, bucket): a second conditional create must be refused."""
        if not self.verify_conditional_writes:
            return
        ident = (self.endpoint or "aws", self.bucket)
        with _verified_lock:
            if ident in _verified:
                return
        key = self._key(f".probe-conditional-write-{uuid.uuid4().hex}")
        store = self.endpoint or "AWS S3"

        def put() -> None:
            self._client.put_object(Bucket=self.bucket, Key=key, Body=b"probe", IfNoneMatch="*")

        def delete() -> None:
            self._client.delete_object(Bucket=self.bucket, Key=key)

        try:
            self._call("conditional-write probe", key, put)
            try:
                self._call("conditional-write probe", key, put)
            except JournalStoreError as e:
                cause = e.__cause__
                if not (isinstance(cause, Exception) and is_precondition_failed(cause)):
                    raise
            else:
                raise ConfigError(
                    f"the object store at {store} ignored If-None-Match: * (a second PutObject "
                    f"of {key} in bucket {self.bucket} succeeded); the instant journal needs "
                    "atomic conditional creates"
                )
        except JournalStoreError as e:
            parts = client_error_parts(e.__cause__) if e.__cause__ else None
            if parts is not None and parts[1] in (400, 501):
                raise ConfigError(
                    f"the object store at {store} does not support conditional creates "
                    f"(PutObject with If-None-Match: *) in bucket {self.bucket}: {e.message}"
                ) from e
            raise
        finally:
            with contextlib.suppress(JournalStoreError):
                self._call("delete", key, delete)
        with _verified_lock:
            _verified.add(ident)
