"""The base of every configuration model (unknown keys refused, camelCase aliases,
YAML booleans read back as enum words), secret masking and duration values."""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from pipeline.durations import seconds_of

# YAML 1.1 (PyYAML) reads unquoted off/no/false and on/yes/true as booleans: the
# spellings a boolean stands for when a string-enum option expects one of them
_YAML_BOOL_SPELLINGS = {False: ("off", "no", "false"), True: ("on", "yes", "true")}


def _string_choices(annotation: Any) -> tuple[str, ...]:
    """The string values of the ``Literal``s in ``annotation`` (also inside a union)."""
    if typing.get_origin(annotation) is Literal:
        return tuple(a for a in typing.get_args(annotation) if isinstance(a, str))
    return tuple(c for a in typing.get_args(annotation) for c in _string_choices(a))


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )

    @model_validator(mode="before")
    @classmethod
    def _yaml_booleans_as_enum_values(cls, data: Any) -> Any:
        """``ha: {mode: off}`` and ``--set ha.mode=off`` arrive as ``False``: for a field
        whose allowed strings include such a spelling (``off``), take the boolean as it."""
        if not isinstance(data, dict):
            return data
        fixed = dict(data)
        for name, info in cls.model_fields.items():
            choices = _string_choices(info.annotation)
            if not choices:
                continue
            for key in {name, info.alias or name}:
                value = fixed.get(key)
                if isinstance(value, bool):
                    spelled = [c for c in _YAML_BOOL_SPELLINGS[value] if c in choices]
                    if spelled:
                        fixed[key] = spelled[0]
        return fixed


# librdkafka settings whose values are secrets (sasl.password, ssl.key.password,
# sasl.oauthbearer.client.secret, sasl.jaas.config ...): never shown by a repr or a log line
_SECRET_SETTING = re.compile(r"password|secret|jaas|token|credential|ssl\.key\.pem", re.I)


def masked_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` with the values of secret-looking keys replaced by ``***``."""
    return {k: ("***" if _SECRET_SETTING.search(k) else v) for k, v in settings.items()}


Seconds = Annotated[float, BeforeValidator(seconds_of), Field(ge=0)]
