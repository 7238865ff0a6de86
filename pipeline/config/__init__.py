"""The one configuration model, validated at start-up.

A YAML file (``ingest run --config conf/pipeline.yaml``), then ``--set a.b=c`` overrides,
then ``${VAR}`` / ``${VAR:-default}`` references resolved from the environment (secrets
never have to live in the file). Unknown keys and bad values fail before anything starts,
with the dotted key and the allowed values in one line.

One module per part of the file: :mod:`~pipeline.config.source`,
:mod:`~pipeline.config.decode`, :mod:`~pipeline.config.sink`,
:mod:`~pipeline.config.runtime` (trigger, spark, commit, metrics, run, ha, maintenance);
:mod:`~pipeline.config.loading` holds the whole model and the loading;
:mod:`~pipeline.config.base` what they share.
"""

from pipeline.config.base import _string_choices, masked_settings
from pipeline.config.decode import (
    REGISTRY_FORMATS,
    DecodeConfig,
    FieldConfig,
    KeyConfig,
    RegistryAuthConfig,
    RegistryConfig,
)
from pipeline.config.loading import PipelineConfig, apply_overrides, load_config, parse_config
from pipeline.config.runtime import (
    CommitConfig,
    CompactionConfig,
    HaConfig,
    MaintenanceConfig,
    MetricsConfig,
    OrphanCleanupConfig,
    RunConfig,
    SparkConfig,
    TriggerConfig,
)
from pipeline.config.sink import CatalogConfig, HudiConfig, SinkConfig
from pipeline.config.source import SourceConfig
from pipeline.durations import normalize_duration, seconds_of, spark_duration_seconds

__all__ = [
    "REGISTRY_FORMATS",
    "CatalogConfig",
    "CommitConfig",
    "CompactionConfig",
    "DecodeConfig",
    "FieldConfig",
    "HaConfig",
    "HudiConfig",
    "KeyConfig",
    "MaintenanceConfig",
    "MetricsConfig",
    "OrphanCleanupConfig",
    "PipelineConfig",
    "RegistryAuthConfig",
    "RegistryConfig",
    "RunConfig",
    "SinkConfig",
    "SourceConfig",
    "SparkConfig",
    "TriggerConfig",
    "_string_choices",
    "apply_overrides",
    "load_config",
    "masked_settings",
    "normalize_duration",
    "parse_config",
    "seconds_of",
    "spark_duration_seconds",
]
