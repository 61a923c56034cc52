"""The driver's side of profiler_timeline / profiler_memory (trainer.roles.profiling, docs/decisions/0037):
open the window on every rank of the computing groups before a step of profiler_steps, close it after the
step, and report each file written as a `profile` event."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from trainer import roles
from trainer.config import topology
from trainer.roles.profiling import ProfileSettings

if TYPE_CHECKING:
    from trainer.cluster.worker_group import Group
    from trainer.config.schema import PipelineConfig

def profiled_groups(cfg: PipelineConfig, groups: roles.RoleGroups) -> list[Group[roles.Role]]:
    """The groups of the roles whose calls compute with torch (topology.COMPUTING_ROLES); the rollout engine
    only as hf_infer (vLLM generates in its own engine processes, out of this process's profiler's sight)."""
    names = [r for r in topology.COMPUTING_ROLES if r in groups]
    if "actor_infer" in names and topology.strategy_name("actor_infer", cfg.actor_infer) != "hf_infer":
        names.remove("actor_infer")
    return [roles.group_named(groups, name) for name in names]


class StepProfiler:
    """`with profiler.step(k):` around step k of the loop; nothing at all unless profiling is on and k is in range."""

    def __init__(self, cfg: PipelineConfig, groups: roles.RoleGroups, emitter: Any) -> None:
        self.settings = ProfileSettings.from_config(cfg)
        self.groups = profiled_groups(cfg, groups) if self.settings is not None else []
        self.emitter = emitter

    @contextmanager
    def step(self, step: int) -> Iterator[None]:
        if self.settings is None or not self.settings.covers(step):
            yield
            return
        for group in self.groups:
            group.call_all(roles.Role.profile_step, step)
        yield  # a step that raises ends the run: its files stay on disk, unreported
        for group in self.groups:
            for written in group.call_all(roles.Role.profile_step, None):
                for data in written:
                    self.emitter.profile(data, step)
