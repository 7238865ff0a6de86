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

ROOT = Path(__file__).resolve().parents[3]


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
    assert keys["decode.schema"] == ["name", "type", "required", "doc", "renamedFrom"]
    assert {"sink", "sink.catalog", "sink.hudi", "metrics", "trigger"} <= sections
    rows = [(["metrics"], "| `metrics` | `{enabled: true}` | x |")]
    assert _documented_in_readme("metrics.enabled", rows)
    assert not _documented_in_readme("metrics.port", rows)
    assert not _documented_in_readme("metricsx", rows)


# -- the example config, uncommented block by block -------------------------------------------

_COMMENTED_KEY = re.compile(r"^\s*#\s+[a-z][\w.]*:(\s|$)")
_SUBSCRIPTIONS = ("topics", "assign", "topicPattern")  # exactly one of them at a time
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")


def commented_blocks(lines: list[str]) -> list[list[int]]:
    """Line numbers of each run of consecutive commented-out key lines."""
    blocks: list[list[int]] = []
    for i, line in enumerate(lines):
        if not _COMMENTED_KEY.match(line):
            continue
        if blocks and blocks[-1][-1] == i - 1:
            blocks[-1].append(i)
        else:
            blocks.append([i])
    return blocks


def _validate_example(text: str, overrides: list[str] | None = None) -> PipelineConfig:
    """``text`` as a config file, every ``${VAR}`` it names set, and each subscription
    it holds tried alone (``source.assign`` and ``source.topicPattern`` are alternatives
    to ``source.topics``)."""
    import yaml

    from pipeline.config import apply_overrides, parse_config

    env = {name: "x" for name in _ENV.findall(text)}
    data = yaml.safe_load(text)
    subs = [k for k in _SUBSCRIPTIONS if k in data["source"]]
    cfg = None
    for keep in subs:
        one = {
            **data,
            "source": {
                k: v for k, v in data["source"].items() if k == keep or k not in _SUBSCRIPTIONS
            },
        }
        cfg = parse_config(apply_overrides(one, overrides or []), env)
    assert cfg is not None
    return cfg


def test_every_commented_block_of_the_example_validates_when_uncommented() -> None:
    lines = (ROOT / "conf" / "pipeline.example.yaml").read_text().splitlines()
    _validate_example("\n".join(lines))
    blocks = commented_blocks(lines)
    assert len(blocks) >= 8, blocks  # the rule sees the blocks (hudi, ha, maintenance ...)
    for block in blocks:
        text = "\n".join(
            ln.replace("# ", "", 1) if i in block else ln for i, ln in enumerate(lines)
        )
        # decode.key needs a registry format for the value: the example's is json
        key = any(lines[i].strip().startswith("# key:") for i in block)
        try:
            _validate_example(text, _REGISTRY_VALUE if key else None)
        except Exception as e:
            shown = "\n".join(lines[i] for i in block)
            raise AssertionError(f"uncommented, this block fails: {e}\n{shown}") from None


def enum_keys(model: type[BaseModel] = PipelineConfig, prefix: str = "") -> dict[str, list[str]]:
    """{dotted key: its allowed string values} of every string-enum option."""
    from pipeline.config import _string_choices

    out: dict[str, list[str]] = {}
    for name, info in model.model_fields.items():
        path = prefix + (info.alias or to_camel(name))
        section = _model_of(info.annotation)
        if section is not None:
            out.update(enum_keys(section, path + "."))
        elif choices := _string_choices(info.annotation):
            out[path] = list(choices)
    return out


