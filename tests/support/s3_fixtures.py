"""The S3-compatible test server (SeaweedFS): :mod:`lab.objectstore`, which
the drills use too."""

from lab.objectstore import S3Server, S3Unavailable, start_seaweedfs

__all__ = ["S3Server", "S3Unavailable", "start_seaweedfs"]
