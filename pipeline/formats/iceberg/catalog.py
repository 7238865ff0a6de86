"""Loading the pyiceberg catalog, with one-line errors and credentials masked in URIs."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import urlparse

from pyiceberg.catalog import Catalog
from pyiceberg.catalog import load_catalog as _pyiceberg_load_catalog
from pyiceberg.exceptions import NoSuchPropertyException, NotInstalledError

from pipeline.errors import CommitError, ConfigError, one_line
from pipeline.formats.iceberg.rest_catalog import PIPELINE_REST_CATALOG

__all__ = ["load_catalog", "mask_uri"]

_USERINFO = re.compile(r"(://[^:/@]*):[^@/]*@")


def mask_uri(uri: str) -> str:
    return _USERINFO.sub(r"\1:***@", uri)


def _ensure_sqlite_dir(uri: str) -> None:
    """The embedded SQLite catalog lives under the warehouse: create its directory."""
    if not uri.startswith("sqlite:///"):
        return
    path = urlparse(uri).path
    if path and path != "/:memory:":
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)


def load_catalog(name: str, properties: Mapping[str, str]) -> Catalog:
    """A pyiceberg catalog; failures become one-line ConfigError / CommitError.

    Examples: ``{"type": "sql", "uri": "sqlite:////abs/catalog.db", "warehouse":
    "file:///abs/warehouse"}``, ``{"type": "sql", "uri": "postgresql+psycopg2://u:p@h/db",
    ...}``, ``{"type": "rest", "uri": "http://host:8181"}``.
    """
    props = {str(k): str(v) for k, v in properties.items()}
    if props.get("type") == "rest" and "py-catalog-impl" not in props:
        # pyiceberg's REST catalog with a deadline on every request (rest_catalog.py)
        props["py-catalog-impl"] = PIPELINE_REST_CATALOG
        del props["type"]
    uri = mask_uri(props.get("uri", ""))
    where = f"catalog {name!r} ({properties.get('type', '?')} at {uri or 'no uri'})"
    if "uri" in props:
        try:
            _ensure_sqlite_dir(props["uri"])
        except OSError as e:
            raise ConfigError(f"{where}: cannot create the SQLite directory: {one_line(e)}") from e
    for attempt in range(1, _INIT_ATTEMPTS + 1):
        try:
            return _pyiceberg_load_catalog(name, **props)
        except (ValueError, NoSuchPropertyException, NotInstalledError, ImportError) as e:
            raise ConfigError(f"{where}: {one_line(e)}") from e
        except Exception as e:
            # A SQL catalog creates its own tables on first use; a replica or reader
            # starting at the same moment may win that race: load again, they exist now.
            if attempt < _INIT_ATTEMPTS and _lost_init_race(e):
                continue
            raise CommitError(f"cannot reach {where}: {one_line(e)}") from e
    raise AssertionError("unreachable")


_INIT_ATTEMPTS = 3


def _lost_init_race(e: BaseException) -> bool:
    text = str(e).lower()
    return "already exists" in text or "duplicate key" in text
