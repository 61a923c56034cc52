"""Env groups as ROLL defines them, and the episodes one rollout batch plays (torch-free).

Layout (`train_env_manager` / `val_env_manager`): `env_groups` groups of `group_size` environments,
env_id = group_id × group_size + k. Tag t (`tags`) gets `n_groups[t]` consecutive groups; unset,
env_groups is split evenly over the tags, the first tags taking the remainder.

A batch of B trajectories (rollout_batch_size for training, val_batch_size for evaluation) is played
in rounds: in round e every environment plays its e-th episode, so

    rounds = ceil(B / (env_groups × group_size)),   which must not exceed max_traj_per_env (when ≥ 0)

and the batch is the first B episodes in (round, env_id) order. Every environment of one group
starts round e from the same seed, so their trajectories share a start state and form one comparison
group (`state_id` = e × env_groups + group_id) for group-relative advantages and the `state`
normalisation grouping. B must be a multiple of group_size, so no group is cut.

Seeds: derive_seed(seed, name, step, group_id, e). Evaluation passes step=None: every evaluation
replays the same start states, so its numbers compare across steps.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trainer.config.registries import native_manager_refusal
from trainer.config.roll_env_config import agent_runner_refusal, episode_turns, split_roll_env_config
from trainer.config.roll_tools import split_tool_wrapper
from trainer.envs.agent_runner import DEFAULT_MAX_RESPONSE_LENGTH, GEMRunner
from trainer.envs.base import Env
from trainer.envs.gem_tools import wrap
from trainer.envs.registry import env_manager_kind, make_env

if TYPE_CHECKING:
    from trainer.config.schema import CustomEnvConfig, EnvManagerConfig

def derive_seed(*parts: object) -> int:
    """A 31-bit seed from any parts (blake2b of their text): stable across processes and platforms."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


def group_tags(tags: list[str], env_groups: int, n_groups: list[int] | None) -> list[str]:
    """The tag of each group: n_groups[t] consecutive groups per tag, else an even split (the first
    env_groups mod len(tags) tags take one group more)."""
    if not tags:
        raise ValueError("tags: no environment tag (name a key of custom_envs)")
    if n_groups is None:
        share, extra = divmod(env_groups, len(tags))
        n_groups = [share + (i < extra) for i in range(len(tags))]
    if len(n_groups) != len(tags) or sum(n_groups) != env_groups:
        raise ValueError(f"n_groups: {n_groups} must give each of the {len(tags)} tags its groups, "
                         f"summing to env_groups = {env_groups}")
    return [tag for tag, count in zip(tags, n_groups, strict=True) for _ in range(count)]


def rounds_needed(batch_size: int, num_envs: int, max_traj_per_env: int) -> int:
    """ceil(batch / environments), refused when beyond max_traj_per_env (≥ 0; −1: no limit)."""
    rounds = math.ceil(batch_size / num_envs)
    if 0 <= max_traj_per_env < rounds:
        raise ValueError(f"max_traj_per_env: {max_traj_per_env}, but {batch_size} trajectories from "
                         f"{num_envs} environments need {rounds} per environment; raise it (or -1) or add "
                         "env_groups")
    return rounds


@dataclass(frozen=True)
class TurnLimits:
    max_turns: int  # replies before the episode is cut off (max_steps)
    max_actions: int | None  # valid actions before it is cut off (max_actions_per_traj)
    max_new_tokens: int | None  # tokens sampled per turn (max_tokens_per_step); None: the role's


def proxy_runner(spec: CustomEnvConfig, tag: str, max_turns: int) -> GEMRunner:
    """The agent runner of a tag the proxy env manager plays (max_steps: the episode's reply limit); ValueError
    naming the field and the override when it cannot (trainer.config.roll_env_config.agent_runner_refusal)."""
    refusal = agent_runner_refusal(spec, tag)
    if refusal is not None:
        raise ValueError(f"{refusal[0]}: {refusal[1]}")
    assert spec.agent_system_template is not None and spec.agent_template is not None
    return GEMRunner(spec.agent_system_template, spec.agent_template, max_turns,
                     spec.max_tokens_per_step or DEFAULT_MAX_RESPONSE_LENGTH)


