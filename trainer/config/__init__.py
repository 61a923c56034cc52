"""The experiment config: schema, loading, validation, export (torch-free; the web server imports it).

The public names are fixed by docs/decisions/0001-module-contracts.md.
"""

from trainer.config.export import config_json_schema, config_to_yaml
from trainer.config.issues import ConfigError, ConfigIssue, ValidationResult
from trainer.config.loading import load_raw
from trainer.config.schema import PipelineConfig
from trainer.config.validation import load_config, validate_config

__all__ = [
    "ConfigError",
    "ConfigIssue",
    "PipelineConfig",
    "ValidationResult",
    "config_json_schema",
    "config_to_yaml",
    "load_config",
    "load_raw",
    "validate_config",
]
