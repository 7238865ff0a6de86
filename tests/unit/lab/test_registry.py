"""Unpacking the registry's archive without Python's extraction filters (Debian 12's Python
3.11.2 has none): a well-formed archive unpacks, one whose member leads out is refused
before anything is written."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from lab.registry import RegistryStartError, extract_checked


def _archive(path: Path, members: list[tarfile.TarInfo]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for m in members:
            data = b"x" if m.isfile() else None
            if data is not None:
                m.size = len(data)
            tar.addfile(m, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str) -> tarfile.TarInfo:
    return tarfile.TarInfo(name)


def _symlink(name: str, to: str) -> tarfile.TarInfo:
    m = tarfile.TarInfo(name)
    m.type, m.linkname = tarfile.SYMTYPE, to
    return m


def test_a_well_formed_archive_unpacks(tmp_path: Path) -> None:
    src = _archive(tmp_path / "a.tar.gz", [_file("d/app.jar"), _symlink("d/l.jar", "app.jar")])
    dest = tmp_path / "out"
    dest.mkdir()
    with tarfile.open(src) as tar:
        extract_checked(tar, dest)
    assert (dest / "d" / "app.jar").read_bytes() == b"x"
    assert (dest / "d" / "l.jar").resolve() == (dest / "d" / "app.jar").resolve()


@pytest.mark.parametrize(
    "member",
    [_file("../evil"), _file("/abs/evil"), _symlink("d/l", "../../etc/passwd")],
    ids=["parent", "absolute", "symlink-out"],
)
def test_a_member_leading_out_is_refused_before_anything_is_written(
    tmp_path: Path, member: tarfile.TarInfo
) -> None:
    src = _archive(tmp_path / "a.tar.gz", [_file("d/app.jar"), member])
    dest = tmp_path / "out"
    dest.mkdir()
    with tarfile.open(src) as tar, pytest.raises(RegistryStartError, match="leads out"):
        extract_checked(tar, dest)
    assert not any(dest.iterdir())
