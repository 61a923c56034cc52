"""Problems found in a config, and the result of validating one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class ConfigIssue:
    path: str  # dotted field path, e.g. "actor_train.training_args.learning_rate" ("" = whole file)
    message: str
    severity: Severity = "error"
    # "not_built": the config is coherent but names a backend this version does not have
    kind: Literal["rule", "not_built"] = "rule"

    def to_dict(self) -> dict[str, str]:
        return {"field": self.path, "message": self.message, "severity": self.severity}

    def __str__(self) -> str:
        prefix = "warning: " if self.severity == "warning" else ""
        return f"{self.path or '<config>'}: {prefix}{self.message}"


class ConfigError(Exception):
    """Raised by load_config / load_raw; carries every error found, not just the first."""

    def __init__(self, issues: list[ConfigIssue]):
        self.issues = issues
        errors = [i for i in issues if i.severity == "error"] or issues
        super().__init__("invalid config:\n" + "\n".join(f"  {i}" for i in errors))


@dataclass
class ValidationResult:
    config: PipelineConfig | None = None
    errors: list[ConfigIssue] = field(default_factory=list)
    warnings: list[ConfigIssue] = field(default_factory=list)
    derived: dict[str, Any] = field(default_factory=dict)
    source_format: str = "roll"

    @property
    def ok(self) -> bool:
        return not self.errors and self.config is not None

    @property
    def issues(self) -> list[ConfigIssue]:
        return [*self.errors, *self.warnings]

    @property
    def rule_errors(self) -> list[ConfigIssue]:
        """Errors of the config itself, leaving out backends this build lacks."""
        return [i for i in self.errors if i.kind != "not_built"]
