"""Set up and run one RLVR training run: config -> model dirs -> telemetry -> worker groups -> loop.

``run_training`` never raises for a failed run: it emits ``status: failed`` (with the error) and
returns exit code 1, so the platform sees a terminal state even when a worker died. A run stopped by
SIGTERM (Ray's stop_job, which is how the platform cancels) reports ``cancelled`` instead, and its
output ends with the one line "cancelled": no traceback, no "training failed".

Until its first step is done a run reports ``starting`` with the phase as the message: loading the
tokenizer and data, placing workers (Ray), loading each role's model, the first rollout.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from trainer.config import topology
from trainer.pipeline.run.models import materialise_tiny_models, policy_path

if TYPE_CHECKING:
    from trainer.cluster.worker_group import Group
    from trainer.config.schema import PipelineConfig
    from trainer.roles import RoleGroups

EXIT_OK, EXIT_FAILED = 0, 1
EXIT_STALLED = 3  # on_stall: fail — the platform does not retry it (jobs.transitions)


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
    """Worker roles this config needs, in construction order (a rollout-only run: actor_infer alone)."""
    if cfg.pipeline_mode == "rollout_only":
        return ["actor_infer"]
    roles = ["actor_train", "actor_infer"]
    if cfg.reference is not None or cfg.use_kl_loss or cfg.add_token_level_kl:
        roles.append("reference")
    if cfg.critic is not None or cfg.adv_estimator == "gae":
        if cfg.critic is None:
            raise ValueError("critic: adv_estimator 'gae' needs a critic section")
        roles.append("critic")
    if cfg.train_env_manager is None:  # the agentic pipeline's rewards come from its environments
        if cfg.reward_model is not None and topology.cluster_judges(cfg):
            roles.append("reward_model")  # before reward, which is handed this group
        roles.append("reward")
    return roles


def worker_class(role: str, groups: dict[str, Any]) -> Any:
    """The role's worker class; the reward worker gets the reward_model group its cluster judges ask."""
    from trainer.roles import WORKER_CLASSES

    if role == "reward":
        return functools.partial(WORKER_CLASSES[role], judge_server=groups.get("reward_model"))
    return WORKER_CLASSES[role]


def _with_reference_default(cfg: PipelineConfig) -> Any:
    """A KL setting without a reference section uses the initial policy as the reference."""
    if cfg.reference is None and (cfg.use_kl_loss or cfg.add_token_level_kl):
        from trainer.config.schema import WorkerConfig

        cfg.reference = WorkerConfig(model_args=cfg.actor_train.model_args.model_copy())
    return cfg


def build_groups(cfg: PipelineConfig, roles: list[str], backend: str,
                 phase: Callable[[str], None] = lambda _: None) -> RoleGroups:
    """One worker group per role: Ray actors placed by device_mapping, or in-process (``local``).
    ``phase`` hears what is being done (placing workers, loading a role's model)."""
    from trainer.roles import WORKER_CLASSES, needs_process_group

    groups: dict[str, Any] = {}
    if backend == "local":
        from trainer.cluster.worker_group import LocalWorkerGroup

        for role in roles:
            phase(f"loading model: {role}")
            groups[role] = LocalWorkerGroup(worker_class(role, groups), role, init_args=(cfg,),
                                            distributed=needs_process_group(cfg, role))
        return cast("RoleGroups", groups)

    from trainer.cluster.resources import plan_resource_pools
    from trainer.cluster.worker_group import LocalWorkerGroup, WorkerGroup

    phase("placing workers")
    ensure_ray()
    pools = plan_resource_pools(cfg)
    for role in roles:
        if role == "reward":  # rule rewards are cheap, pure Python: scored in the driver
            groups[role] = LocalWorkerGroup(worker_class(role, groups), role, init_args=(cfg,))
            continue
        phase(f"placing workers and loading model: {role}")
        distributed = needs_process_group(cfg, role)
        env_vars = {**cfg.system_envs, **getattr(cfg, role).system_envs}
        groups[role] = WorkerGroup(WORKER_CLASSES[role], role, pools[role], init_args=(cfg,),
                                   distributed=distributed, env_vars=env_vars, timeout_s=cfg.rpc_timeout,
                                   backend_timeout_minutes=getattr(cfg, role).backend_timeout)
    return cast("RoleGroups", groups)


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
    else:
        os.environ.setdefault("RAY_USE_RANDOM_PORTS", "1")  # stay out of 10002-19999 (ENVIRONMENT.md)
        ray.init(address="local", num_cpus=max(8, os.cpu_count() or 1), include_dashboard=False,
                 log_to_driver=True, object_store_memory=512 * 1024**2)
    cancel_on_sigterm()  # ray.init put its own handlers in place of ours


