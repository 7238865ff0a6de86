"""The installed PySpark's line, which decides what the readers may do and which jars run."""

from __future__ import annotations


def spark_version() -> tuple[int, int]:
    """(major, minor) of the installed PySpark."""
    from pyspark import __version__

    major, minor = __version__.split(".")[:2]
    return int(major), int(minor)
