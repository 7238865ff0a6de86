"""Prove the checkpoint location usable before the run has any side effect.

``pipeline.preflight`` checks local paths read-only (``os.access``), which root passes
almost everywhere: ``checkpointLocation: /proc/no/such/ck`` looked writable, so a run took
a writer epoch and created the warehouse before Spark failed to create the directory
(``Py4JJavaError ... o78.start``). The probe does what Spark's checkpoint does first --
create the directory, write a file in it -- then removes everything it created:

* a local location (a path, or ``file:``; a path only while ``fs.defaultFS`` is local) is
  probed with the same system calls Hadoop's local file system makes, without a JVM, so
  :class:`~pipeline.app.Pipeline` runs it before it opens a table;
* any other location (``s3a://``, ``hdfs://`` ...) through Hadoop's ``FileSystem`` of the
  Spark session (the one Spark's checkpoint uses), before the writer epoch is taken.

A location that fails is a :class:`CheckpointLocationError`: one line naming it (the CLI
exits 2).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from pipeline.errors import ConfigError, one_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_PROBE = ".ingest-probe-"


class CheckpointLocationError(ConfigError):
    """The checkpoint location cannot be created or written."""

    code = "checkpoint-location"


def local_path(location: str, spark_conf: Mapping[str, str] | None = None) -> str | None:
    """The local path Spark resolves ``location`` to; None when it is remote (a scheme
    other than ``file``, or a bare path while ``spark.hadoop.fs.defaultFS`` is remote)."""
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return parsed.path if parsed.netloc in ("", "localhost") else None
    if parsed.scheme and "://" in location:
        return None
    default_fs = (spark_conf or {}).get("spark.hadoop.fs.defaultFS", "file:///")
    if not default_fs.startswith("file:"):
        return None
    return os.path.abspath(os.path.expanduser(location))


def _fail(location: str, why: str) -> CheckpointLocationError:
    text = one_line(why)
    return CheckpointLocationError(f"checkpointLocation {location!r} is not usable: {text}")


def probe_checkpoint_location(location: str, *, spark: SparkSession | None = None) -> None:
    """Create the location (if absent) and a file in it, then remove what was created;
    a remote location needs ``spark`` (skipped without it)."""
    path = local_path(location, _conf(spark))
    if path is not None:
        _probe_local(location, path)
    elif spark is not None:
        _probe_hadoop(location, spark)


def needs_spark(location: str, spark_conf: Mapping[str, str] | None = None) -> bool:
    """Whether the probe of ``location`` goes through Hadoop (a remote location)."""
    return local_path(location, spark_conf) is None


def _conf(spark: SparkSession | None) -> Mapping[str, str] | None:
    if spark is None:
        return None
    try:
        return dict(spark.sparkContext.getConf().getAll())
    except Exception:
        return None


def _probe_local(location: str, path: str) -> None:
    created: list[str] = []  # directories this probe created, deepest last
    probe = path
    while not os.path.exists(probe):
        created.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    try:
        for d in reversed(created):
            os.mkdir(d)
        name = os.path.join(path, f"{_PROBE}{uuid.uuid4().hex}")
        with open(name, "wb") as f:
            f.write(b"probe")
        os.unlink(name)
    except OSError as e:
        raise _fail(location, f"{e.strerror or e} ({e.filename or path})") from None
    finally:
        for d in created:  # deepest first: each is empty once the probe file is gone
            with contextlib.suppress(OSError):
                os.rmdir(d)


def _probe_hadoop(location: str, spark: SparkSession) -> None:
    try:
        jvm = spark.sparkContext._jvm
        assert jvm is not None  # a driver's session has its gateway
        path = jvm.org.apache.hadoop.fs.Path(location)
        fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
        created = not fs.exists(path)
        if created and not fs.mkdirs(path):
            raise OSError("cannot create the directory")
        probe = jvm.org.apache.hadoop.fs.Path(path, f"{_PROBE}{uuid.uuid4().hex}")
        fs.create(probe, False).close()
        fs.delete(probe, False)
        if created:
            fs.delete(path, False)
    except Exception as e:
        java = getattr(e, "java_exception", None)
        raise _fail(location, str(java.toString()) if java is not None else str(e)) from None
