"""Set up and run one RLVR training run: config -> model dirs -> telemetry -> worker groups -> loop.

``run_training`` never raises for a failed run: it emits ``status: failed`` (with the error) and
returns exit code 1, so the platform sees a terminal state even when a worker died.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.pipeline.models import materialise_tiny_models, policy_path

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig

EXIT_OK, EXIT_FAILED = 0, 1


@dataclass
class RunIdentity:
    run_id: str
    attempt: int = 1
    events_redis: str | None = None

    @classmethod
    def from_env(cls, cfg: PipelineConfig, run_id: str | None = None, attempt: int | None = None,
                 events_redis: str | None = None) -> RunIdentity:
        """CLI flags first, then POLICYLAB_RUN_ID / _ATTEMPT / _EVENTS_REDIS_URL, then exp_name."""
        return cls(
            run_id=run_id or os.environ.get("POLICYLAB_RUN_ID") or cfg.exp_name,
            attempt=int(attempt or os.environ.get("POLICYLAB_ATTEMPT") or 1),
            events_redis=events_redis or os.environ.get("POLICYLAB_EVENTS_REDIS_URL") or None,
        )


def roles_in_use(cfg: PipelineConfig) -> list[str]:
    """Worker roles this config needs, in construction order."""
    roles = ["actor_train", "actor_infer"]
    if cfg.reference is not None or cfg.use_kl_loss or cfg.add_token_level_kl:
        roles.append("reference")
    if cfg.critic is not None or cfg.adv_estimator == "gae":
        if cfg.critic is None:
            raise ValueError("critic: adv_estimator 'gae' needs a critic section")
        roles.append("critic")
    roles.append("reward")
    return roles


def _with_reference_default(cfg: PipelineConfig) -> Any:
    """A KL setting without a reference section uses the initial policy as the reference."""
    if cfg.reference is None and (cfg.use_kl_loss or cfg.add_token_level_kl):
        from trainer.config.schema import WorkerConfig

        cfg.reference = WorkerConfig(model_args=cfg.actor_train.model_args.model_copy())
    return cfg


def build_groups(cfg: PipelineConfig, roles: list[str], backend: str) -> dict[str, Any]:
    """One worker group per role: Ray actors placed by device_mapping, or in-process (``local``)."""
    from trainer.cluster.workers import WORKER_CLASSES, strategy_name

    groups: dict[str, Any] = {}
    if backend == "local":
        from trainer.cluster.worker_group import LocalWorkerGroup

        for role in roles:
            section = getattr(cfg, role, None)
            sharded = section is not None and strategy_name(section, "") == "fsdp2_train"
            groups[role] = LocalWorkerGroup(WORKER_CLASSES[role], role, init_args=(cfg,), distributed=sharded)
        return groups

    from trainer.cluster.resources import plan_resource_pools
    from trainer.cluster.worker_group import LocalWorkerGroup, WorkerGroup

    ensure_ray()
    pools = plan_resource_pools(cfg)
    for role in roles:
        if role == "reward":  # rule rewards are cheap, pure Python: scored in the driver
            groups[role] = LocalWorkerGroup(WORKER_CLASSES[role], role, init_args=(cfg,))
            continue
        distributed = role in ("actor_train", "critic") and pools[role].placement(role).world_size > 1
        env_vars = {**cfg.system_envs, **getattr(cfg, role).system_envs}
        groups[role] = WorkerGroup(WORKER_CLASSES[role], role, pools[role], init_args=(cfg,),
                                   distributed=distributed, env_vars=env_vars, timeout_s=cfg.rpc_timeout)
    return groups


def ensure_ray() -> None:
    """Join $RAY_ADDRESS (a Ray job's cluster) or start a private local head (never another user's
    cluster on this machine) with room for every role's actor on a small machine: more logical
    CPUs than cores, since the roles take turns anyway."""
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    address = os.environ.get("RAY_ADDRESS") or None
    if address:
        ray.init(address=address, log_to_driver=True)
        return
    os.environ.setdefault("RAY_USE_RANDOM_PORTS", "1")  # stay out of 10002-19999 (ENVIRONMENT.md)
    ray.init(address="local", num_cpus=max(8, os.cpu_count() or 1), include_dashboard=False,
             log_to_driver=True, object_store_memory=512 * 1024**2)


def run_training(cfg: PipelineConfig, identity: RunIdentity, *, backend: str = "ray",
                 log: Callable[[str], None] | None = None) -> int:
    """Run the whole training; returns the process exit code (0 ok, 1 failed)."""
    from trainer.pipeline.telemetry import open_emitter

    Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
    emitter = open_emitter(cfg, identity)
    say = log or (lambda line: print(line, flush=True))
    groups: dict[str, Any] = {}
    try:
        emitter.status("starting", step=0, total_steps=cfg.max_steps)
        pipeline = prepare_pipeline(cfg, emitter, backend=backend, log=say, groups=groups)
        pipeline.run()
    except BaseException as exc:  # a worker crash, a bad value found late, Ctrl-C: always a terminal state
        message = f"{type(exc).__name__}: {exc}"
        emitter.log("error", traceback.format_exc())
        emitter.status("failed", step=emitter.step, total_steps=cfg.max_steps, message=message)
        print(f"training failed: {message}", file=sys.stderr, flush=True)
        emitter.close()
        _shutdown(groups)
        if isinstance(exc, KeyboardInterrupt):
            raise
        return EXIT_FAILED
    emitter.status("succeeded", step=pipeline.step, total_steps=cfg.max_steps, eta_s=0.0)
    emitter.close()
    _shutdown(groups)
    return EXIT_OK


def prepare_pipeline(cfg: PipelineConfig, emitter: Any, *, backend: str, log: Callable[[str], None],
                     groups: dict[str, Any]) -> Any:
    """Build models, data and worker groups (filled into ``groups`` so the caller can shut them down)."""
    from transformers.utils import logging as hf_logging

    from trainer.data.datasets import load_prompt_dataset
    from trainer.data.sampler import PromptSampler
    from trainer.models.loading import load_tokenizer
    from trainer.pipeline.rlvr import RLVRPipeline

    hf_logging.disable_progress_bar()
    cfg = _with_reference_default(materialise_tiny_models(cfg))
    roles = roles_in_use(cfg)
    tokenizer = load_tokenizer(policy_path(cfg))
    data_args = cfg.actor_train.data_args
    if data_args is None:
        raise ValueError("actor_train.data_args: no training data (set file_name or synthetic)")
    train = load_prompt_dataset(data_args, tokenizer, prompt_length=cfg.prompt_length, split="train")
    eval_args = cfg.validation.data_args if cfg.validation is not None and cfg.validation.data_args else None
    if eval_args is not None:
        evals = load_prompt_dataset(eval_args, tokenizer, prompt_length=cfg.prompt_length, split="train")
    elif data_args.synthetic is not None or data_args.eval_file_name:
        evals = load_prompt_dataset(data_args, tokenizer, prompt_length=cfg.prompt_length, split="eval")
    else:
        evals = []
    evals = evals[: cfg.val_batch_size]
    data_seed = cfg.actor_train.training_args.data_seed
    sampler = PromptSampler(len(train), cfg.rollout_batch_size, seed=cfg.seed if data_seed is None else data_seed,
                            shuffle=data_args.shuffle)
    groups.update(build_groups(cfg, roles, backend))
    sizes = ", ".join(f"{role} x{len(groups[role].call_all('ping'))}" for role in roles)
    log(f"roles: {sizes}; {len(train)} train / {len(evals)} eval prompts; backend {backend}")
    return RLVRPipeline(cfg, emitter, groups=groups, tokenizer=tokenizer, train_prompts=train,
                        eval_prompts=evals, sampler=sampler, log=log)


def _shutdown(groups: dict[str, Any]) -> None:
    for group in groups.values():
        with contextlib.suppress(Exception):  # best effort while already failing or finishing
            group.shutdown()
