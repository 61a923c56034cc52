"""ROLL's GEM dataset environments (roll_math, roll_qa) and tool_wrapper, for the environments an agentic run plays.

- env_config.dataset_name must name the data. A Hugging Face id is accepted as a model id is (Qwen/...): whether it
  is on this machine is known only when the environment is built (trainer.envs.gem_data.load_rows), which fails then
  naming custom_envs.<tag>.env_config.dataset_name and what to set.
- tool_wrapper (trainer.config.roll_tools.split_tool_wrapper): its form, keys and tools; a tool calling an outside
  service (search, mcp) is not built; python_code needs a working bubblewrap (model code runs nowhere else). Each
  refusal names the override that removes the wrapper.
"""

from __future__ import annotations

from trainer.config.bubblewrap import bubblewrap_problem
from trainer.config.checks.common import NOT_BUILT, error
from trainer.config.issues import ConfigIssue
from trainer.config.roll_tools import DATASET_COLUMNS, split_tool_wrapper
from trainer.config.schema import PipelineConfig


def played_tags(config: PipelineConfig) -> list[str]:
    managers = (config.train_env_manager, config.val_env_manager)
    tags = {tag for m in managers if m is not None for tag in m.tags if tag in config.custom_envs}
    return sorted(tags)


def gem_env_issues(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    for tag in played_tags(config):
        spec = config.custom_envs[tag]
        name = spec.env_config.get("dataset_name")
        if spec.env_type in DATASET_COLUMNS and (not isinstance(name, str) or not name):
            issues.append(
                error(
                    f"custom_envs.{tag}.env_config.dataset_name",
                    f"{name!r}; {spec.env_type} plays the "
                    "questions of a dataset: set it to a local .jsonl/.json/.csv/.parquet file or folder "
                    "(or a Hugging Face id already in the local cache)",
                )
            )
        if spec.tool_wrapper is not None:
            issues += tool_wrapper_issues(tag, spec.tool_wrapper)
    return issues


def tool_wrapper_issues(tag: str, tool_wrapper: object) -> list[ConfigIssue]:
    try:
        _, tools = split_tool_wrapper(tool_wrapper, tag=tag)
    except ValueError as exc:
        path, _, message = str(exc).partition(": ")
        return [
            ConfigIssue(path, message, kind="not_built") if NOT_BUILT in message else error(path, message)
        ]
    problem = bubblewrap_problem() if any(t["tool_id"] == "python_code" for t in tools) else None
    if problem is None:
        return []
    return [
        error(
            f"custom_envs.{tag}.tool_wrapper",
            f"its python_code tool runs model code only in the bubblewrap "
            f"sandbox, and {problem}; install the Debian package bubblewrap (scripts/setup.sh does), or "
            f"play without tools: override ~custom_envs.{tag}.tool_wrapper",
        )
    ]