class Cancelled(SystemExit):
    """The run was cancelled: SIGTERM, which the platform's cancel (Ray's stop_job) sends. A SystemExit
    (code 15, as Ray's own handler raises): no `except Exception` on the way swallows it, and Ray's waits,
    which poll for signals, pass only KeyboardInterrupt and SystemExit through (anything else from a signal
    handler became "SystemError: CoreWorker.wait returned a result with an exception set")."""


def _raise_cancelled(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one cancel: a second SIGTERM while winding down is moot
    raise Cancelled(signal.SIGTERM)


def cancel_on_sigterm() -> Any:
    """SIGTERM raises Cancelled in the main thread; returns the handler it replaced (None off the main
    thread, where none can be set). Installed when a run starts, and again after ray.init, which replaces
    it with a handler of its own (sys.exit(15)) behind Ray's native failure-signal handler: that one printed
    "*** SIGTERM received" and a native stack, twice, at every cancel. (Without it, a `--workers local` run
    died of the signal at once, reporting nothing.)"""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _raise_cancelled)


def is_cancel(exc: BaseException) -> bool:
    """A cancel: ours, or the SystemExit(15) of a SIGTERM handled by Ray's handler."""
    return isinstance(exc, Cancelled) or (isinstance(exc, SystemExit) and exc.code == signal.SIGTERM)


def run_training(cfg: PipelineConfig, identity: RunIdentity, *, backend: str = "ray",
                 log: Callable[[str], None] | None = None) -> int:
    """Run the whole training; returns the process exit code (0 ok, 1 failed)."""
    from trainer.pipeline.run.telemetry import open_emitter

    Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
    emitter = open_emitter(cfg, identity)
    say = log or (lambda line: print(line, flush=True))
    groups: RoleGroups = {}
    previous_handler = cancel_on_sigterm()
    try:
        return _train(cfg, emitter, backend=backend, log=say, groups=groups)
    finally:  # the caller's SIGTERM handling again (in-process callers: tests, a notebook)
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)


def _train(cfg: PipelineConfig, emitter: Any, *, backend: str, log: Callable[[str], None],
           groups: RoleGroups) -> int:
    from trainer.pipeline.run.watchdog import stalled_in, start_watchdog

    try:
        emitter.status("starting", step=0, total_steps=cfg.max_steps, message="loading tokenizer and data")
        emit_fingerprint(cfg, emitter, log)
        pipeline = prepare_pipeline(cfg, StartupPhases(emitter), backend=backend, log=log, groups=groups)
        pipeline.watchdog, interrupt = start_watchdog(cfg.watchdog, emitter, groups, Path(cfg.output_dir), log=log,
                                                      exit_codes={True: EXIT_FAILED, False: EXIT_STALLED})
        try:
            pipeline.run()
        finally:  # before anything below closes the emitter the watchdog reports to
            pipeline.watchdog.stop()
            interrupt.close()
    except BaseException as exc:  # a worker crash, a bad value found late, Ctrl-C: always a terminal state
        if is_cancel(exc):  # the user asked for it: no traceback, no "training failed"
            emitter.status("cancelled", step=emitter.step, total_steps=cfg.max_steps, message="stopped by SIGTERM")
            emitter.close()
            _shutdown(groups)
            print("cancelled", file=sys.stderr, flush=True)
            return EXIT_FAILED
        stalled = stalled_in(exc)  # raised by the watchdog's signal, maybe inside a C call that wrapped it
        message = f"Stalled: {stalled}" if stalled is not None else f"{type(exc).__name__}: {exc}"
        emitter.log("error", traceback.format_exc())
        emitter.status("failed", step=emitter.step, total_steps=cfg.max_steps, message=message)
        print(f"training failed: {message}", file=sys.stderr, flush=True)
        emitter.close()
        _shutdown(groups)
        if isinstance(exc, KeyboardInterrupt):
            raise
        return EXIT_STALLED if stalled is not None and not stalled.retry else EXIT_FAILED
    emitter.status("succeeded", step=pipeline.step, total_steps=cfg.max_steps, eta_s=0.0)
    emitter.close()
    _shutdown(groups)
    return EXIT_OK


