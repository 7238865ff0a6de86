"""The design record is in the repository and every citation of it resolves.

* No file under ``pipeline/``, ``tests/``, ``docs/``, ``scripts/``, ``conf/``, ``deploy/``,
  ``.ci/`` or ``README.md`` cites a design document that is not in the repository (the
  notes the project started from), nor an issue by number: a maintainer who clones the
  repository must be able to follow every reference.
* Every "docs/design.md invariant N" (also "invariants N-M", "N and M") names a numbered
  invariant of ``docs/design.md``.
* Every code path and test that ``docs/design.md`` and ``docs/hudi.md`` name exists, so the
  record stays checkable as files are renamed.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
RECORD = ROOT / "docs" / "design.md"

# Names of documents that were never in the repository (the notes the project started
# from), upper case as they were cited. Spelled in pieces so that this file does not match
# the search it makes.
_OUTSIDE_DOCS = re.compile("|".join(["DES" + "IGN", "TOOL" + "ING", "HUDI" + "_FORMAT"]))
# the word issue(s), optionally "#", then a number (so not "range issues", a verify term)
_ISSUE_NUMBER = re.compile(r"\b[Ii]ssues? #?\d+")
_INVARIANT_REF = re.compile(
    r"design\.md`?\]?(?:\([^)]*\))?,?\s+invariants?\s+"
    r"(\d+(?:\s*(?:-|\u2013|,|and|to|or)\s*\d+)*)"
)
_NUMBERED = re.compile(r"^\*\*(\d+)\. ", re.M)
_TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".sh", ".txt", ".cfg", ".ini", ""}


def _files() -> list[Path]:
    out = [ROOT / "README.md"]
    for top in ("pipeline", "tests", "docs", "scripts", "conf", "deploy", ".ci"):
        for p in sorted((ROOT / top).rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts and p.suffix in _TEXT_SUFFIXES:
                out.append(p)
    return out


def _read(p: Path) -> str:
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return ""


def _hits(pattern: re.Pattern[str]) -> list[str]:
    hits = []
    for p in _files():
        for n, line in enumerate(_read(p).splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{p.relative_to(ROOT)}:{n}: {line.strip()}")
    return hits


def _numbers(spec: str) -> set[int]:
    """``"3-7"`` → {3, ..., 7}; ``"2, 5 and 9"`` → {2, 5, 9}."""
    out: set[int] = set()
    for part in re.split(r"\s*(?:,|and|or)\s*", spec):
        bounds = [int(x) for x in re.split(r"\s*(?:-|\u2013|to)\s*", part) if x]
        if len(bounds) == 2:
            out.update(range(bounds[0], bounds[1] + 1))
        else:
            out.update(bounds)
    return out


def test_design_record_exists_with_numbered_invariants() -> None:
    numbers = [int(n) for n in _NUMBERED.findall(RECORD.read_text(encoding="utf-8"))]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 9, numbers


def test_no_citation_of_documents_outside_the_repository() -> None:
    hits = _hits(_OUTSIDE_DOCS)
    assert not hits, "cite docs/design.md (or say the reason in place):\n" + "\n".join(hits)


def test_no_citation_of_issues_by_number() -> None:
    hits = _hits(_ISSUE_NUMBER)
    assert not hits, "say the reason in place instead of an issue number:\n" + "\n".join(hits)


def test_every_cited_invariant_exists() -> None:
    defined = {int(n) for n in _NUMBERED.findall(RECORD.read_text(encoding="utf-8"))}
    bad = []
    cited = 0
    for p in _files():
        text = " ".join(_read(p).split())  # a citation may wrap across lines
        for m in _INVARIANT_REF.finditer(text):
            cited += 1
            missing = _numbers(m.group(1)) - defined
            if missing:
                bad.append(f"{p.relative_to(ROOT)}: {m.group(0)!r} (no invariant {missing})")
    assert cited, "no file cites docs/design.md invariants: is the pattern still right?"
    assert not bad, "\n".join(bad)


_CODE = re.compile(r"`([^`\s]+)`")


def _check_references(doc: Path) -> list[str]:
    """Paths and ``file::test`` names in backticks; ``…::name`` and ``…fragment…`` refer
    to the test file named last before them."""
    bad = []
    last: Path | None = None
    for token in _CODE.findall(doc.read_text(encoding="utf-8")):
        path, _, name = token.partition("::")
        if path.startswith(("pipeline/", "tests/")) and (path.endswith((".py", "/"))):
            if "*" in path:
                if not list(ROOT.glob(path)):
                    bad.append(token)
                continue
            target = ROOT / path
            if not target.exists():
                bad.append(token)
                continue
            if target.suffix == ".py":
                last = target
            if name and f"def {name}(" not in target.read_text(encoding="utf-8"):
                bad.append(token)
        elif token.startswith("…") and last is not None and last.name.startswith("test_"):
            fragment = token.lstrip("…").removeprefix("::").strip("…")
            if not re.search(rf"def \w*{re.escape(fragment)}", last.read_text(encoding="utf-8")):
                bad.append(f"{token} (in {last.relative_to(ROOT)})")
    return bad


def test_paths_and_tests_named_by_the_record_exist() -> None:
    bad = _check_references(RECORD) + _check_references(ROOT / "docs" / "hudi.md")
    assert not bad, "named in docs/design.md or docs/hudi.md but not found:\n" + "\n".join(bad)
