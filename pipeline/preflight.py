"""Checks that run before a pipeline has any side effect.

``ingest run`` takes a writer epoch, creates warehouse directories and starts a JVM; a
checkpoint directory it cannot write used to be found only after all of that, as a
320-line Java trace. Everything here is read-only (``os.access`` and ``stat``), so a
refused run leaves nothing behind: no epoch, no directory, no file.

Remote locations (``s3://``, ``hdfs://`` …) are checked by their first use; only local
paths can be checked without writing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from urllib.parse import urlparse

from pipeline.config import PipelineConfig
from pipeline.errors import ConfigError


def _local_path(location: str) -> str | None:
    """The local file-system path of ``location``; None for a remote URI."""
    if "://" not in location and not location.startswith("file:"):
        return os.path.abspath(os.path.expanduser(location))
    parsed = urlparse(location)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        return parsed.path
    return None


def check_writable(key: str, location: str) -> None:
    """``location`` is a writable directory, or can be created as one: its nearest
    existing ancestor is a directory we may create entries in. One-line ConfigError
    naming ``key`` otherwise."""
    path = _local_path(location)
    if path is None:
        return
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        raise ConfigError(f"{key} {location!r}: {probe} is a file, not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "is not writable" if probe == path else f"cannot be created ({probe} is read-only)"
        raise ConfigError(f"{key} {location!r} {what} by this user (uid {os.getuid()})")


def check_paths(cfg: PipelineConfig, table_paths: Iterable[tuple[str, str]]) -> None:
    """Every local directory the run writes: the checkpoint and ``table_paths``, the
    ``(config key, location)`` pairs of the table format (warehouse, Hudi base paths)."""
    check_writable("checkpointLocation", cfg.checkpoint_location)
    for key, location in table_paths:
        check_writable(key, location)
