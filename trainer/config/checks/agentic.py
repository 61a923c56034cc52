"""Agentic runs: environment managers, custom environments, tool calls and the step-wise estimators."""

from __future__ import annotations

import difflib
import math
import typing
from typing import Any

from trainer.config.checks.common import NOT_BUILT, error, warning
from trainer.config.checks.gem_envs import gem_env_issues
from trainer.config.issues import ConfigIssue
from trainer.config.registries import (
    ENV_CONFIG_KEYS,
    ENV_TYPES,
    NATIVE_ENV_MANAGER,
    NATIVE_ENV_TYPES,
    PROXY_ENV_MANAGER,
    ROLL_DATASET_ENVS,
    ROLL_ENV_MANAGERS,
    ROLL_UNSUPPORTED_ENV_MANAGERS,
    TOOL_CALL_ENV_TYPES,
    native_manager_refusal,
)
from trainer.config.roll_env_config import (
    agent_runner_refusal,
    env_config_range_errors,
    episode_turns,
    split_roll_env_config,
)
from trainer.config.schema import AGENTIC_ADV_ESTIMATORS, UNBUILT_ADV_ESTIMATORS, PipelineConfig
from trainer.config.topology import lengths, rollout_schedule

NEAREST_ENV = {"sokoban_sandbox": "sokoban", "sokoban_native_env": "sokoban"}