_REGISTRY_VALUE = ["decode.format=avro", "decode.schema=[]", "decode.registry.url=http://r"]
# what a value needs beside it to validate
_COMPANIONS = {
    **{f"decode.key.format={f}": _REGISTRY_VALUE for f in ("avro", "protobuf", "json-schema")},
    "decode.key.version=latest": [*_REGISTRY_VALUE, "decode.key.format=avro"],
    "sink.format=hudi": ["sink.hudi.basePath=/x"],
    "sink.routes.by=topic": ["sink.routes.template=lake.t_{topic}"],
    "sink.routes.by=field": ["sink.routes.field=event_type"],
    **{
        f"sink.routes.match={m}": ["sink.routes.by=field", "sink.routes.field=event_type"]
        for m in ("exact", "regex")
    },
    "sink.format=both": ["sink.hudi.basePath=/x"],
    **{
        f"sink.hudi.{key}={value}": ["sink.hudi.basePath=/x"]
        for key, values in (
            ("writer", ("native", "spark")),
            ("operation", ("insert", "bulk_insert")),
        )
        for value in values
    },
    **{
        f"decode.format={f}": ["decode.schema=[]", "decode.registry.url=http://r"]
        for f in ("avro", "protobuf", "json-schema")
    },
    "decode.registry.subjectStrategy=record-name": [
        "decode.registry.url=http://r",
        "decode.registry.recordName=shop.Order",
    ],
    "decode.registry.subjectStrategy=topic-record-name": [
        "decode.registry.url=http://r",
        "decode.registry.recordName=shop.Order",
    ],
    "decode.registry.subjectStrategy=topic-name": ["decode.registry.url=http://r"],
    "decode.registry.version=latest": ["decode.registry.url=http://r"],
    "decode.registry.auth.kind=basic": [
        "decode.registry.url=http://r",
        "decode.registry.auth.username=u",
        "decode.registry.auth.password=p",
    ],
    "decode.registry.auth.kind=bearer": [
        "decode.registry.url=http://r",
        "decode.registry.auth.token=t",
    ],
}


def test_every_documented_enum_value_is_accepted_through_set() -> None:
    """Every allowed value of every string-enum option is named in its README row and
    validates as ``--set key=value`` over the example, spelled as the README spells it
    (unquoted: ``--set ha.mode=off``)."""
    enums = enum_keys()
    assert {"ha.mode", "sink.format", "trigger.mode", "source.isolationLevel"} <= set(enums)
    text = (ROOT / "conf" / "pipeline.example.yaml").read_text()
    rows = readme_rows()
    for key, values in enums.items():
        row = next(
            r for named, r in rows if key in named or any(key.startswith(n + ".") for n in named)
        )
        for value in values:
            assert re.search(rf"\b{re.escape(value)}\b", row), f"README row {key}: no {value}"
            setting = f"{key}={value}"
            cfg = _validate_example(text, [*_COMPANIONS.get(setting, []), setting])
            node: Any = cfg
            for part in key.split("."):
                node = getattr(
                    node,
                    next(
                        n
                        for n, f in type(node).model_fields.items()
                        if part in (n, f.alias or to_camel(n))
                    ),
                )
            assert node == value, (setting, node)


# -- CLI options: the README's command table names every option of every command ---------------


def readme_command_rows() -> dict[str, str]:
    """{command: its command cell} of the README's command table."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for ln in section.splitlines():
        m = re.match(r"\| `ingest (?P<cmd>[a-z][a-z-]*)", ln)
        if m:
            rows[m["cmd"]] = ln.split(" | ", 1)[0]
    return rows


def cli_options() -> dict[str, tuple[set[str], set[str]]]:
    """{command: (its long options, their secondary spellings such as --quick)}."""
    import typer

    from pipeline.cli import app

    group: Any = typer.main.get_command(app)  # typer's bundled click: a Group
    out = {}
    for name, cmd in group.commands.items():
        opts = {o for p in cmd.params for o in p.opts if o.startswith("--")} - {"--help"}
        secondary = {o for p in cmd.params for o in getattr(p, "secondary_opts", [])}
        out[name] = (opts, secondary)
    return out


def test_every_cli_option_is_in_the_readme_command_table() -> None:
    rows = readme_command_rows()
    commands = cli_options()
    assert set(rows) == set(commands), (sorted(rows), sorted(commands))
    for name, (opts, secondary) in commands.items():
        named = set(re.findall(r"--[a-z][a-z-]*", rows[name]))
        missing = sorted(opts - named)
        assert not missing, f"README row 'ingest {name}': options missing: {missing}"
        unknown = sorted(named - opts - secondary)
        assert not unknown, f"README row 'ingest {name}' names options it lacks: {unknown}"
