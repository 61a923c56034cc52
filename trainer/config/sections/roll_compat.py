"""ROLL main's other pipeline keys, accepted so that its files load (docs/importers/README.md)."""

from __future__ import annotations

from typing import Any, Literal

from trainer.config.sections.base import Section, fld, fld_factory, import_only
from trainer.config.sections.data import DatasetFilter
from trainer.config.sections.loss import TrainInferCorrectionConfig


class RollMainKnobs(Section):
    """ROLL main's other pipeline keys, accepted so that its files load (docs/importers/README.md)."""

    base_dir: str = fld("./output", category="Experiment", inactive=import_only("the run directory is output_dir"),
                        description="ROLL's base folder of outputs.")
    rollout_dump_dir: str | None = fld(None, category="Logging",
                                       inactive=import_only("rollouts are recorded in events.jsonl"),
                                       description="Folder where ROLL dumps actor_infer's rollouts.")
    max_ckpt_to_keep: int = fld(
        0, category="Checkpointing", ge=0, acts_through="max_ckpts_to_keep",
        description="ROLL main's name: keep the newest N checkpoints, 0 keeps all (copied into max_ckpts_to_keep).",
    )
    val_prompt_length: int | None = fld(
        None, category="Batch sizes", inactive=import_only("evaluation uses prompt_length and response_length"), ge=1,
        description="Longest evaluation prompt (ROLL; unset: prompt_length).",
    )
    val_sequence_length: int | None = fld(
        None, category="Batch sizes", inactive=import_only("evaluation uses prompt_length and response_length"), ge=1,
        description="Longest evaluation prompt + response (ROLL; unset: sequence_length).",
    )
    report_length_and_rewards: bool = fld(
        False, category="Logging", inactive=import_only("lengths and rewards are always reported as metrics"),
        description="Report the lengths and rewards of each prompt per epoch.",
    )
    is_offload_states: bool = fld(
        False, category="Cluster", inactive=import_only("colocated roles offload their state between phases by "
                                                        "themselves"),
        description="Offload model state to CPU after every operation.",
    )
    is_offload_optimizer_states_in_train_step: bool = fld(
        False, category="Cluster", inactive=import_only("colocated roles offload their state between phases by "
                                                        "themselves"),
        description="Offload optimizer state during forward/backward, reload it for the optimizer step.",
    )
    length_profiler_dir: str | None = fld(None, category="Logging",
                                          inactive=import_only("lengths and rewards are reported as metrics, not files"),
                                          description="Folder for ROLL's length and reward profiles.")
    model_update_buffer_size_mb: int = fld(
        1024, category="Cluster", inactive=import_only("weights are pushed tensor by tensor"), ge=1,
        description="Buffer of one weight-update message to the engines, in MB.",
    )
    rollout_mock: dict[str, Any] | None = fld(
        None, category="Logging", inactive=import_only("rollout dump/mock for precision tests is not built"),
        description="ROLL's rollout dump / mock settings (enable, mode, dump_dir).",
    )
    user_defined_rollout_loop_cls: str | None = fld(
        None, category="Generation", inactive=import_only("classes named in a config are never imported"),
        description="ROLL's rollout-loop class.",
    )
    use_pg_clip_range: bool = fld(False, category="Loss",
                                  inactive=import_only("pg_clip_low and pg_clip_high apply whenever they are set"),
                                  description="ROLL: clip with pg_clip_low / pg_clip_high instead of pg_clip.")
    enable_reference: bool = fld(
        False, category="Workers", inactive=import_only("the reference role exists when the config has a reference"),
        description="ROLL: create the reference role for KL terms.",
    )
    enable_old_logprobs_recompute: bool = fld(
        False, category="Loss", inactive=import_only("old log-probs are recomputed unless use_rollout_log_probs"),
        description="ROLL: recompute old log-probs instead of reusing the first pass.",
    )
    force_disable_old_logprobs_recompute: bool = fld(
        False, category="Loss", inactive=import_only("old log-probs are recomputed unless use_rollout_log_probs"),
        description="ROLL: never recompute old log-probs.",
    )
    train_infer_correction: TrainInferCorrectionConfig = fld_factory(
        TrainInferCorrectionConfig, category="Loss",
        description="ROLL's correction of the training-inference mismatch: importance weights (is_weight) and "
        "filters between actor_train's recomputed log-probs and the rollout engine's, applied to the actor's loss "
        "on fresh samples (off_policy_correction covers stale ones). Forces the recompute of the old log-probs.",
    )
    dataset_filter: DatasetFilter = fld_factory(
        DatasetFilter, category="Data",
        description="Filter of the training rows when they are loaded (ROLL's keys): rows of `source` (every row "
        "when unset) are kept when min_difficulty <= difficulty <= max_difficulty, at most num_samples of them; "
        "the counts kept and dropped are logged. Evaluation data is not filtered.",
    )
    vlm_filter: dict[str, Any] = fld_factory(
        dict, category="Data", inactive=import_only("multi-modal prompts are not supported"),
        description="ROLL's filter of overlong multi-modal prompts.",
    )
    save_logging_board_dir: str | None = fld(
        None, category="Logging", inactive=import_only("metrics go to events.jsonl and the tracker"),
        description="Folder of ROLL's logging-board metrics.",
    )
    postive_loss_coef: float = fld(
        0.0, category="Loss", ge=0, acts_through="sft_loss_coef",
        description="ROLL's name (sic) for sft_loss_coef: weight of a supervised loss on positive samples.",
    )
    use_topr_neg_loss_coef: float = fld(
        0.0, category="Loss", ge=0,
        description="ROLL: weight of TOPR's negative-sample term added to the policy loss (samples with "
        "score <= 0, per-token ratio truncated to [0, 1]).",
    )
    use_policy_loss_type: Literal["PPO", "PG"] = fld(
        "PPO", category="Loss",
        description="ROLL: the clipped PPO objective, or PG, the plain policy gradient -A * log pi (no ratio, no "
        "clip; ROLL's vanilla pg_variant).",
    )
    importance_sampling: Literal["token", "seq"] = fld(
        "token", category="Loss", acts_through="policy_loss",
        description="ROLL: per-token or per-sequence importance ratios; seq is GSPO (policy_loss: gspo).",
    )
    router_args: dict[str, Any] | None = fld(
        None, category="Generation", inactive=import_only("requests go to the engines without a router"),
        description="ROLL's request router of actor_infer.",
    )