def check_agentic(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    for name in ("train_env_manager", "val_env_manager"):
        manager = getattr(config, name)
        if manager is None:
            continue
        if not manager.tags:
            issues.append(error(f"{name}.tags", f"empty: name the environments to play (keys of custom_envs: "
                                f"{', '.join(config.custom_envs) or 'none defined'})"))
        missing = [tag for tag in manager.tags if tag not in config.custom_envs]
        if missing:
            issues.append(
                error(f"{name}.tags", f"{missing} are not defined in custom_envs ({', '.join(config.custom_envs) or 'empty'})")
            )
        if manager.n_groups is not None:
            if len(manager.n_groups) != len(manager.tags):
                issues.append(error(f"{name}.n_groups", f"needs one entry per tag ({len(manager.tags)} tags)"))
            elif sum(manager.n_groups) != manager.env_groups:
                issues.append(
                    error(f"{name}.n_groups", f"sums to {sum(manager.n_groups)} but env_groups is {manager.env_groups}")
                )
        batch = ("rollout_batch_size", config.rollout_batch_size) if name == "train_env_manager" \
            else ("val_batch_size", config.val_batch_size)
        issues += _env_manager_issues(name, manager, *batch)
    issues += _custom_env_issues(config)
    issues += _native_manager_issues(config)
    issues += _agentic_mode_issues(config)
    issues += _tool_call_issues(config)
    issues += gem_env_issues(config)  # roll_math / roll_qa data, tool_wrapper
    return issues


def _env_manager_issues(name: str, manager: Any, batch_name: str, batch: int) -> list[ConfigIssue]:
    """The batch fills whole groups, within max_traj_per_env episodes per environment (trainer.envs.manager)."""
    issues = []
    if batch % manager.group_size:
        issues.append(error(f"{name}.group_size", f"{manager.group_size} does not divide {batch_name} = {batch} "
                            "trajectories, which would cut a group of equal start states"))
    rounds = math.ceil(batch / (manager.env_groups * manager.group_size))
    if 0 <= manager.max_traj_per_env < rounds:
        issues.append(error(f"{name}.max_traj_per_env", f"{manager.max_traj_per_env}, but {batch_name} = {batch} "
                            f"trajectories from {manager.env_groups * manager.group_size} environments need "
                            f"{rounds} each; raise it (or -1), or add env_groups"))
    if manager.worker_cls is not None and manager.worker_cls not in ROLL_ENV_MANAGERS:
        what = ROLL_UNSUPPORTED_ENV_MANAGERS.get(manager.worker_cls)
        close = difflib.get_close_matches(manager.worker_cls, list(ROLL_ENV_MANAGERS), n=1, cutoff=0.6)
        why = f"the {what} is not supported yet" if what else \
            f"unknown env manager class{f'; did you mean {close[0]}?' if close else ''}"
        issues.append(error(f"{name}.worker_cls", f"{why}; known: {', '.join(ROLL_ENV_MANAGERS)} "
                            "(classes are looked up by name, never imported)"))
    return issues


def _custom_env_issues(config: PipelineConfig) -> list[ConfigIssue]:
    issues = []
    turn_default = (config.actor_infer.generating_args.max_new_tokens if config.actor_infer.generating_args
                    else None) or config.response_length
    capped = lengths(config).trajectory_cap is not None
    for tag, env in config.custom_envs.items():
        if env.env_type in ROLL_DATASET_ENVS:
            dataset = env.env_config.get("dataset_name")
            issues.append(ConfigIssue(f"custom_envs.{tag}.env_type", f"{env.env_type!r} "
                                      f"({ROLL_DATASET_ENVS[env.env_type]}) {NOT_BUILT}: it loads the Hugging Face "
                                      f"dataset {dataset!r} (env_config.dataset_name) through ROLL's Ray dataset "
                                      "actor, which is not built here; built GEM environments: "
                                      f"{', '.join(t for t in ENV_TYPES if ':' in t)}", kind="not_built"))
        elif env.env_type not in ENV_TYPES:
            near = NEAREST_ENV.get(env.env_type)
            fix = (f"; the same game runs as the built {near} environment: override custom_envs.{tag}.env_type={near}"
                   if near in ENV_TYPES else "")
            if env.env_manager_cls == NATIVE_ENV_MANAGER:  # the manager is built; the environment is what is missing
                fix += (f"; the agent-native step env manager it names is built and plays "
                        f"{', '.join(NATIVE_ENV_TYPES)} (environments that keep their own conversation)")
            issues.append(error(f"custom_envs.{tag}.env_type", f"{env.env_type!r} is not a registered environment; "
                                f"valid: {', '.join(ENV_TYPES)}{fix}"))
        cls = env.env_manager_cls
        if cls is not None and cls not in ROLL_ENV_MANAGERS:
            what = ROLL_UNSUPPORTED_ENV_MANAGERS.get(cls, "env manager")
            issues.append(ConfigIssue(f"custom_envs.{tag}.env_manager_cls", f"the {what} ({cls}) {NOT_BUILT}; "
                                      "built: TrajEnvManager (one conversation per row) and StepEnvManager; the "
                                      f"trajectory manager plays {tag}: override ~custom_envs.{tag}.env_manager_cls",
                                      kind="not_built"))
        if tag in proxy_tags(config):
            refusal = agent_runner_refusal(env, tag)
            if refusal is not None:
                path, message, not_built = refusal
                issues.append(ConfigIssue(path, message, kind="not_built") if not_built else error(path, message))
        turn = env.max_tokens_per_step or turn_default
        if not capped and turn > config.response_length:  # capped: ROLL trims each turn to the room left
            issues.append(error(f"custom_envs.{tag}.max_tokens_per_step", f"{turn} tokens per turn exceed "
                                f"response_length = {config.response_length}, which holds every turn of a trajectory; "
                                f"override custom_envs.{tag}.max_tokens_per_step={config.response_length}"))
        elif turn == config.response_length and config.train_env_manager is not None:
            issues.append(warning(f"custom_envs.{tag}.max_tokens_per_step", "unset, so each turn may take all of "
                                  "response_length and a trajectory has room for one turn; set it"))
    # what the played environments would refuse when built (ROLL's env_config keys: trainer.config.roll_env_config)
    return issues + [error(path, message) for path, message in env_config_errors(config)]


def _native_manager_issues(config: PipelineConfig) -> list[ConfigIssue]:
    """The agent-native manager plays exactly the environments that keep their own conversation
    (registries.native_manager_refusal); a tag's manager is its env_manager_cls, else its env manager's worker_cls."""
    found: dict[str, str] = {}
    for manager in [m for m in (config.train_env_manager, config.val_env_manager) if m is not None]:
        for tag in manager.tags:
            spec = config.custom_envs.get(tag)
            if spec is None:
                continue
            cls = spec.env_manager_cls or manager.worker_cls
            refusal = native_manager_refusal(tag, spec.env_type, cls == NATIVE_ENV_MANAGER)
            if refusal is not None:
                found.setdefault(*refusal)
    return [error(path, message) for path, message in found.items()]


def proxy_tags(config: PipelineConfig) -> set[str]:
    """The custom envs ROLL's ProxyEnvManager plays: env_manager_cls names it, or it is unset and the worker_cls of
    an env manager playing the tag does (trainer.envs.manager)."""
    tags = {tag for tag, env in config.custom_envs.items() if env.env_manager_cls == PROXY_ENV_MANAGER}
    for manager in (config.train_env_manager, config.val_env_manager):
        if manager is not None and manager.worker_cls == PROXY_ENV_MANAGER:
            tags |= {tag for tag in manager.tags
                     if tag in config.custom_envs and config.custom_envs[tag].env_manager_cls is None}
    return tags


def env_config_errors(config: PipelineConfig) -> list[tuple[str, str]]:
    """(field, message) for each env_config of a played environment (a tag of an env manager) that its environment
    would refuse when built: a ROLL value not built (trainer.config.roll_env_config) or a key the environment does
    not take, each naming the override that removes it; a value out of its declared type or range
    (registries.ENV_CONFIG_BOUNDS, which the environments assert when built), naming the nearest valid value."""
    played = {tag for m in (config.train_env_manager, config.val_env_manager) if m is not None for tag in m.tags}
    out = []
    for tag in sorted(played):
        spec = config.custom_envs.get(tag)
        if spec is None or spec.env_type not in ENV_CONFIG_KEYS:
            continue  # reported as an unknown tag or env_type
        where = f"custom_envs.{tag}.env_config"
        ranges = env_config_range_errors(spec.env_type, spec.env_config, tag=tag)
        out += ranges
        try:
            options, _ = split_roll_env_config(spec.env_type, spec.env_config, tag=tag, episode_turns=episode_turns(spec))
        except ValueError as exc:
            path, _, message = str(exc).partition(": ")
            out += [(path, message)] if path not in dict(ranges) else []  # e.g. max_steps 0: its range says why
            continue
        valid = ENV_CONFIG_KEYS[spec.env_type]
        out += [(f"{where}.{key}", f"not a setting of the built {spec.env_type} environment (valid: {', '.join(valid)}); "
                 f"it is not built in this version of PolicyLab; without it the environment plays as its own "
                 f"settings say: override ~{where}.{key}") for key in sorted(set(options) - set(valid))]
    return out


def _tool_call_issues(config: PipelineConfig) -> list[ConfigIssue]:
    """parse_tool_call_parameter_to_dict acts only on the tool-calling environments an agentic run plays."""
    if not config.parse_tool_call_parameter_to_dict:
        return []
    managers = [m for m in (config.train_env_manager, config.val_env_manager) if m is not None]
    types = {config.custom_envs[tag].env_type for m in managers for tag in m.tags if tag in config.custom_envs}
    if types & set(TOOL_CALL_ENV_TYPES):
        return []
    return [warning("parse_tool_call_parameter_to_dict", "unused: no environment played takes tool calls "
                    f"(env_type {', '.join(TOOL_CALL_ENV_TYPES)} of an agentic run)")]


def _agentic_mode_issues(config: PipelineConfig) -> list[ConfigIssue]:
    """What the agentic pipeline does without, and agentic knobs set for an RLVR run."""
    if config.train_env_manager is None:
        unused = [(path, getattr(config, path)) for path in ("val_env_manager", "reward_normalization",
                                                              "render_save_dir")]
        return [warning(path, "unused: only the agentic pipeline reads it (set train_env_manager)")
                for path, value in unused if value is not None]
    issues = []
    schedule = rollout_schedule(config)
    if schedule.mode == "async":  # one_step_off is built (RLVRPipeline's producer plays the next batch)
        issues.append(error("rollout_mode", f"async (lookahead {schedule.lookahead}): the agentic pipeline builds "
                            "rollout_mode sync and one_step_off only (async_generation_ratio 0 or 1); "
                            "override async_generation_ratio=1"))
    if config.difficulty_loss_weight:
        issues.append(error("difficulty_loss_weight", "needs a `difficulty` per prompt; agentic runs have none"))
    if config.num_return_sequences_in_group != 1:
        issues.append(warning("num_return_sequences_in_group", "unused by the agentic pipeline: "
                              "train_env_manager.group_size sets how many trajectories share a start state"))
    if config.rewards:
        issues.append(warning("rewards", "unused by the agentic pipeline: its environments give the rewards"))
    return issues


# the knobs each step-wise estimator reads (trainer.algorithms.step_advantages)
STEP_ESTIMATOR_KNOBS = {"episode_reward_weight": ("gigpo",), "step_reward_weight": ("gigpo",),
                        "step_reward_gamma": ("gigpo", "step_reinforce")}
# the RLVR reward processing of a trajectory's score (rewarding.process_scores), which gigpo and
# step_reinforce replace by per-turn values
SCORE_PROCESSING_KNOBS = ("reward_clip", "add_len_reward", "norm_mean_type", "norm_std_type", "reward_shift",
                          "reward_scale", "use_reward_scaling", "use_reward_norm")


def check_step_estimators(config: PipelineConfig) -> list[ConfigIssue]:
    """ROLL's step-wise estimators (gigpo, step_reinforce, agentic_reinforce) score the turns of agentic
    trajectories: refused for RLVR runs; their knobs set where nothing reads them; what they do not read."""
    estimator, issues = config.adv_estimator, []
    for knob, readers in STEP_ESTIMATOR_KNOBS.items():
        if estimator not in readers and getattr(config, knob) != PipelineConfig.model_fields[knob].default:
            issues.append(warning(knob, f"unused: adv_estimator {estimator} does not read it "
                                  f"(adv_estimator {' / '.join(readers)} does)"))
    if estimator not in AGENTIC_ADV_ESTIMATORS:
        return issues
    if config.train_env_manager is None:
        valid = [e for e in typing.get_args(PipelineConfig.model_fields["adv_estimator"].annotation)
                 if e not in AGENTIC_ADV_ESTIMATORS and e not in UNBUILT_ADV_ESTIMATORS]
        return [*issues, error("adv_estimator", f"{estimator} gives each turn of a multi-turn trajectory its own "
                               "advantage: agentic runs only (set train_env_manager); for this RLVR run valid: "
                               f"{', '.join(valid)}")]
    if estimator == "gigpo" and config.episode_reward_weight == 0 and config.step_reward_weight == 0:
        issues.append(error("step_reward_weight", "gigpo with episode_reward_weight 0 and step_reward_weight 0 "
                            "gives every turn the advantage 0; set either above 0"))
    if estimator == "agentic_reinforce":
        return issues
    norm = config.reward_normalization
    if norm is None or (norm.method == "identity" and norm.norm_mean_type is None and norm.norm_std_type is None):
        what = "episode scores and step returns" if estimator == "gigpo" else "step returns"
        issues.append(warning("reward_normalization.method" if norm is not None else "reward_normalization",
                              f"identity: {estimator} then uses the raw {what}, with no group baseline (ROLL's "
                              "GiGPO examples set grouping traj_group_id, i.e. state, and method mean; ROLL main "
                              "sets norm_mean_type / norm_std_type)"))
    for knob in SCORE_PROCESSING_KNOBS:
        if getattr(config, knob) not in (None, False, "none"):
            issues.append(warning(knob, f"has no effect with adv_estimator {estimator}: it processes the trajectory "
                                  "score, and this estimator scores each turn from its step rewards instead "
                                  "(reward_normalization normalises those)"))
    return issues
