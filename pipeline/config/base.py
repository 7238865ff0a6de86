"""The base of every configuration model (unknown keys refused, camelCase aliases,
YAML booleans read back as enum words), secret masking and duration values."""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

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


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|seconds?|minutes?|min)")
_MS_PER_UNIT = {"mil": 1, "sec": 1_000, "min": 60_000}


def normalize_duration(key: str, v: str) -> str:
    """``'500 ms'`` -> ``'500 milliseconds'``: the spelling Spark's interval parser reads.

    Accepts a number (fractions allowed) and ms / milliseconds / s / seconds / min /
    minutes; raises ``ValueError`` naming ``key`` otherwise.
    """
    m = _DURATION.fullmatch(v.strip())
    if not m:
        raise ValueError(f"{key} must look like '10 seconds', '500 ms' or '1 minute'")
    # Spark's interval parser knows only the long unit names ("500 ms" fails there).
    unit = {"ms": "milliseconds", "s": "seconds", "min": "minutes"}.get(m[2], m[2])
    if "." in m[1]:  # nor fractions of a unit: say it in whole milliseconds
        return f"{round(float(m[1]) * _MS_PER_UNIT[unit[:3]])} milliseconds"
    return f"{m[1]} {unit}"


def spark_duration_seconds(key: str, v: str) -> float:
    """Seconds of a duration written as ``normalize_duration`` accepts it."""
    return seconds_of(normalize_duration(key, v))


_SECONDS = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")
_SECONDS_PER_UNIT = {
    **dict.fromkeys(("ms", "millisecond", "milliseconds"), 0.001),
    **dict.fromkeys(("", "s", "second", "seconds"), 1.0),
    **dict.fromkeys(("min", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hour", "hours"), 3600.0),
}


def seconds_of(v: Any) -> float:
    """Seconds of ``300``, ``"300"``, ``"500 ms"``, ``"5 minutes"`` or ``"1 hour"``."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        return float(v)
    m = _SECONDS.fullmatch(str(v).strip())
    if not m or m[2] not in _SECONDS_PER_UNIT:
        raise ValueError(
            "must be seconds or look like '500 ms', '30 seconds', '5 minutes', '1 hour'"
        )
    return float(m[1]) * _SECONDS_PER_UNIT[m[2]]


Seconds = Annotated[float, BeforeValidator(seconds_of), Field(ge=0)]
