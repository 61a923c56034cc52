"""Experiment, cluster and schedule knobs (flat top-level keys), and where checkpoints go."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator

from trainer.config.sections.base import SEED_MAX, STEP_MAX, Section, fld, fld_factory, import_only
from trainer.config.sections.data import known_template
from trainer.config.sections.health import HealthConfig, WatchdogConfig


class CheckpointConfig(Section):
    type: Literal["file_system"] = fld(
        "file_system", category="Checkpointing", description="Where checkpoints are stored (a file system path)."
    )
    output_dir: str | None = fld(
        None, category="Checkpointing", path="write", description="Folder for checkpoints; unset uses <output_dir>/checkpoints."
    )


class ExperimentKnobs(Section):
    """Experiment: names, seed, model paths, output folders, profiler, tracker."""

    exp_name: str = fld("experiment", category="Experiment", common=True, description="Name of the experiment (run labels, folders).")
    seed: int = fld(42, category="Experiment", ge=0, le=SEED_MAX, description="Seed of every random generator; same seed, same run.")
    pretrain: str | None = fld(
        None, category="Model", path="read", description="Policy model path, commonly referenced as ${pretrain} by the roles."
    )
    reward_pretrain: str | None = fld(
        None, category="Model", path="read", description="Reward/critic model path, commonly referenced as ${reward_pretrain}."
    )
    rpc_timeout: int = fld(3600, category="Cluster", ge=1, description="Seconds a call to a worker may take before it fails.")
    output_dir: str = fld("./output", category="Experiment", path="write", description="Run directory: events, checkpoints, logs.")
    logging_dir: str = fld(
        "./output/logs", category="Logging", path="write",
        description="Folder of the tensorboard tracker's files (tracker_kwargs.log_dir, when set, wins); "
        "events always go to <output_dir>/events.jsonl.",
    )
    render_save_dir: str | None = fld(
        None, category="Agentic", path="write",
        description="Folder for the text frames of the trajectories sent to telemetry (agentic pipeline).",
    )
    profiler_output_dir: str | None = fld(
        None, category="Logging", path="write",
        description="Folder of the profiler's files (relative: inside output_dir; unset: <output_dir>/profiles); "
        "each profiled step in its own step_<k>/ folder, one file per role, rank and call.",
    )
    profiler_timeline: bool = fld(
        False, category="Logging",
        description="ROLL's timeline: a torch.profiler trace (Chrome trace JSON, gzip, with Python stacks) of every "
        "compute call of the profiled steps (profiler_steps): actor_train's log-probs and update, reference, critic, "
        "the hf_infer engine's generation; each rank writes its own file. Open it in ui.perfetto.dev or chrome://tracing.",
    )
    profiler_memory: bool = fld(
        False, category="Logging",
        description="ROLL's memory profile of the same calls: with CUDA a memory snapshot (.pickle: allocations with "
        "their stacks, for pytorch.org/memory_viz); on CPU, where no snapshot exists, a torch.profiler trace with "
        "profile_memory (allocation events and totals). One of profiler_timeline and profiler_memory at a time (ROLL).",
    )
    profiler_steps: list[int] = fld(
        [2, 2], category="Logging",
        description="PolicyLab's: the first and last step (inclusive) profiled by profiler_timeline / profiler_memory; "
        "step 2 by default, the first after the warm-up of step 1.",
    )
    alive_check_interval: int = fld(10, category="Cluster", inactive=import_only("Ray reports a dead worker at once; nothing polls"), ge=1, description="Seconds between worker liveness checks.")
    model_download_type: str | None = fld(
        None, category="Model", inactive=import_only("models are never downloaded at run time"), description="Hub a missing model would come from (ROLL compatibility; we never download)."
    )
    global_template: str | None = fld(
        None, category="Data", acts_through="template", description="Chat template for every role that does not set data_args.template."
    )

    @field_validator("global_template")
    @classmethod
    def _known_global_template(cls, value: str | None) -> str | None:
        return known_template(value)
    system_envs: dict[str, str] = fld_factory(
        dict, category="Cluster", description="Environment variables set in every worker process."
    )
    track_with: Literal["tensorboard", "wandb", "stdout", "swanlab", "none"] = fld(
        "tensorboard", category="Logging", description="Extra experiment tracker (events.jsonl is always written)."
    )
    tracker_kwargs: dict[str, Any] = fld_factory(
        dict, category="Logging", description="Arguments of the tracker (e.g. log_dir, project, entity)."
    )


class ClusterKnobs(Section):
    """Cluster: nodes, devices per node, colocation."""

    num_nodes: int | None = fld(
        None, category="Cluster", ge=1,
        description="Machines in the cluster; unset derives it from the highest device id and num_gpus_per_node "
        "(as ROLL does). When set, every device_mapping must fit in num_nodes x num_gpus_per_node.",
    )
    num_gpus_per_node: int = fld(8, category="Cluster", ge=1, description="Devices on each machine.")
    local_rank: int = fld(-1, category="Cluster", inactive=import_only("the worker groups assign ranks"), description="Set by the launcher for distributed runs; -1 otherwise.")
    colocate_all: bool = fld(
        False, category="Cluster",
        description="Run every role without its own device_mapping on actor_train's devices, taking turns.",
    )


class ScheduleKnobs(Section):
    """Schedule: steps, saving, logging, evaluation, resume, supervision."""

    max_steps: int = fld(
        500, category="Experiment", ge=1, le=STEP_MAX, common=True, description="Pipeline steps (rollout + update) to run."
    )
    save_steps: int = fld(50, category="Checkpointing", ge=1, common=True, description="Save a checkpoint every this many steps.")
    logging_steps: int = fld(1, category="Logging", ge=1, description="Emit metrics every this many steps.")
    logged_rollout_samples: int = fld(
        1024, category="Logging", ge=0,
        description="Rollout samples (responses, or trajectories) sent to telemetry per step, whole GRPO groups first, "
        "for the rollout inspector. The default keeps every sample of batches up to 1024; lower it for very large "
        "batches (each sample carries its tokens and log-probs), 0 sends none.",
    )
    eval_steps: int = fld(10, category="Experiment", common=True, description="Evaluate every this many steps (<= 0 disables).")
    val_before_train: bool = fld(False, category="Experiment", description="Evaluate once before the first step.")
    val_n_sample: int = fld(
        1, category="Generation", ge=1, description="Responses sampled per evaluation prompt (pass@k style metrics)."
    )
    val_greedy: bool = fld(False, category="Generation", description="Decode evaluation prompts greedily.")
    resume_from_checkpoint: bool | str = fld(
        False, category="Checkpointing",
        description="false starts fresh, true resumes from the latest checkpoint in output_dir, a path resumes from it.",
    )
    resume_mode: Literal["none", "latest", "path"] | None = fld(
        None, category="Checkpointing",
        description="Explicit form of resume_from_checkpoint (none / latest / path); unset follows it.",
    )
    checkpoint_config: CheckpointConfig = fld_factory(
        CheckpointConfig, category="Checkpointing", description="Where checkpoints go."
    )
    max_ckpts_to_keep: int = fld(
        -1, category="Checkpointing", description="Keep only the newest N checkpoints (-1 keeps all)."
    )
    watchdog: WatchdogConfig = fld_factory(
        WatchdogConfig, category="Run supervision",
        description="PolicyLab's stall detection per phase of a step: bounds and what a stall does.",
    )
    health: HealthConfig = fld_factory(
        HealthConfig, category="Run supervision",
        description="PolicyLab's run-health alerts (entropy collapse, length cap, KL, NaN, …): thresholds, off switches.",
    )