def run_fingerprint(cfg: PipelineConfig) -> dict[str, Any]:
    """This attempt's fingerprint (trainer.telemetry.fingerprint): the resolved config and its data (an agentic
    run's: the environments its train and validation env managers play)."""
    from trainer.telemetry.fingerprint import data_source, environment_source, fingerprint

    if cfg.train_env_manager is not None:
        envs = {tag: env.model_dump(mode="json") for tag, env in cfg.custom_envs.items()}
        played = {"train": environment_source(cfg.train_env_manager.tags, envs),
                  "validation": environment_source(cfg.val_env_manager.tags, envs)
                  if cfg.val_env_manager is not None else None}
        return fingerprint(cfg.model_dump(mode="json"), played)

    train = cfg.actor_train.data_args
    validation = cfg.validation.data_args if cfg.validation is not None else None

    def source(args: Any, key: str) -> dict[str, Any] | None:
        if args is None:
            return None
        synthetic = args.synthetic.model_dump(mode="json") if args.synthetic is not None else None
        return data_source(getattr(args, key), args.dataset_dir, synthetic)

    data = {"train": source(train, "file_name"),
            "eval": None if train is None or train.synthetic is not None else source(train, "eval_file_name"),
            "validation": source(validation, "file_name")}
    return fingerprint(cfg.model_dump(mode="json"), data)


def emit_fingerprint(cfg: PipelineConfig, emitter: Any, log: Callable[[str], None]) -> None:
    """The attempt's fingerprint event, once, before anything heavy starts; a fingerprint that cannot be
    taken is a warning in the log, never the run's end."""
    try:
        emitter.fingerprint(run_fingerprint(cfg), step=emitter.step)
    except Exception as exc:
        log(f"run fingerprint not recorded: {type(exc).__name__}: {exc}")
        emitter.log("warning", f"run fingerprint not recorded: {type(exc).__name__}: {exc}")


class StartupPhases:
    """The run's telemetry for the pipeline, reporting the start's phases: ``phase(text)`` sends
    ``starting`` with that text, and the pipeline's first ``running`` report without an ETA (the one it
    sends before its first step) becomes the last phase, "first rollout"."""

    def __init__(self, telemetry: Any) -> None:
        self._telemetry = telemetry
        self._started = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._telemetry, name)

    def phase(self, message: str) -> None:
        self._telemetry.status("starting", step=self._telemetry.step, total_steps=None, message=message)

    def status(self, state: str, step: int, total_steps: int | None = None, eta_s: float | None = None,
               message: str = "") -> None:
        if state == "running" and eta_s is None and not self._started:
            state, message = "starting", message or "first rollout"
        self._started = self._started or state == "running"
        self._telemetry.status(state, step, total_steps, eta_s, message)


