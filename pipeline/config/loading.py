"""The whole configuration (:class:`PipelineConfig`) and how a file becomes one: the
YAML, then ``--set`` overrides, then ``${VAR}`` references."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, model_validator

from pipeline.config.base import _Model
from pipeline.config.decode import DecodeConfig
from pipeline.config.runtime import (
    CommitConfig,
    HaConfig,
    MaintenanceConfig,
    MetricsConfig,
    RunConfig,
    SparkConfig,
    TriggerConfig,
)
from pipeline.config.sink import SinkConfig
from pipeline.config.source import SourceConfig
from pipeline.errors import ConfigError


class PipelineConfig(_Model):
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    source: SourceConfig
    decode: DecodeConfig = Field(default_factory=DecodeConfig)
    sink: SinkConfig
    checkpoint_location: str
    trigger: TriggerConfig = Field(default_factory=TriggerConfig)
    spark: SparkConfig = Field(default_factory=SparkConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    commit: CommitConfig = Field(default_factory=CommitConfig)
    run: RunConfig = Field(default_factory=RunConfig)
    ha: HaConfig = Field(default_factory=HaConfig)
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)

    @model_validator(mode="after")
    def _orphans_outwait_commit_retries(self) -> PipelineConfig:
        window = self.commit.catalog_retry_seconds
        if self.maintenance.orphans.older_than < window:
            raise ValueError(
                f"maintenance.orphans.olderThan ({self.maintenance.orphans.older_than:g} s) must "
                f"not be below commit.catalogRetrySeconds ({window:g} s): a commit still being "
                "retried may reference a file that old"
            )
        return self

    @model_validator(mode="after")
    def _lease_needs_the_journal(self) -> PipelineConfig:
        if self.ha.mode != "off" and self.commit.mode != "exactly-once":
            raise ValueError(
                f"ha.mode {self.ha.mode} needs commit.mode exactly-once: the lease lives in "
                "its journal, and only its writer epoch fences the replica taken over"
            )
        return self


# -- loading ---------------------------------------------------------------------------

_ENV_REF = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


def _resolve_env(value: Any, env: Mapping[str, str], path: str) -> Any:
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            name = m.group("name")
            if name in env:
                return env[name]
            if m.group("default") is not None:
                return m.group("default")
            raise ConfigError(f"{path or '<root>'}: environment variable {name} is not set")

        return _ENV_REF.sub(sub, value)
    if isinstance(value, dict):
        return {
            k: _resolve_env(v, env, f"{path}.{k}" if path else str(k)) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_resolve_env(v, env, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """``a.b.c=value``: the value is parsed as YAML (numbers, booleans, lists, maps)."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value")
        key, raw = item.split("=", 1)
        parts = [p for p in key.strip().split(".") if p]
        if not parts:
            raise ConfigError(f"--set {item!r}: empty key")
        node = data
        for p in parts[:-1]:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {key}: {p} is not a mapping")
            node = nxt
        try:
            node[parts[-1]] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            node[parts[-1]] = raw
    return data


def _format_error(e: ValidationError) -> str:
    lines = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-after"))
        msg = err["msg"].removeprefix("Value error, ")
        lines.append(f"{loc}: {msg}" if loc else msg)
    return "invalid config: " + "; ".join(lines)


def parse_config(data: Mapping[str, Any], env: Mapping[str, str] | None = None) -> PipelineConfig:
    resolved = _resolve_env(dict(data), os.environ if env is None else env, "")
    try:
        return PipelineConfig.model_validate(resolved)
    except ValidationError as e:
        raise ConfigError(_format_error(e)) from None


def load_config(
    path: str | Path | None,
    overrides: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> PipelineConfig:
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist")
        try:
            loaded = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {p} is not valid YAML: {e}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {p} must hold a mapping at the top level")
        data = loaded
    return parse_config(apply_overrides(data, overrides), env)
