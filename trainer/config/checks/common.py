"""Findings and words every check module shares."""

from __future__ import annotations

from trainer.config.issues import ConfigIssue


def error(path: str, message: str) -> ConfigIssue:
    return ConfigIssue(path, message, "error")


def warning(path: str, message: str) -> ConfigIssue:
    return ConfigIssue(path, message, "warning")


NOT_BUILT = "is not built in this version of PolicyLab"
