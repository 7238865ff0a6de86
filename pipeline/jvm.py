"""JVM dependency sets from the project's one manifest (``pipeline/resources/pom.xml``).

Each profile of the manifest is a *set* (``kafka``: the Apache Kafka broker). A set is
fetched once with Maven (``dependency:copy-dependencies``, runtime scope, transitive) into
``<jvm home>/<set>-<manifest digest>/`` and used from there: a changed manifest fetches
again into a new directory, an unchanged one never touches the network. The directory
appears complete or not at all (fetched into a temporary sibling, then renamed).

The JVM home is ``$INGEST_JVM_DIR``, else ``.jvm/`` of the source checkout the package runs
from, else ``~/.cache/kafka-lakehouse-ingest/jvm``.

``python -m pipeline.jvm fetch [SET ...]`` fetches (``scripts/bootstrap.sh``);
``python -m pipeline.jvm classpath SET`` prints the set's class path.

Helpers of our own (:data:`HELPERS`: ``hudi-writer``, the two-phase driver of Hudi's Spark
writer) are built from their sources in ``pipeline/resources/<helper>/`` with Maven, at the
versions the manifest pins, into ``<jvm home>/<helper>-<sources digest>/<helper>.jar`` --
once, like a set (``python -m pipeline.jvm build [HELPER ...]``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from importlib import resources
from pathlib import Path

from pipeline.errors import EnvironmentProblem

__all__ = [
    "HELPERS",
    "MANIFEST",
    "build",
    "classpath",
    "fetch",
    "jvm_home",
    "manifest_sets",
    "set_dir",
]

MANIFEST = Path(str(resources.files("pipeline") / "resources" / "pom.xml"))
_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
_COMPLETE = ".complete"
#: helper -> the manifest properties its build takes (as -D<name>=<value>)
HELPERS: dict[str, dict[str, str]] = {
    "hudi-writer": {
        "hudi.version": "hudi.version",
        "spark.version": "spark35.version",
        "aws.version": "aws-sdk-v1.version",
    },
}
_FETCH_TIMEOUT_S = 1800


class JvmDependencyError(EnvironmentProblem):
    """A JVM dependency set could not be fetched (no Maven, no registry, a missing jar)."""


def jvm_home() -> Path:
    configured = os.environ.get("INGEST_JVM_DIR", "").strip()
    if configured:
        return Path(configured).expanduser()
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file() and os.access(checkout, os.W_OK):
        return checkout / ".jvm"
    return Path.home() / ".cache" / "kafka-lakehouse-ingest" / "jvm"


def manifest_sets() -> dict[str, list[str]]:
    """Set name -> its artifacts as ``group:artifact:version[:type:classifier]``."""
    return {name: [coords for coords, _ in deps] for name, deps in _profiles().items()}


def _profiles() -> dict[str, list[tuple[str, bool]]]:
    """Set name -> (coordinates, standalone) per dependency, properties resolved. A
    standalone artifact excludes all its dependencies (``*:*``): a distribution that carries
    its own jars, fetched alone, without reading its POM's parents."""
    try:
        root = ET.parse(MANIFEST).getroot()
    except (OSError, ET.ParseError) as e:
        raise JvmDependencyError(f"cannot read the JVM manifest {MANIFEST}: {e}") from None
    props = _properties(root)

    def text(el: ET.Element, name: str) -> str:
        raw = (el.findtext(f"m:{name}", default="", namespaces=_POM_NS) or "").strip()
        return re.sub(r"\$\{([^}]+)\}", lambda m: props.get(m.group(1), m.group(0)), raw)

    def coords(d: ET.Element) -> str:
        parts = [text(d, "groupId"), text(d, "artifactId"), text(d, "version")]
        if text(d, "classifier"):
            parts += [text(d, "type") or "jar", text(d, "classifier")]
        return ":".join(parts)

    def standalone(d: ET.Element) -> bool:
        return any(
            text(x, "groupId") == "*" and text(x, "artifactId") == "*"
            for x in d.findall("m:exclusions/m:exclusion", _POM_NS)
        )

    return {
        text(profile, "id"): [
            (coords(d), standalone(d))
            for d in profile.findall("m:dependencies/m:dependency", _POM_NS)
        ]
        for profile in root.findall("m:profiles/m:profile", _POM_NS)
    }


def _properties(root: ET.Element | None = None) -> dict[str, str]:
    """The manifest's ``<properties>`` (the pinned versions), by name."""
    if root is None:
        try:
            root = ET.parse(MANIFEST).getroot()
        except (OSError, ET.ParseError) as e:
            raise JvmDependencyError(f"cannot read the JVM manifest {MANIFEST}: {e}") from None
    return {
        el.tag.split("}")[1]: (el.text or "").strip()
        for el in root.findall("m:properties/*", _POM_NS)
    }


