"""The README's configuration table and ``conf/pipeline.example.yaml`` match the config model.

Keys of the model
  Dotted camelCase paths of ``PipelineConfig``'s fields (the aliases users write),
  recursing into nested config sections (``sink.catalog``, ``sink.hudi`` ...). A field
  whose value is a list or a mapping is one key (``decode.schema``, ``source.kafka``,
  ``spark.conf``), except that the fields of a list's items (``decode.schema``:
  ``name``, ``type`` ...) must be named in its README row.

README rule (section "## Configuration", the ``| key | default | meaning |`` table)
  A key is documented when the key column of a row names it in backticks
  (``source.topics`` / ``source.assign`` name two keys), or names one of its sections
  (``metrics``, ``sink.hudi``) and that row mentions the key's own name as a word
  anywhere (``{enabled: true, port: 9108}``). Every backticked name in the key column
  must be a key or a section of the model.

Example rule (``conf/pipeline.example.yaml``)
  Every key appears at its place in the YAML tree, as a key line or as a commented-out
  key line, where ``#`` and one space take the first two columns of the key's indentation
  (``  # minPartitions: 8`` and ``#   stopTimeoutSeconds: 25`` are both indented by 2).
  Every key line there (commented out or not, outside mapping-valued keys such as
  ``source.kafka`` whose entries are passed through) must be a key or section of the model.
"""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from pipeline.config import PipelineConfig

ROOT = Path(__file__).resolve().parents[2]


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The config section type of a field (``HudiConfig | None`` -> HudiConfig)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        models = [m for a in typing.get_args(annotation) if (m := _model_of(a))]
        return models[0] if len(models) == 1 else None
    return None


def _item_model(annotation: Any) -> type[BaseModel] | None:
    """Model of a list's items (``list[FieldConfig]`` -> FieldConfig)."""
    for a in [annotation, *typing.get_args(annotation)]:
        if typing.get_origin(a) is list:
            return _model_of(typing.get_args(a)[0])
    return None


def model_keys(
    model: type[BaseModel] = PipelineConfig, prefix: str = ""
) -> tuple[dict[str, list[str]], set[str]]:
    """({leaf key: names its README row must mention}, {section})."""
    keys: dict[str, list[str]] = {}
    sections: set[str] = set()
    for name, info in model.model_fields.items():
        path = prefix + (info.alias or to_camel(name))
        section = _model_of(info.annotation)
        if section is not None:
            sections.add(path)
            sub_keys, sub_sections = model_keys(section, path + ".")
            keys.update(sub_keys)
            sections |= sub_sections
            continue
        items = _item_model(info.annotation)
        keys[path] = (
            [f.alias or to_camel(n) for n, f in items.model_fields.items()] if items else []
        )
    return keys, sections


# -- README ------------------------------------------------------------------------------


def readme_rows() -> list[tuple[list[str], str]]:
    """(keys named in the key column, whole row) of the configuration table."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    lines = section.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.replace(" ", "") == "|key|default|meaning|")
    rows = []
    for ln in lines[start + 2 :]:
        if not ln.startswith("|"):
            break
        key_cell = ln.split("|")[1]
        rows.append((re.findall(r"`([^`]+)`", key_cell), ln))
    assert rows, "the configuration table has no rows"
    return rows


def _documented_in_readme(key: str, rows: list[tuple[list[str], str]]) -> bool:
    parents = [key.rsplit(".", i)[0] for i in range(1, key.count(".") + 1)]
    name = key.rsplit(".", 1)[-1]
    for named, row in rows:
        if key in named:
            return True
        if any(p in named for p in parents) and re.search(rf"\b{re.escape(name)}\b", row):
            return True
    return False


def test_every_model_key_is_in_the_readme_table() -> None:
    keys, _ = model_keys()
    rows = readme_rows()
    missing = sorted(k for k in keys if not _documented_in_readme(k, rows))
    assert not missing, f"config keys missing from README's configuration table: {missing}"
    for key, item_fields in keys.items():
        if not item_fields:
            continue
        row = next(r for named, r in rows if key in named)
        absent = [f for f in item_fields if not re.search(rf"\b{f}\b", row)]
        assert not absent, f"README row {key}: item fields {absent} not named"


def test_every_readme_key_is_in_the_model() -> None:
    keys, sections = model_keys()
    named = {k for ks, _ in readme_rows() for k in ks}
    unknown = sorted(named - set(keys) - sections)
    assert not unknown, f"README documents keys the config model does not have: {unknown}"


# -- example config ---------------------------------------------------------------------------

_KEY_LINE = re.compile(r"^\s*(?P<hash>#\s*)?(?P<key>[a-z][A-Za-z0-9_]*):(\s|$)")


def example_keys() -> set[str]:
    """Dotted paths of the example's key lines, commented-out ones included."""
    out: set[str] = set()
    stack: list[tuple[int, str]] = []  # (indent, key) of the open mappings
    for line in (ROOT / "conf" / "pipeline.example.yaml").read_text().splitlines():
        m = _KEY_LINE.match(line)
        if m is None:
            continue
        indent = m.start("key") - (2 if m["hash"] else 0)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [m["key"]])
        out.add(path)
        stack.append((indent, m["key"]))
    return out


def test_example_config_names_every_key_and_only_model_keys() -> None:
    keys, sections = model_keys()
    found = example_keys()
    missing = sorted(set(keys) - found)
    assert not missing, f"config keys missing from conf/pipeline.example.yaml: {missing}"
    leaves = set(keys)
    passthrough = {f for f in found if any(f.startswith(leaf + ".") for leaf in leaves)}
    unknown = sorted(found - leaves - sections - passthrough)
    assert not unknown, f"conf/pipeline.example.yaml has keys the model does not: {unknown}"


def test_the_rules_see_what_they_should() -> None:
    keys, sections = model_keys()
    assert {"source.topics", "decode.schema", "sink.hudi.basePath", "metrics.port"} <= set(keys)
    assert keys["decode.schema"] == ["name", "type", "required", "doc"]
    assert {"sink", "sink.catalog", "sink.hudi", "metrics", "trigger"} <= sections
    rows = [(["metrics"], "| `metrics` | `{enabled: true}` | x |")]
    assert _documented_in_readme("metrics.enabled", rows)
    assert not _documented_in_readme("metrics.port", rows)
    assert not _documented_in_readme("metricsx", rows)