def prepare_pipeline(cfg: PipelineConfig, emitter: Any, *, backend: str, log: Callable[[str], None],
                     groups: RoleGroups) -> Any:
    """Build models, data and worker groups (filled into ``groups`` so the caller can shut them down)."""
    from transformers.utils import logging as hf_logging

    from trainer.data.datasets import load_prompt_dataset
    from trainer.data.sampler import DomainInterleavedSampler, PromptSampler
    from trainer.models.loading import load_tokenizer
    from trainer.pipeline.dynamic_sampling import sample_domain
    from trainer.pipeline.rlvr import RLVRPipeline
    from trainer.roles import Role, group_named

    hf_logging.disable_progress_bar()
    cfg = _with_reference_default(materialise_tiny_models(cfg))
    roles = roles_in_use(cfg)
    tokenizer = load_tokenizer(policy_path(cfg), trust_remote_code=cfg.actor_train.model_args.trust_remote_code)
    if cfg.train_env_manager is not None:  # environments instead of prompts: the agentic pipeline
        from trainer.pipeline.agentic import AgenticPipeline, AgenticRolloutPipeline, build_env_managers

        train_envs, val_envs = build_env_managers(cfg)  # a bad env fails here, before any worker starts
        groups.update(build_groups(cfg, roles, backend, phase=emitter.phase))
        log(f"roles: {', '.join(roles)}; {len(train_envs.tags)} train / "
            f"{len(val_envs.tags) if val_envs else 0} eval env groups; backend {backend}")
        pipeline_cls = AgenticRolloutPipeline if cfg.pipeline_mode == "rollout_only" else AgenticPipeline
        return pipeline_cls(cfg, emitter, groups=groups, tokenizer=tokenizer, train_envs=train_envs,
                            val_envs=val_envs, log=log)
    data_args = cfg.actor_train.data_args
    if data_args is None:
        raise ValueError("actor_train.data_args: no training data (set file_name or synthetic)")
    train = load_prompt_dataset(data_args, tokenizer, prompt_length=cfg.prompt_length, split="train",
                                dataset_filter=cfg.dataset_filter, log=log)
    eval_args = cfg.validation.data_args if cfg.validation is not None and cfg.validation.data_args else None
    if eval_args is not None:
        evals = load_prompt_dataset(eval_args, tokenizer, prompt_length=cfg.prompt_length, split="train")
    elif data_args.synthetic is not None or data_args.eval_file_name:
        evals = load_prompt_dataset(data_args, tokenizer, prompt_length=cfg.prompt_length, split="eval")
    else:
        evals = []
    evals = evals[: cfg.val_batch_size]
    data_seed = cfg.actor_train.training_args.data_seed
    seed = cfg.seed if data_seed is None else data_seed
    if data_args.domain_interleave_probs:
        domains = [sample_domain(cfg, sample) for sample in train]
        sampler: Any = DomainInterleavedSampler(domains, data_args.domain_interleave_probs, cfg.rollout_batch_size,
                                                seed=seed, shuffle=data_args.shuffle)
        log("domains (prompts a batch / in the data): " + ", ".join(
            f"{d} {n} / {len(sampler.members[d])}" for d, n in sampler.shares.items()))
    else:
        sampler = PromptSampler(len(train), cfg.rollout_batch_size, seed=seed, shuffle=data_args.shuffle)
    groups.update(build_groups(cfg, roles, backend, phase=emitter.phase))
    sizes = ", ".join(f"{role} x{len(group_named(groups, role).call_all(Role.ping))} "
                      f"(pid {', '.join(map(str, group_named(groups, role).pids))})"
                      for role in roles)  # the pids: where py-spy (or the watchdog) reads a rank's stack
    log(f"roles: {sizes}; {len(train)} train / {len(evals)} eval prompts; backend {backend}")
    return RLVRPipeline(cfg, emitter, groups=groups, tokenizer=tokenizer, train_prompts=train,
                        eval_prompts=evals, sampler=sampler, log=log)


def _shutdown(groups: RoleGroups) -> None:
    # last built first: an in-process vLLM engine (actor_infer) releases the torch.distributed groups it
    # made on top of actor_train's process group before that group is destroyed
    for group in reversed(list(cast("dict[str, Group[Any]]", groups).values())):
        with contextlib.suppress(Exception):  # best effort while already failing or finishing
            group.shutdown()
