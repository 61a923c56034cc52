"""Checkpointing and profiling."""

from __future__ import annotations

from trainer.config.checks.common import error
from trainer.config.issues import ConfigIssue
from trainer.config.schema import PipelineConfig


def check_checkpointing(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    resume = config.resume_from_checkpoint
    if config.resume_mode == "path" and not isinstance(resume, str):
        issues.append(error("resume_from_checkpoint", "resume_mode path needs resume_from_checkpoint set to a path"))
    if config.resume_mode == "none" and resume not in (False, None, ""):
        issues.append(error("resume_mode", f"none contradicts resume_from_checkpoint {resume!r}"))
    if config.max_ckpts_to_keep == 0 or config.max_ckpts_to_keep < -1:
        issues.append(error("max_ckpts_to_keep", "must be -1 (keep all) or a positive count"))
    return issues


def check_profiling(config: PipelineConfig) -> list[ConfigIssue]:
    """profiler_steps is a [first, last] range of steps; one profiling mode at a time (ROLL asserts it); a range
    that starts after the run's last step would profile nothing (trainer.roles.profiling)."""
    steps = config.profiler_steps
    if len(steps) != 2 or not 1 <= steps[0] <= steps[1]:
        return [error("profiler_steps", f"{steps} is not a step range: write [first, last] with 1 <= first <= last "
                      "(e.g. [2, 2] for the second step only)")]
    if config.profiler_timeline and config.profiler_memory:
        return [error("profiler_memory", "profiler_timeline and profiler_memory are both on; ROLL allows one "
                      "profiling mode at a time: turn one off")]
    if (config.profiler_timeline or config.profiler_memory) and steps[0] > config.max_steps:
        return [error("profiler_steps", f"{steps} starts after the last step (max_steps {config.max_steps}): nothing "
                      f"would be profiled; e.g. [{config.max_steps}, {config.max_steps}]")]
    return []
