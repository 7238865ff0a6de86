"""The boto3 client of the instant journal on S3: one attempt per call (the journal retries
by itself: :mod:`pipeline.storage.s3`), path-style addressing for a custom endpoint.
"""

from __future__ import annotations

from typing import Any

from pipeline.errors import ConfigError

__all__ = ["make_s3_client"]


def make_s3_client(
    *,
    endpoint: str | None,
    access_key: str | None,
    secret_key: str | None,
    session_token: str | None,
    region: str | None,
    profile: str | None,
    virtual_addressing: bool | None,
    connect_timeout: float | None,
    request_timeout: float | None,
) -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise ConfigError(
            "the instant journal on S3 needs boto3 (pip install 'boto3>=1.35.2')"
        ) from None
    if virtual_addressing is None:
        style = "path" if endpoint else "auto"
    else:
        style = "virtual" if virtual_addressing else "path"
    config = Config(
        s3={"addressing_style": style},
        # exactly one attempt per call: the journal retries (pipeline.storage.s3)
        retries={"total_max_attempts": 1, "mode": "standard"},
        connect_timeout=connect_timeout or 10.0,
        read_timeout=request_timeout or 30.0,
        max_pool_connections=32,
    )
    session = boto3.session.Session(profile_name=profile or None)
    return session.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        aws_session_token=session_token,
        region_name=region,
        config=config,
    )
