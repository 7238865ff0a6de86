"""The S3-compatible test server (SeaweedFS): :mod:`pipeline.tools.objectstore`, which
the drills use too."""

from pipeline.tools.objectstore import S3Server, S3Unavailable, start_seaweedfs

__all__ = ["S3Server", "S3Unavailable", "start_seaweedfs"]
