"""The roles of an RL run, and the typed interface the loop calls them by.

Each role is a plain class constructed with `(role, cfg, rank, world_size)`; the same class runs in
the driver process (`LocalWorkerGroup`) or as a Ray actor per rank (`WorkerGroup`). The loop names a
role's method by reference to the role's Protocol below (`group.call_sharded(Actor.train_step,
batch, step=step)`), so a reader and a type checker can follow every call to its implementation:

    actor_train  trainer.roles.actor.ActorTrainWorker     Actor      (its loss: actor_loss, beside it)
    critic       trainer.roles.critic.CriticWorker        Critic     (critic_loss, beside it)
    reference    trainer.roles.reference.ReferenceWorker  Reference
    actor_infer  trainer.roles.rollout.ActorInferWorker   Rollout
    reward       trainer.roles.reward.RewardWorker        Reward
    reward_model trainer.roles.judge_server.JudgeServerWorker  JudgeServer (the judge group cluster judges ask)

Batches are dicts of CPU tensors laid out as in trainer.models.batch; a worker only sees its shard.
Each method declares how a group calls it (`@dispatch`): a group refuses another call mode, so the loop cannot
train every rank on the whole batch by writing `call_all` for `call_sharded`.
The loop holds its groups as `RoleGroups`, each typed by its role's Protocol (`WorkerGroup[Actor]`), so a type
checker refuses a method of another role (`groups["actor_infer"].call_all(Actor.train_step, …)`) and knows
what a call returns.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol, TypedDict, cast

import torch
from torch import Tensor

from trainer.cluster.worker_group import Group, dispatch
from trainer.roles.actor import ActorTrainWorker
from trainer.roles.common import needs_process_group
from trainer.roles.critic import CriticWorker
from trainer.roles.judge_server import JudgeServerWorker
from trainer.roles.reference import ReferenceWorker
from trainer.roles.reward import JudgeServer, RewardWorker
from trainer.roles.rollout import ActorInferWorker
from trainer.rollout.base import Generation, SamplingParams


class Role(Protocol):
    """What every role answers."""

    @dispatch("all")
    def ping(self) -> str: ...

    @dispatch("all")
    def save_rng(self, path: str) -> None: ...

    @dispatch("all")
    def load_rng(self, path: str) -> None: ...

    @dispatch("all")
    def profile_step(self, step: int | None) -> list[dict[str, Any]]: ...


class Trained(Role, Protocol):
    """actor_train and critic: one PPO update per rollout; checkpoints of model, optimizer and RNG."""

    @dispatch("sharded")
    def train_step(self, batch: dict[str, Tensor], step: int) -> dict[str, float]: ...

    @dispatch("all")
    def save_checkpoint(self, path: str) -> None: ...

    @dispatch("all")
    def load_checkpoint(self, path: str) -> dict[str, int | None]: ...


class Actor(Trained, Protocol):
    @dispatch("sharded")
    def compute_log_probs(self, batch: dict[str, Tensor]) -> Tensor: ...

    @dispatch("rank0")
    def weight_buckets(self, device: str, dtype: torch.dtype, bucket_bytes: int) -> Iterator[dict[str, Tensor]]: ...

    def full_state_dict(self) -> dict[str, Tensor]: ...

    @dispatch("all")
    def engine_weights(self) -> dict[str, Tensor]: ...

    @dispatch("all")
    def save_hf(self, path: str, tokenizer_path: str) -> None: ...


class Critic(Trained, Protocol):
    @dispatch("sharded")
    def compute_values(self, batch: dict[str, Tensor]) -> Tensor: ...


class Reference(Role, Protocol):
    @dispatch("sharded")
    def compute_log_probs(self, batch: dict[str, Tensor]) -> Tensor: ...


class Rollout(Role, Protocol):
    @dispatch("sharded")
    def generate(self, batch: dict[str, Any], params: SamplingParams) -> list[Generation]: ...

    @dispatch("all")
    def load_weights(self, state_dict: Mapping[str, Tensor]) -> None: ...

    @dispatch("rank0")
    def weight_format(self) -> tuple[str, torch.dtype]: ...

    @dispatch("all")
    def sleep(self) -> None: ...

    @dispatch("all")
    def wake(self) -> None: ...


class Reward(Role, Protocol):
    @dispatch("rank0")
    def score(self, batch: dict[str, Any]) -> list[float]: ...


class RoleGroups(TypedDict, total=False):
    """The run's worker groups by role name, each typed by its role's Protocol (a plain dict at run time)."""

    actor_train: Group[Actor]
    actor_infer: Group[Rollout]
    reference: Group[Reference]
    critic: Group[Critic]
    reward: Group[Reward]
    reward_model: Group[JudgeServer]


def group_named(groups: RoleGroups, role: str) -> Group[Any]:
    """`groups[role]` for a role named at run time (a loop over topology's role tuples): a TypedDict is
    indexed by literal keys only, so such a call's role is not checked by mypy (its result type still is);
    the dispatch check at call time is the same."""
    return cast(Mapping[str, Any], groups)[role]


WORKER_CLASSES: dict[str, type] = {
    "actor_train": ActorTrainWorker,
    "actor_infer": ActorInferWorker,
    "reference": ReferenceWorker,
    "critic": CriticWorker,
    "reward": RewardWorker,
    "reward_model": JudgeServerWorker,
}
ROLE_PROTOCOLS: dict[str, type] = {
    "actor_train": Actor,
    "actor_infer": Rollout,
    "reference": Reference,
    "critic": Critic,
    "reward": Reward,
    "reward_model": JudgeServer,
}

__all__ = ["ROLE_PROTOCOLS", "WORKER_CLASSES", "Actor", "Critic", "JudgeServer", "Reference", "Reward", "Role",
           "RoleGroups", "Rollout", "Trained", "group_named", "needs_process_group"]
