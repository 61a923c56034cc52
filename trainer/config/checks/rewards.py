"""Reward workers, LLM judges and dynamic sampling's query filters."""

from __future__ import annotations

import difflib
from typing import Any

from trainer.config.bubblewrap import local_sandbox_refusal
from trainer.config.checks.common import error, warning
from trainer.config.issues import ConfigIssue
from trainer.config.outbound import OutboundRefused, precheck
from trainer.config.registries import REWARD_TYPES, ROLL_REWARD_WORKERS, ROLL_UNSUPPORTED_REWARD_WORKERS
from trainer.config.schema import PipelineConfig
from trainer.config.topology import cluster_judges, rollout_schedule


def check_rewards(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    if not config.rewards and config.train_env_manager is None:
        issues.append(
            error("rewards", f"no reward worker: add one, e.g. rewards: {{math: {{reward_type: math_rule}}}} "
                  f"(reward types: {', '.join(REWARD_TYPES)})")
        )
    for name, reward in config.rewards.items():
        path = f"rewards.{name}"
        from_cls = None
        if reward.worker_cls is not None:
            if reward.worker_cls in ROLL_REWARD_WORKERS:
                from_cls = ROLL_REWARD_WORKERS[reward.worker_cls]
            elif reward.worker_cls in ROLL_UNSUPPORTED_REWARD_WORKERS:
                continue  # coherent, but not built: check_availability says so
            else:
                close = difflib.get_close_matches(reward.worker_cls, list(ROLL_REWARD_WORKERS), n=1, cutoff=0.6)
                hint = f"did you mean {close[0]}? " if close else ""
                issues.append(
                    error(
                        f"{path}.worker_cls",
                        f"unknown reward worker class; {hint}known: {', '.join(ROLL_REWARD_WORKERS)}; "
                        f"or set reward_type to one of {', '.join(REWARD_TYPES)} (classes are never imported)",
                    )
                )
                continue
        if from_cls is None and reward.reward_type is None:
            issues.append(
                error(f"{path}.reward_type", f"is required (one of {', '.join(REWARD_TYPES)}) unless worker_cls names it")
            )
        elif from_cls is not None and reward.reward_type is not None and from_cls != reward.reward_type:
            issues.append(
                error(f"{path}.reward_type", f"{reward.reward_type} contradicts worker_cls, which means {from_cls}")
            )
        if (reward.reward_type or from_cls) == "reward_model" and reward.model_args.model_name_or_path is None:
            issues.append(error(f"{path}.model_args.model_name_or_path", "a reward_model reward needs a model path"))
        issues += _judge_issues(config, path, reward, (reward.reward_type or from_cls) == "llm_judge")
        if reward.world_size is not None and reward.world_size > 1:  # ROLL: that many reward worker processes
            issues.append(warning(f"{path}.world_size", f"has no effect: reward domains are scored by one worker in "
                                  f"the driver here, not {reward.world_size} worker processes (a throughput knob "
                                  "in ROLL; the rewards are the same)"))
        issues += _outbound_issues(path, "code_url", reward.code_url)
        local = (reward.reward_type or from_cls) == "code_sandbox" and reward.use_local
        if local and (refusal := local_sandbox_refusal()):  # untrusted code runs under bubblewrap or not at all
            issues.append(error(f"{path}.use_local", refusal.removeprefix("use_local: ")))
    if config.reward_model is not None and not cluster_judges(config):
        issues.append(warning("reward_model", "has no effect: no llm_judge reward has judge_model_type: cluster, "
                              "so the judge group is not built"))
    return issues



JUDGE_API_FIELDS = ("judge_model_name", "judge_api_url", "judge_api_key")


def _outbound_issues(path: str, name: str, url: str | None) -> list[ConfigIssue]:
    """A URL the run will call, checked against the deployment's outbound policy (trainer.config.outbound)."""
    try:
        if url:
            precheck(url, f"{path}.{name}")
    except OutboundRefused as exc:
        return [error(f"{path}.{name}", str(exc).removeprefix(f"{path}.{name}: "))]
    return []


def _judge_issues(config: PipelineConfig, path: str, reward: Any, is_judge: bool) -> list[ConfigIssue]:
    """An llm_judge reward's fields go together: judge_model_type api needs judge_api_url (http or https) and
    judge_model_name, inference a model; judge fields on another reward, or the other mode's, do nothing."""
    judge_fields = ("judge_prompt", "judge_model_type", *JUDGE_API_FIELDS)
    if not is_judge:
        return [warning(f"{path}.{name}", f"has no effect: {path} is not an llm_judge reward (reward_type: "
                        "llm_judge or ROLL's LLMJudgeRewardWorker)") for name in judge_fields
                if getattr(reward, name) is not None]
    mode = reward.judge_model_type
    if mode is None:
        return [error(f"{path}.judge_model_type", "an llm_judge reward needs it; valid: api (judge_api_url, "
                      "judge_model_name), inference (this section's model_args); a judge loaded from this section: "
                      f"override {path}.judge_model_type=inference")]
    issues = []
    if mode == "api":
        issues += [error(f"{path}.{name}", f"judge_model_type api needs it ({description})")
                   for name, description in (("judge_api_url", "the API's base URL, e.g. https://host/v1"),
                                             ("judge_model_name", "the model name each request sends"))
                   if not getattr(reward, name)]
        issues += _outbound_issues(path, "judge_api_url", reward.judge_api_url)
    elif mode == "cluster":
        issues += _cluster_judge_issues(config, path, reward)
    else:
        if not (reward.model_args.model_name_or_path or config.reward_pretrain):
            issues.append(error(f"{path}.model_args.model_name_or_path", "judge_model_type inference generates "
                                "the judgment with this section's model: set its path (or reward_pretrain)"))
        issues += [warning(f"{path}.{name}", "has no effect: judge_model_type inference runs the section's own "
                           "model, not an API") for name in JUDGE_API_FIELDS if getattr(reward, name) is not None]
    return issues


def _cluster_judge_issues(config: PipelineConfig, path: str, reward: Any) -> list[ConfigIssue]:
    """judge_model_type cluster needs the reward_model group; this section's own model and engine then do nothing
    (ROLL's cluster judge is a client: only its prompt and generating_args travel with each request)."""
    server = config.reward_model
    if server is None:
        return [error(f"{path}.judge_model_type", "cluster sends the judge prompts to the top-level reward_model "
                      "worker group, which is not set: add reward_model (model_args, strategy_args, device_mapping), "
                      f"or judge with this section's own model: override {path}.judge_model_type=inference")]
    issues = [warning(f"{path}.{name}", "has no effect: judge_model_type cluster asks the reward_model group, not an "
                      "API") for name in JUDGE_API_FIELDS if getattr(reward, name) is not None]
    if reward.strategy_args is not None:
        issues.append(warning(f"{path}.strategy_args", "has no effect: judge_model_type cluster generates on the "
                              "reward_model group's engine (reward_model.strategy_args)"))
    own = reward.model_args.model_name_or_path
    if own is not None and own != server.model_args.model_name_or_path:
        issues.append(warning(f"{path}.model_args.model_name_or_path", f"has no effect: judge_model_type cluster "
                              f"judges with reward_model's model ({server.model_args.model_name_or_path})"))
    return issues


QUERY_FILTER_ARGS = {"mean_filter": ("threshold_up", "threshold_down"), "std_filter": ("std_threshold",),
                     "no_filter": ()}


def check_dynamic_sampling(config: PipelineConfig) -> list[ConfigIssue]:
    """Query filters, replacement prompts and the length knobs act in the sync RLVR loop
    (trainer.pipeline.dynamic_sampling); elsewhere they are refused or flagged."""
    issues = []
    filtering = []
    for name, reward in config.rewards.items():
        rule = reward.query_filter_config
        if rule is None:
            continue
        path = f"rewards.{name}.query_filter_config"
        unknown = sorted(set(rule.filter_args) - set(QUERY_FILTER_ARGS[rule.type]))
        if unknown:
            valid = ", ".join(QUERY_FILTER_ARGS[rule.type]) or "none"
            issues.append(error(f"{path}.filter_args", f"{', '.join(unknown)}: not read by {rule.type} "
                                f"(valid: {valid})"))
        if rule.type != "no_filter":
            filtering.append(name)
    if config.train_env_manager is not None:
        set_here = [f"rewards.{n}.query_filter_config" for n in filtering]
        set_here += [f"rewards.{n}.response_length_penalty_coef" for n, r in config.rewards.items()
                     if r.response_length_penalty_coef]
        set_here += ["is_use_additional_prompts"] * config.is_use_additional_prompts
        issues += [warning(path, "has no effect in the agentic pipeline (RLVR only)") for path in set_here]
        return issues
    if not config.is_use_additional_prompts:
        return issues
    if not filtering:
        issues.append(warning("is_use_additional_prompts", "has no effect: no rewards.<name>.query_filter_config "
                              "drops groups to replace (e.g. {type: std_filter, filter_args: {std_threshold: 0}})"))
    elif rollout_schedule(config).overlaps:
        issues.append(error("is_use_additional_prompts", f"replacement prompts are drawn in sync rollout only; "
                            f"rollout_mode {config.rollout_mode or 'from async_generation_ratio'} generates ahead "
                            "(set rollout_mode: sync, or drop it: filtered groups then just leave the loss)"))
    elif config.max_additional_running_prompts == 0:
        issues.append(warning("max_additional_running_prompts", "0: no replacement prompts are drawn; filtered "
                              "groups only leave the loss"))
    return issues
