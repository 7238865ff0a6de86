"""A class-data-sharing archive for the driver JVM (JDK dynamic AppCDS).

A driver JVM loads, verifies and links some 10,000 classes from Spark's jars before its
first job; mapped from an archive they cost about half the time and CPU (docs/bench.md,
"Figures behind the code's choices").

    java_options(jvm_home)  the option to add to spark.driver.extraJavaOptions:
                            -XX:SharedArchiveFile=<archive> when there is one, else (one
                            process at a time) -XX:ArchiveClassesAtExit=<a dump of its own>
    remember_class_path()   after the JVM is up: its java and class path, beside the dump
    promote()               (inside java_options) a finished dump becomes the archive once
                            ``java -Xshare:on`` maps it with that class path

Invariants:

* The archive a JVM maps is whole: a dump is written under a name of its own and becomes
  the archive (``<key>.<size>.jsa``) only after a JVM started with ``-Xshare:on`` mapped
  it; an archive whose size is no longer its name's is deleted, never mapped (a truncated
  archive crashes the JVM that maps it: checked); a dump that fails is deleted.
* Never fails or blocks a start: any problem (no writable directory, another Java or
  class path: the JVM then ignores the archive; a Spark configuration directory with files,
  which the JVM cannot archive) only forgoes the saving.
* One key per Java, Spark and class path directory, so an upgrade starts a new archive.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import subprocess
import time
from pathlib import Path

log = logging.getLogger(__name__)

#: a dump without a sidecar naming its JVM: older than this and its process gone = done
_SETTLED_S = 60.0
_DUMPING = ".dumping"
# the JVM's own CDS messages (classes it leaves out of a dump, an archive it cannot use)
# would land in the user's output at every exit
_QUIET = "-Xlog:cds=off"


def _key() -> str:
    import pyspark

    java_home = os.environ.get("JAVA_HOME", "")
    parts = [pyspark.__version__, os.path.dirname(pyspark.__file__), java_home]
    java = os.path.join(java_home, "bin", "java") if java_home else ""
    with contextlib.suppress(OSError):
        st = os.stat(os.path.realpath(java or _which_java()))
        parts.append(f"{st.st_ino}:{st.st_mtime_ns}")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _which_java() -> str:
    import shutil

    return shutil.which("java") or "java"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _writer_gone(dump: Path) -> bool:
    """Whether no process writes ``dump`` any more: its JVM (the sidecar names it) has
    exited; without a sidecar, its Python process is gone and the file is old."""
    try:
        pid = int(dump.with_suffix(".cp").read_text().split("\n")[2])
        return not _alive(pid)
    except (OSError, ValueError, IndexError):
        pass
    try:
        python_pid = int(dump.name.split(".")[1])
        old = time.time() - dump.stat().st_mtime > _SETTLED_S
    except (OSError, ValueError):
        return True
    return old and not _alive(python_pid)


def _archive(directory: Path, key: str) -> Path | None:
    """The archive of ``key``, when its size is still the one it was promoted with (the
    name says it): a truncated archive would crash every JVM that maps it."""
    found = None
    for path in directory.glob(f"{key}.*.jsa"):
        try:
            whole = path.stat().st_size == int(path.name.split(".")[1])
        except (OSError, ValueError):
            whole = False
        if whole and found is None:
            found = path
        else:
            path.unlink(missing_ok=True)
    return found


def _maps(dump: Path) -> bool:
    """Whether a JVM with ``-Xshare:on`` (fail rather than run without) maps ``dump``
    with the class path its writer had."""
    with contextlib.suppress(OSError, ValueError, subprocess.TimeoutExpired):
        java, class_path = dump.with_suffix(".cp").read_text().split("\n")[:2]
        check = [java, f"-XX:SharedArchiveFile={dump}", "-Xshare:on", "-cp", class_path]
        return subprocess.run([*check, "-version"], capture_output=True, timeout=60).returncode == 0
    return False


def promote(directory: Path, key: str) -> Path | None:
    """The archive of ``key``, promoting a finished dump to it when there is none yet;
    once there is one, the other dumps of ``key`` go."""
    archive = _archive(directory, key)
    for dump in sorted(directory.glob(f"{key}.*.dump")):
        if archive is not None:
            break
        if not _writer_gone(dump):
            continue  # still being written
        if _maps(dump):
            with contextlib.suppress(OSError):
                target = directory / f"{key}.{dump.stat().st_size}.jsa"
                os.replace(dump, target)
                archive = target
                log.info("driver JVM class archive %s", archive)
        dump.unlink(missing_ok=True)
        dump.with_suffix(".cp").unlink(missing_ok=True)
    if archive is None:
        return None
    for stale in [*directory.glob(f"{key}.*.dump"), *directory.glob(f"{key}.*.cp")]:
        stale.unlink(missing_ok=True)  # a writer still at it writes on, unlinked
    (directory / f"{key}{_DUMPING}").unlink(missing_ok=True)
    return archive


def _claim(directory: Path, key: str) -> bool:
    """Whether this process may write the dump (one process at a time)."""
    lock = directory / f"{key}{_DUMPING}"
    with contextlib.suppress(OSError, ValueError):
        holder = int(lock.read_text() or "0")
        if _alive(holder) or not _writer_gone(directory / f"{key}.{holder}.dump"):
            return False  # running, or its JVM is still writing the dump
        # its JVM was killed, or its dump failed (promote deleted it): taken over
        (directory / f"{key}.{holder}.cp").unlink(missing_ok=True)
        lock.unlink()
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except OSError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(str(os.getpid()))
    return True


def _conf_dir_empty() -> bool:
    """Whether Spark's configuration directory, the first entry of the driver's class
    path, is empty or missing: the JVM archives no class path with a non-empty directory
    in it (its dump fails: "Cannot have non-empty directory in paths")."""
    import pyspark

    home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    conf = os.environ.get("SPARK_CONF_DIR") or os.path.join(home, "conf")
    try:
        return not os.listdir(conf)
    except OSError:
        return True


def java_options(directory: Path) -> tuple[str, Path | None]:
    """(the JVM option, the dump this process's JVM writes at exit, or None); ("", None)
    when there is no archive and this process does not write one."""
    try:
        if not _conf_dir_empty():
            return "", None
        directory.mkdir(parents=True, exist_ok=True)
        key = _key()
        archive = promote(directory, key)
        if archive is not None:
            return f"-XX:SharedArchiveFile={archive} {_QUIET}", None
        if not _claim(directory, key):
            return "", None
    except (OSError, ImportError):
        return "", None  # not writable: no archive, as before
    dump = directory / f"{key}.{os.getpid()}.dump"
    return f"-XX:ArchiveClassesAtExit={dump} {_QUIET}", dump


def remember_class_path(dump: Path) -> None:
    """Beside ``dump``: the running driver JVM's java, class path and pid (what promote
    checks the dump with, and waits for). Best effort."""
    import psutil

    with contextlib.suppress(psutil.Error, OSError, ValueError):
        for child in psutil.Process().children(recursive=True):
            cmd = child.cmdline()
            if cmd and os.path.basename(cmd[0]) == "java" and "-cp" in cmd:
                class_path = cmd[cmd.index("-cp") + 1]
                dump.with_suffix(".cp").write_text(f"{cmd[0]}\n{class_path}\n{child.pid}\n")
                return


def directory() -> Path:
    from pipeline.jvm import jvm_home

    return jvm_home() / "class-archive"


def prepare(timeout_s: float = 300.0) -> Path | None:
    """Make the archive now (a Spark session started and stopped in a child process, its
    dump promoted once its JVM has written it): set-up steps and images run this."""
    import sys

    where, key = directory(), _key()
    with contextlib.suppress(OSError):
        archive = promote(where, key)
        if archive is not None:
            return archive
    start = (
        "from pipeline.spark.session import build_spark\n"
        "s = build_spark('class-archive', 'local[1]')\n"
        "s.range(100).selectExpr('sum(id)').collect()\n"
        "s.stop()\n"
    )
    subprocess.run([sys.executable, "-c", start], check=True, timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        archive = promote(where, key)
        if archive is not None:
            return archive
        writing = [c for c in where.glob(f"{key}.*.cp") if not _writer_gone(c.with_suffix(".dump"))]
        if not writing and not list(where.glob(f"{key}.*.dump")):
            return None  # no JVM of ours dumps (another process holds the claim)
        time.sleep(0.5)
    return None


def main() -> int:
    """``python -m pipeline.spark.class_archive``: make the driver JVM's class archive."""
    archive = prepare()
    print(f"class archive: {archive}" if archive else "class archive: none made")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
