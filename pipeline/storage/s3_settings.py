"""Connection settings of S3-compatible stores, and ``s3://`` URIs.

:class:`S3Settings` reads pyiceberg-style properties (as in the catalog configuration):
``s3.endpoint``, ``s3.access-key-id``, ``s3.secret-access-key``, ``s3.session-token``,
``s3.region``, ``s3.profile-name`` (each also as ``client.*``), ``s3.path-style-access``,
``s3.force-virtual-addressing``, ``s3.connect-timeout``, ``s3.request-timeout`` (seconds).
Bad values raise ``ConfigError`` naming the property. Used by the S3 journal store
(:mod:`pipeline.storage.s3`), the pyarrow filesystems (:mod:`pipeline.storage.fs`) and, as
Hadoop's S3A settings, Hudi's Spark writer (:meth:`S3Settings.hadoop_conf`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlparse

from pipeline.errors import ConfigError

S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})


def _first(props: Mapping[str, str], *keys: str) -> str | None:
    for key in keys:
        value = props.get(key)
        if value is not None and value != "":
            return value
    return None


def _as_bool(value: str | None) -> bool | None:
    if value is None:
        return None
    text = value.strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"expected true or false, got {value!r}")


def _as_seconds(key: str, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        raise ConfigError(f"{key} must be a number of seconds, got {value!r}") from None
    if seconds <= 0:
        raise ConfigError(f"{key} must be positive, got {value!r}")
    return seconds


@dataclass(frozen=True)
class S3Settings:
    """Connection settings for an S3-compatible store, read from pyiceberg-style properties.

    ``endpoint`` is a full URL (``http://host:port``); without a scheme it means https.
    ``virtual_addressing`` None means the client default (path-style when an endpoint is
    set, as pyarrow does).
    """

    endpoint: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None
    region: str | None = None
    profile: str | None = None
    virtual_addressing: bool | None = None
    connect_timeout: float | None = None
    request_timeout: float | None = None

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> S3Settings:
        endpoint = _first(props, "s3.endpoint")
        if endpoint is not None and "://" not in endpoint:
            endpoint = f"https://{endpoint}"
        virtual = _as_bool(_first(props, "s3.force-virtual-addressing"))
        path_style = _as_bool(_first(props, "s3.path-style-access"))
        if virtual is None and path_style is not None:
            virtual = not path_style
        access = _first(props, "s3.access-key-id", "client.access-key-id")
        secret = _first(props, "s3.secret-access-key", "client.secret-access-key")
        if (access is None) != (secret is None):
            raise ConfigError(
                "s3.access-key-id and s3.secret-access-key must be given together "
                "(or neither, for the default AWS credential chain)"
            )
        return cls(
            endpoint=endpoint.rstrip("/") if endpoint else None,
            access_key=access,
            secret_key=secret,
            session_token=_first(props, "s3.session-token", "client.session-token"),
            region=_first(props, "s3.region", "client.region"),
            profile=_first(props, "s3.profile-name", "client.profile-name"),
            virtual_addressing=virtual,
            connect_timeout=_as_seconds("s3.connect-timeout", _first(props, "s3.connect-timeout")),
            request_timeout=_as_seconds("s3.request-timeout", _first(props, "s3.request-timeout")),
        )

    def endpoint_parts(self) -> tuple[str | None, str]:
        """``(host[:port], scheme)`` of the endpoint, as pyarrow's S3FileSystem wants them."""
        if self.endpoint is None:
            return None, "https"
        parsed = urlparse(self.endpoint)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"s3.endpoint {self.endpoint!r} must look like http(s)://host:port")
        return parsed.netloc, parsed.scheme

    def hadoop_conf(self) -> dict[str, str]:
        """Hadoop's S3A client settings for this store, as Spark conf (``spark.hadoop.*``),
        with ``s3://`` mapped to S3A so a table keeps one URI in every reader."""
        if self.profile is not None:
            raise ConfigError(
                "s3.profile-name is not supported by Hadoop's S3A client here: give "
                "s3.access-key-id and s3.secret-access-key, or leave both out for the "
                "default AWS credential chain"
            )
        s3a = "org.apache.hadoop.fs.s3a"
        conf = {"fs.s3.impl": f"{s3a}.S3AFileSystem", "fs.s3a.impl": f"{s3a}.S3AFileSystem"}
        if self.endpoint is not None:
            conf["fs.s3a.endpoint"] = self.endpoint
            conf["fs.s3a.connection.ssl.enabled"] = str(
                self.endpoint.startswith("https://")
            ).lower()
        if self.endpoint is not None or self.virtual_addressing is not None:
            conf["fs.s3a.path.style.access"] = str(not self.virtual_addressing).lower()
        if self.access_key is not None and self.secret_key is not None:
            temporary = self.session_token is not None
            provider = (
                "TemporaryAWSCredentialsProvider" if temporary else "SimpleAWSCredentialsProvider"
            )
            conf["fs.s3a.aws.credentials.provider"] = f"{s3a}.{provider}"
            conf["fs.s3a.access.key"] = self.access_key
            conf["fs.s3a.secret.key"] = self.secret_key
            if self.session_token is not None:
                conf["fs.s3a.session.token"] = self.session_token
        if self.region is not None:
            conf["fs.s3a.endpoint.region"] = self.region
        if self.connect_timeout is not None:
            conf["fs.s3a.connection.establish.timeout"] = str(int(self.connect_timeout * 1000))
        if self.request_timeout is not None:
            conf["fs.s3a.connection.timeout"] = str(int(self.request_timeout * 1000))
        return {f"spark.hadoop.{k}": v for k, v in conf.items()}


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ``("bucket", "some/prefix")`` (also s3a://, s3n://)."""
    parsed = urlparse(uri)
    if parsed.scheme not in S3_SCHEMES or not parsed.netloc:
        raise ConfigError(f"{uri!r} is not an s3://bucket/path URI")
    return parsed.netloc, parsed.path.strip("/")
