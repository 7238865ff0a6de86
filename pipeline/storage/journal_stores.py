"""The journal store for a root URI: a local directory or an S3-compatible prefix."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlparse

from pipeline.commit.journal import JournalStore
from pipeline.errors import ConfigError
from pipeline.storage.local import LocalJournalStore
from pipeline.storage.s3 import S3JournalStore
from pipeline.storage.s3_settings import S3_SCHEMES

__all__ = ["journal_store_for"]


def journal_store_for(root_uri: str, properties: Mapping[str, str] | None = None) -> JournalStore:
    """The journal store for a root URI: a local directory or an S3-compatible prefix.

    ``file:///abs/dir`` and plain paths -> :class:`LocalJournalStore`; ``s3://``, ``s3a://``,
    ``s3n://`` -> :class:`S3JournalStore` configured from the pyiceberg-style ``s3.*``
    ``properties`` (the catalog properties).
    """
    props = dict(properties or {})
    if "://" not in root_uri:
        return LocalJournalStore(root_uri)
    parsed = urlparse(root_uri)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigError(f"journal root {root_uri!r}: file URIs must be local (file:///path)")
        return LocalJournalStore(parsed.path)
    if parsed.scheme in S3_SCHEMES:
        return S3JournalStore.from_uri(root_uri, props)
    raise ConfigError(
        f"the instant journal at {root_uri} needs a local/HDFS-style path (file://) or an "
        f"S3-compatible store with conditional writes (s3://, s3a://); {parsed.scheme}:// is "
        "not supported (use commit.mode=at-least-once there)"
    )