def build(helper: str) -> Path:
    """The jar of our own JVM ``helper``, built with Maven from its sources when not yet."""
    if helper not in HELPERS:
        raise JvmDependencyError(f"no JVM helper {helper!r} (helpers: {', '.join(HELPERS)})")
    source = MANIFEST.parent / helper
    files = sorted(p for p in source.rglob("*") if p.is_file())
    digest = hashlib.sha256(MANIFEST.read_bytes())
    for p in files:
        digest.update(str(p.relative_to(source)).encode() + b"\0" + p.read_bytes())
    target = jvm_home() / f"{helper}-{digest.hexdigest()[:12]}"
    jar = target / f"{helper}.jar"
    if jar.is_file():
        return jar
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JvmDependencyError(
            f"Maven (mvn) is not installed, so the JVM helper {helper!r} cannot be built; "
            "install Maven (Debian: apt-get install maven)"
        )
    props = _properties()
    defines = [f"-D{name}={props[key]}" for name, key in HELPERS[helper].items()]
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{helper}-", dir=target.parent))
    try:
        shutil.copytree(source, work / "src-tree")
        done = subprocess.run(
            [mvn, "-B", "-q", "-f", str(work / "src-tree" / "pom.xml"), *defines, "package"],
            capture_output=True, text=True, timeout=_FETCH_TIMEOUT_S, check=False,
        )  # fmt: skip
        built = sorted((work / "src-tree" / "target").glob("*.jar"))
        if done.returncode != 0 or not built:
            raise JvmDependencyError(
                f"could not build the JVM helper {helper!r}: "
                f"{_maven_error(done.stdout + done.stderr)}"
            )
        staging = work / "out"
        staging.mkdir()
        shutil.copy2(built[0], staging / jar.name)
        staging.chmod(0o755)
        try:
            staging.rename(target)
        except OSError:  # another process built it first
            if not jar.is_file():
                raise
    except subprocess.TimeoutExpired:
        raise JvmDependencyError(f"building the JVM helper {helper!r} timed out") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return jar


def _digest() -> str:
    return hashlib.sha256(MANIFEST.read_bytes()).hexdigest()[:12]


def set_dir(name: str) -> Path:
    return jvm_home() / f"{name}-{_digest()}"


def fetch(name: str, *, quiet: bool = True) -> Path:
    """The directory of set ``name``'s jars, fetched with Maven when not there yet."""
    profiles = _profiles()
    sets = {n: [c for c, _ in deps] for n, deps in profiles.items()}
    if name not in sets:
        raise JvmDependencyError(
            f"no JVM dependency set {name!r} in {MANIFEST} (sets: {', '.join(sorted(sets))})"
        )
    target = set_dir(name)
    if (target / _COMPLETE).is_file():
        return target
    what = ", ".join(sets[name])
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JvmDependencyError(
            f"Maven (mvn) is not installed, so the JVM set {name!r} ({what}) cannot be "
            f"fetched; install Maven (Debian: apt-get install maven) or put the jars in {target}"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    base = [mvn, "-B", *(["-q"] if quiet else []), "-f", str(MANIFEST)]
    out = f"-DoutputDirectory={staging}"
    if all(alone for _, alone in profiles[name]):  # each artifact alone, no POM read
        cmds = [[*base, "dependency:copy", f"-Dartifact={c}", out] for c, _ in profiles[name]]
    else:
        cmds = [[*base, "-P", name, "dependency:copy-dependencies", "-DincludeScope=runtime", out]]
    try:
        for cmd in cmds:
            done = subprocess.run(
                cmd, capture_output=True, text=True, timeout=_FETCH_TIMEOUT_S, check=False
            )
            if done.returncode != 0:
                raise JvmDependencyError(
                    f"could not fetch the JVM set {name!r} ({what}) from Maven Central: "
                    f"{_maven_error(done.stdout + done.stderr)}"
                )
        (staging / _COMPLETE).write_text(what + "\n")
        staging.chmod(0o755)  # mkdtemp makes it 0700: other users (an image's) read it too
        try:
            staging.rename(target)
        except OSError:  # another process finished the same fetch first
            if not (target / _COMPLETE).is_file():
                raise
    except subprocess.TimeoutExpired:
        raise JvmDependencyError(
            f"fetching the JVM set {name!r} ({what}) took over {_FETCH_TIMEOUT_S}s; "
            "is Maven Central reachable?"
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _maven_error(output: str) -> str:
    """The line of Maven's output that says what failed, without its log prefix."""
    errors = [ln.removeprefix("[ERROR]").strip() for ln in output.splitlines() if "ERROR" in ln]
    errors = [e for e in errors if e and not e.startswith(("->", "To see", "Re-run", "For more"))]
    line = errors[0] if errors else (output.strip().splitlines() or ["mvn failed"])[-1]
    line = re.sub(r"\x1b\[[0-9;]*m", "", line)
    return line if len(line) <= 400 else line[:397] + "..."


def classpath(name: str) -> str:
    """Java class path (``dir/*``) of set ``name``, fetched when needed."""
    return str(fetch(name) / "*")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in ("fetch", "classpath", "build"):
        print(
            "usage: python -m pipeline.jvm fetch [SET ...] | classpath SET | build [HELPER ...]",
            file=sys.stderr,
        )
        return 2
    command = args[0]
    names = args[1:] or sorted(HELPERS if command == "build" else manifest_sets())
    try:
        for name in names:
            if command == "build":
                print(f"jvm: {name} in {build(name)}")
                continue
            where = fetch(name)
            print(classpath(name) if command == "classpath" else f"jvm: {name} in {where}")
    except JvmDependencyError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
