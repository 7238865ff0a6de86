"""pyarrow filesystems for the table's files, configured like the catalog's FileIO.

``pyarrow.fs.FileSystem.from_uri("s3://bucket/key")`` knows nothing about an S3-compatible
endpoint or the catalog's credentials. The driver-side file operations (staged-file sizes,
rollback deletes, orphan listing) therefore build their filesystem from the same pyiceberg
``s3.*`` properties the catalog and the workers' FileIO use.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import pyarrow.fs as pafs

from pipeline.storage.s3_settings import S3_SCHEMES, S3Settings


def filesystem_for(
    uri: str, properties: Mapping[str, str] | None = None
) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, path inside it)`` for ``uri``.

    ``s3://``/``s3a://``/``s3n://`` URIs get an ``S3FileSystem`` configured by the
    pyiceberg-style ``properties`` (the path is ``bucket/key``); anything else goes through
    ``FileSystem.from_uri``.
    """
    scheme, sep, rest = uri.partition("://")
    if sep and scheme.lower() in S3_SCHEMES:
        bucket, _, key = rest.partition("/")
        if not bucket:
            raise ValueError(f"{uri!r} names no bucket")
        return s3_filesystem(S3Settings.from_properties(properties or {})), (
            f"{bucket}/{key}".rstrip("/") if key else bucket
        )
    return pafs.FileSystem.from_uri(uri)


@functools.lru_cache(maxsize=16)
def s3_filesystem(settings: S3Settings) -> pafs.S3FileSystem:
    """An ``S3FileSystem`` for the settings (one per distinct settings, reused)."""
    endpoint, scheme = settings.endpoint_parts()
    kwargs: dict[str, object] = {"scheme": scheme}
    if endpoint is not None:
        kwargs["endpoint_override"] = endpoint
    if settings.access_key is not None:
        kwargs["access_key"] = settings.access_key
        kwargs["secret_key"] = settings.secret_key
        if settings.session_token is not None:
            kwargs["session_token"] = settings.session_token
    if settings.region is not None:
        kwargs["region"] = settings.region
    if settings.virtual_addressing is not None:
        kwargs["force_virtual_addressing"] = settings.virtual_addressing
    if settings.connect_timeout is not None:
        kwargs["connect_timeout"] = settings.connect_timeout
    if settings.request_timeout is not None:
        kwargs["request_timeout"] = settings.request_timeout
    return pafs.S3FileSystem(**kwargs)
