"""Deployment quotas: how much one run may ask for, and how many runs a team may have live at once.

Set per deployment in settings (env vars POLICYLAB_QUOTA_*) and read at every submission, so a
changed quota applies to the next launch, resume or fork. The checks are plain functions of numbers;
experiments.services calls them where runs are submitted (REST API, HTML pages, CLI alike).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from trainer.config import ConfigIssue
from trainer.config.schema import PipelineConfig
from trainer.config.topology import samples_per_rollout


@dataclass(frozen=True)
class Quotas:
    concurrent_runs: int  # live runs (queued … cancelling) per team
    steps_per_run: int  # max_steps
    samples_per_step: int  # rollout_batch_size × num_return_sequences_in_group (topology.samples_per_rollout)

    @classmethod
    def from_settings(cls) -> Quotas:
        return cls(settings.POLICYLAB_QUOTA_CONCURRENT_RUNS, settings.POLICYLAB_QUOTA_STEPS_PER_RUN,
                   settings.POLICYLAB_QUOTA_SAMPLES_PER_STEP)


def config_quota_issues(config: PipelineConfig, quotas: Quotas) -> list[ConfigIssue]:
    """An error, by field, for every number of `config` over this deployment's quotas."""
    issues = []
    if config.max_steps > quotas.steps_per_run:
        issues.append(ConfigIssue("max_steps", (
            f"{config.max_steps} steps is over this deployment's quota of {quotas.steps_per_run} steps per run "
            f"(POLICYLAB_QUOTA_STEPS_PER_RUN = {quotas.steps_per_run})")))
    samples = samples_per_rollout(config)
    if samples > quotas.samples_per_step:
        issues.append(ConfigIssue("rollout_batch_size", (
            f"{samples} samples per step (rollout_batch_size × num_return_sequences_in_group) is over this "
            f"deployment's quota of {quotas.samples_per_step} (POLICYLAB_QUOTA_SAMPLES_PER_STEP = "
            f"{quotas.samples_per_step})")))
    return issues


def concurrency_refusal(team_name: str, live_runs: int, quotas: Quotas) -> str | None:
    """Why the team may not start one more run while `live_runs` of its runs are live (None: it may)."""
    if live_runs < quotas.concurrent_runs:
        return None
    return (f"team {team_name} already has {live_runs} live runs, this deployment's quota of concurrent runs per team "
            f"(POLICYLAB_QUOTA_CONCURRENT_RUNS = {quotas.concurrent_runs}); wait for one to finish or cancel one")