def turn_limits(spec: CustomEnvConfig) -> TurnLimits:
    """episode_turns replies (max_steps, else max_actions_per_traj, else the default), per-turn limits."""
    return TurnLimits(episode_turns(spec), spec.max_actions_per_traj, spec.max_tokens_per_step)


@dataclass(frozen=True)
class Episode:
    env_id: int
    group_id: int
    sample_index: int  # k: the environment's place in its group
    round: int
    tag: str
    seed: int
    state_id: int  # round × env_groups + group_id: equal exactly for equal start states


class EnvManager:
    """The environments of one env manager (module docstring): layout, episodes, turn limits, and
    `position`, the training episodes drawn so far (the run ledger's stream position)."""

    def __init__(self, name: str, manager: EnvManagerConfig, custom_envs: dict[str, CustomEnvConfig], *,
                 batch_size: int, seed: int, parse_tool_call_parameter_to_dict: bool = False) -> None:
        self.name, self.seed, self.batch_size = name, seed, batch_size
        # pipeline-level keys the environments that take them receive (trainer.envs.registry.PIPELINE_KEYS)
        self.pipeline = {"parse_tool_call_parameter_to_dict": parse_tool_call_parameter_to_dict}
        self.position = 0
        default_kind = env_manager_kind(manager.worker_cls, where=f"{name}.worker_cls")
        missing = [tag for tag in manager.tags if tag not in custom_envs]
        if missing:
            raise ValueError(f"{name}.tags: {missing} are not defined in custom_envs "
                             f"({', '.join(custom_envs) or 'empty'})")
        try:
            self.tags = group_tags(list(manager.tags), manager.env_groups, manager.n_groups)
            num_envs = manager.env_groups * manager.group_size
            self.rounds = rounds_needed(batch_size, num_envs, manager.max_traj_per_env)
        except ValueError as exc:
            raise ValueError(f"{name}.{exc}") from None
        if batch_size % manager.group_size:
            raise ValueError(f"{name}.group_size: {manager.group_size} does not divide the batch of "
                             f"{batch_size} trajectories, which would cut a group")
        self.group_size, self.env_groups = manager.group_size, manager.env_groups
        self.format_penalty = manager.format_penalty
        self.format_penalties: dict[str, float] = {}
        self.specs = {tag: custom_envs[tag] for tag in manager.tags}
        for tag in self.specs:  # a bad env_type or env_config fails now, not at the first rollout
            self.make_env(tag)
        # ROLL: a custom env's env_manager_cls names the manager that plays it, else the manager's worker_cls
        kinds = {tag: default_kind if spec.env_manager_cls is None else
                 env_manager_kind(spec.env_manager_cls, where=f"custom_envs.{tag}.env_manager_cls")
                 for tag, spec in self.specs.items()}
        # the proxy manager plays one conversation per row too: it mixes with the trajectory manager
        if len({"trajectory" if kind == "proxy" else kind for kind in kinds.values()}) > 1:
            raise ValueError(f"{name}.tags: {kinds} mix step-wise and trajectory env managers in one batch; give "
                             "every tag of one env manager the same env_manager_cls")
        for tag, kind in kinds.items():  # the agent-native manager plays exactly the environments keeping messages
            refusal = native_manager_refusal(tag, self.specs[tag].env_type, kind == "native")
            if refusal is not None:
                raise ValueError(f"{refusal[0]}: {refusal[1]}")
        self.step_wise = set(kinds.values()) <= {"step", "step_concat", "native"}
        self.step_concat = set(kinds.values()) == {"step_concat"}  # StepConcatEnvManager's prompt (trajectory.py)
        # ProxyEnvManager: the tag's agent runner writes the prompts (trainer.envs.agent_runner, decision 0060)
        self.runners = {tag: proxy_runner(self.specs[tag], tag, self.limits(tag).max_turns)
                        for tag, kind in kinds.items() if kind == "proxy"}

    def make_env(self, tag: str) -> Env:
        spec = self.specs[tag]
        options, penalty = split_roll_env_config(spec.env_type, spec.env_config, tag=tag,
                                                 episode_turns=self.limits(tag).max_turns)
        if penalty is not None:  # ROLL's environment-level format_penalty (trainer.config.roll_env_config)
            self.format_penalties[tag] = penalty
        env = make_env(spec.env_type, options, where=f"custom_envs.{tag}.env_type", pipeline=self.pipeline)
        if spec.tool_wrapper is None:
            return env
        wrapper_args, tool_configs = split_tool_wrapper(spec.tool_wrapper, tag=tag)  # ROLL's tools around it
        try:
            return wrap(env, wrapper_args, tool_configs)
        except ValueError as exc:
            raise ValueError(f"custom_envs.{tag}.tool_wrapper: {exc}; without it the environment plays without "
                             f"tools: override ~custom_envs.{tag}.tool_wrapper") from None

    def penalty(self, tag: str) -> float:
        """The reward added to a reply of `tag`'s environment that breaks the action format: the environment's
        format_penalty, else the env manager's (ROLL's ProxyEnvManager never reads it: 0, ROLL's env default)."""
        return self.format_penalties.get(tag, 0.0 if tag in self.runners else self.format_penalty)

    def runner(self, tag: str) -> GEMRunner | None:
        """The agent runner that writes `tag`'s prompts (ProxyEnvManager), None for the other managers."""
        return self.runners.get(tag)

    def instruction(self, tag: str, env: Env) -> str:
        """The config's env_instruction when set (even empty), else the environment's own."""
        given = self.specs[tag].env_instruction
        return env.instruction if given is None else given

    def limits(self, tag: str) -> TurnLimits:
        return turn_limits(self.specs[tag])

    def history_length(self, tag: str) -> int | None:
        """Step-wise play's history_length (ROLL: unset shows no history, as 1 does); None: trajectory play."""
        return (self.specs[tag].history_length or 1) if self.step_wise else None

    def episodes(self, step: int | None) -> list[Episode]:
        """The batch's episodes in (round, env_id) order; step None: evaluation's fixed start states."""
        out: list[Episode] = []
        for e in range(self.rounds):
            for env_id in range(self.env_groups * self.group_size):
                if len(out) == self.batch_size:
                    return out
                group = env_id // self.group_size
                seed = derive_seed(self.seed, self.name, step, group, e)
                out.append(Episode(env_id, group, env_id % self.group_size, e, self.tags[group], seed,
                                   e * self.env_groups + group))
        return out

    def draw(self, step: int) -> list[Episode]:
        """The training episodes of `step`; advances `position`."""
        episodes = self.episodes(step)
        self.position += len(episodes)
        return episodes

    def next_batch(self) -> list[int]:
        """The stream positions of the next training batch (the async producer's sampler interface: batch j's
        episodes are `episodes(j)`, whatever the position); advances `position`."""
        drawn = list(range(self.position, self.position + len(self.episodes(0))))
        self.position += len(drawn)
        return drawn

    def layout(self) -> dict[str, Any]:
        return {"name": self.name, "tags": self.tags, "group_size": self.group_size,
                "batch_size": self.batch_size}

    def state_dict(self) -> dict[str, Any]:
        return {**self.layout(), "position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `position`; refuses a checkpoint taken with another layout (its episodes would differ)."""
        saved = {k: v for k, v in state.items() if k != "position"}
        if saved != self.layout():
            raise ValueError(f"{self.name}: the checkpoint was taken with env layout {saved}, this config "
                             f"has {self.layout()}; resume with the same env groups, tags and batch size")
        self.position = int(state["position"])
