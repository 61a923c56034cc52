"""Worker roles: a role's section (model, training, data, generation, strategy, devices), reward workers
and their query filter, and the top-level role keys."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator, model_validator

from trainer.config.device_mapping import check_device_ids, parse_device_mapping
from trainer.config.registries import JUDGE_PROMPTS, REWARD_TYPES, ROLL_REWARD_WORKERS
from trainer.config.sections.base import Section, fld, fld_factory, import_only, planned
from trainer.config.sections.data import DataArgs
from trainer.config.sections.model import ModelArgs, TrainingArgs
from trainer.config.sections.rollout import GeneratingArgs
from trainer.config.sections.strategies import StrategyArgs


class SequencePackingArgs(Section):
    """ROLL's SequencePackingConfig: how use_sequence_packing forms its micro-batches."""

    algorithm: Literal["none", "load_balance"] = fld(
        "none", category="Batch sizes",
        description="none: each micro-batch (per_device_train_batch_size / infer_batch_size rows, or a dynamic "
        "batch) is packed into one sequence; load_balance: the mini-batch's sequences are spread over the fewest "
        "micro-batches (at least min_num_micro_batches_*) whose packed lengths stay within "
        "max_packed_sequence_length_*, balanced by tokens.",
    )
    max_packed_sequence_length_train: int | None = fld(
        None, category="Batch sizes", ge=1,
        description="load_balance: the longest packed sequence of a training micro-batch (unset: no cap).",
    )
    max_packed_sequence_length_forward: int | None = fld(
        None, category="Batch sizes", ge=1,
        description="load_balance: the longest packed sequence of a forward-only micro-batch (unset: no cap).",
    )
    min_num_micro_batches_train: int = fld(
        1, category="Batch sizes", ge=1,
        description="load_balance: at least this many micro-batches per mini-batch in training.",
    )
    min_num_micro_batches_forward: int = fld(
        1, category="Batch sizes", ge=1,
        description="load_balance: at least this many micro-batches per forward-only pass.",
    )


class WorkerConfig(Section):
    name: str | None = fld(None, category="Cluster", inactive=import_only("roles are named by their key"), description="Display name of the role (defaults to its key).")
    worker_cls: str | None = fld(
        None, category="Cluster",
        description="ROLL worker class path, accepted for compatibility; it is looked up in a registry of known "
        "names and never imported.",
    )
    model_args: ModelArgs = fld_factory(ModelArgs, category="Model", description="Which model the role loads and how.")
    training_args: TrainingArgs = fld_factory(
        TrainingArgs, category="Optimizer", description="Optimizer and batch settings (training roles)."
    )
    data_args: DataArgs | None = fld(
        None, category="Data", description="Prompt data (actor_train for training prompts, validation for eval)."
    )
    generating_args: GeneratingArgs | None = fld(
        None, category="Generation", description="Sampling settings (actor_infer and validation)."
    )
    strategy_args: StrategyArgs | None = fld(
        None, category="Strategy", common=True,
        description="Backend of the role: strategy_name and its typed strategy_config. Unset: torch_train for "
        "training roles, hf_infer for generation and forward-only roles.",
    )
    device_mapping: list[int] | None = fld(
        None, category="Cluster", common=True,
        description="Device ids the role runs on, as a list or an expression such as list(range(0,8)) "
        "(parsed, never executed). Roles whose devices overlap are colocated and take turns. Unset: one CPU worker.",
    )
    world_size: int | None = fld(
        None, category="Cluster", ge=1,
        description="Workers of this role; derived from device_mapping when unset (and must agree when both are set).",
    )
    num_gpus_per_worker: int = fld(
        1, category="Cluster", ge=1,
        description="Devices one worker drives (actor_infer: one engine's tensor x pipeline parallel size).",
    )
    infer_batch_size: int = fld(
        16, category="Batch sizes", ge=1, description="Micro-batch for forward-only passes (log-probs, values, scores)."
    )
    model_update_frequency: int = fld(
        1, category="Cluster", inactive=import_only("new weights are pushed after every update"), ge=1, description="Push new weights to this role every this many training steps."
    )
    use_dynamic_bsz: bool = fld(
        False, category="Batch sizes",
        description="verl's dynamic batch size: micro-batches (training and forward passes) are cut by a budget of "
        "real tokens (max_token_len_per_gpu) instead of a fixed sample count.",
    )
    max_token_len_per_gpu: int | None = fld(
        None, category="Batch sizes", ge=1,
        description="Real (prompt + response) tokens of one micro-batch when use_dynamic_bsz.",
    )
    backend_timeout: float = fld(
        30, category="Cluster", gt=0,
        description="Minutes a collective may wait before the process group fails (fractions allowed); the run "
        "then fails naming the role and the ranks that never joined.",
    )
    system_envs: dict[str, str] = fld_factory(
        dict, category="Cluster", description="Environment variables set in this role's worker processes."
    )
    pg_variant: str | None = fld(
        None, category="Loss",
        description="ROLL's policy-gradient variant (actor_train only): ppo (or unset) runs the pipeline's "
        "policy_loss; topr runs TOPR with per-token truncated ratios on negative samples (weights "
        "topr_positive_weight / topr_negative_weight). ROLL's tis, cispo and kimi15 are not built.",
    )
    topr_positive_weight: float = fld(
        1.0, category="Loss", ge=0,
        description="TOPR (pg_variant: topr) loss weight of positive samples (score > 0).",
    )
    topr_negative_weight: float = fld(
        1.0, category="Loss", ge=0,
        description="TOPR (pg_variant: topr) loss weight of negative samples (score <= 0).",
    )
    max_concurrency: int = fld(
        1, category="Cluster", inactive=import_only("Ray actor concurrency is set by the worker groups"), ge=1,
        description="Concurrent calls one Ray actor of this role accepts.",
    )
    use_dynamic_batching_in_train: bool = fld(
        False, category="Batch sizes",
        description="ROLL's dynamic batching: training sequences sorted by length and cut into micro-batches of "
        "at most max_tokens_per_microbatch_in_train tokens (rows × padded length), padding columns dropped.",
    )
    max_tokens_per_microbatch_in_train: int = fld(
        0, category="Batch sizes", ge=0,
        description="Token budget (rows × padded length) of one training micro-batch with dynamic batching.",
    )
    sequence_length_round_in_train: int = fld(
        4, category="Batch sizes", ge=1,
        description="Padded lengths are rounded up to a multiple of this with dynamic batching.",
    )
    use_dynamic_batching_in_infer: bool = fld(
        False, category="Batch sizes",
        description="Dynamic batching of the forward-only passes (log-probs, reference log-probs, values).",
    )
    max_tokens_per_microbatch_in_infer: int | None = fld(
        None, category="Batch sizes", ge=1,
        description="Token budget (rows × padded length) of one forward-only micro-batch with dynamic batching.",
    )
    sequence_length_round_in_infer: int = fld(
        4, category="Batch sizes", ge=1,
        description="Padded lengths are rounded up to a multiple of this (forward-only dynamic batching).",
    )
    offload_nccl: bool = fld(
        False, category="Cluster", inactive=import_only("NCCL buffers stay allocated"),
        description="Free NCCL communication buffers while the role is idle.",
    )
    use_sequence_packing: bool = fld(
        False, category="Batch sizes",
        description="Concatenate each micro-batch's sequences into one packed sequence without padding (position "
        "ids restart per sample, attention stays within each sample), in training and forward passes; "
        "torch_train, fsdp2 and deepspeed strategies (not megatron).",
    )
    use_remove_padding: bool = fld(
        False, category="Batch sizes",
        description="ROLL: drop the columns that are padding in every row of a micro-batch (fixed rows, not "
        "packed: ROLL's 'remove tail padding'), in training and forward passes; the token-budget and packing "
        "knobs drop them anyway. verl's use_remove_padding (padding-free packed sequences) imports as "
        "use_sequence_packing.",
    )
    sequence_packing_args: SequencePackingArgs = fld_factory(
        SequencePackingArgs, category="Batch sizes",
        description="Packing settings (with use_sequence_packing): algorithm (none or load_balance), packed lengths, "
        "micro-batch counts.",
    )
    logits_in_fp32: bool = fld(
        True, category="Model", inactive=import_only("log-probs are computed from float32 logits"),
        description="Compute logits in float32 before the log-softmax.",
    )
    apply_loss_scale: bool = fld(
        True, category="Loss", inactive=import_only("losses are normalised over the whole global batch already"),
        description="Scale the loss by DP × accumulation so gradients match one pass over the global batch.",
    )

    @field_validator("device_mapping", mode="before")
    @classmethod
    def _parse_device_mapping(cls, value: Any) -> Any:
        if isinstance(value, str):
            return parse_device_mapping(value)
        if isinstance(value, list):
            check_device_ids(value)
        return value


class QueryFilterConfig(Section):
    type: Literal["no_filter", "mean_filter", "std_filter"] = fld(
        "no_filter", category="Reward processing",
        description="Drop prompt groups whose rewards carry no learning signal: mean_filter drops a group whose "
        "mean reward is <= threshold_down or >= threshold_up, std_filter one whose reward std is <= "
        "std_threshold (0: all rewards equal). Dropped groups leave the actor's loss; with "
        "is_use_additional_prompts they are replaced.",
    )
    filter_args: dict[str, float] = fld_factory(
        dict, category="Reward processing",
        description="Thresholds of the filter: threshold_up / threshold_down (mean_filter), std_threshold (std_filter).",
    )


class RewardWorkerConfig(WorkerConfig):
    reward_type: Literal[REWARD_TYPES] | None = fld(  # type: ignore[valid-type]
        None, category="Reward processing",
        description="Built-in reward function; alternatively a known ROLL worker_cls names it.",
    )
    tag_included: list[str] = fld_factory(
        list, category="Reward processing", description="Domain tags this reward scores; empty scores every sample."
    )
    query_filter_config: QueryFilterConfig | None = fld(
        None, category="Reward processing", description="Filtering of this reward's prompt groups by their rewards."
    )
    response_filter_config: QueryFilterConfig | None = fld(
        None, category="Reward processing",
        inactive=import_only("ROLL's response_filter keeps every response whatever this says (its hook is a stub)"),
        description="ROLL: filtering of single responses by their rewards (never applied by ROLL either).",
    )
    format_pattern: str | None = fld(
        None, category="Reward processing", inactive=import_only("the format reward checks the chat template's answer format"), description="Regular expression a well-formatted response matches."
    )
    response_length_penalty_coef: float = fld(
        0.0, category="Reward processing", ge=0,
        description="ROLL's response-length term: coef x rho(length) is added to this reward's samples before "
        "normalisation, rho = -0.5 below 100 tokens, rising linearly to 0 at 400 tokens and above.",
    )
    reward_kwargs: dict[str, Any] = fld_factory(
        dict, category="Reward processing", description="Arguments passed to the reward function."
    )
    scoring_mode: Literal["loose", "soft", "strict"] | None = fld(
        None, category="Reward processing",
        description="crossthinkqa_rule: ROLL's `reward_type: loose|soft|strict`, how a right letter without "
        "\\boxed{} and a wrong boxed one score (unset: soft, as every ROLL example sets); read from reward_type. "
        "The other rewards, ROLL's IFEval worker included, have one scoring.",
    )
    code_url: str | None = fld(
        None, category="Reward processing",
        description="code_sandbox: URL of a SandboxFusion-style service (POST {code, language, stdin, …}) that runs "
        "the tests when use_local is false; a failed sample then scores -1, as in ROLL.",
    )
    use_local: bool = fld(
        True, category="Reward processing",
        description="code_sandbox: run the tests in the local sandbox instead of through code_url; it needs "
        "bubblewrap (new namespaces, uid 65534, no network, read-only interpreter, time, memory, output and process "
        "limits; docs/decisions/0046) and is refused where bwrap is missing.",
    )
    judge_prompt: Literal[JUDGE_PROMPTS] | None = fld(  # type: ignore[valid-type]
        None, category="Reward processing",
        description="llm_judge: the judge prompt by name (the question, the response and the reference answer filled "
        f"in): {', '.join(JUDGE_PROMPTS)}; unset uses score-0-10, as ROLL uses its 0-10 prompt.",
    )
    judge_model_type: Literal["api", "inference", "cluster"] | None = fld(
        None, category="Reward processing",
        description="llm_judge: api calls an OpenAI-compatible judge_api_url (POST …/chat/completions); inference "
        "generates the judgment with this reward section's own model (model_args, generating_args) on its "
        "strategy: hf_infer, or vllm with its strategy_config; cluster sends the judge prompts to the top-level "
        "reward_model worker group (its model, template and engine; this section's generating_args, else the "
        "reward_model's, decode).",
    )
    judge_model_name: str | None = fld(None, category="Reward processing",
                                       description="llm_judge (api): the model name sent with each judge request.")
    judge_api_url: str | None = fld(
        None, category="Reward processing",
        description="llm_judge (api): base URL of the OpenAI-compatible API (e.g. https://host/v1); requests go to "
        "<url>/chat/completions.",
    )
    judge_api_key: str | None = fld(
        None, category="Reward processing",
        description="llm_judge (api): sent as `Authorization: Bearer <key>`; write ${secret:NAME}, a team secret (stored encrypted, "
        "resolved only in the trainer, never shown), rather than the key itself (shown <redacted>, with a warning). "
        "Never logged, and blanked in the config trackers upload.",
    )
    reward_manager_config: list[dict[str, Any]] = fld_factory(
        list, category="Reward processing",
        inactive=planned("ROLL's remote reward system (RemoteRewardSystemWorker passes these plugin entries verbatim to "
                         "Alibaba's reward-system service, whose plugins have no public definition)"),
        description="ROLL's reward-system plugins of this worker ({plugin_name, …} entries for its reward service).",
    )

    @model_validator(mode="after")
    def _code_sandbox_has_a_sandbox(self) -> RewardWorkerConfig:
        code = self.reward_type == "code_sandbox" or ROLL_REWARD_WORKERS.get(self.worker_cls or "") == "code_sandbox"
        if code and not self.use_local and not self.code_url:
            raise ValueError("code_url: use_local is false, so the code sandbox needs code_url (the sandbox "
                             "service's http(s) URL); set code_url or use_local: true")
        if self.code_url and not self.code_url.startswith(("http://", "https://")):
            raise ValueError(f"code_url: {self.code_url!r} is not an http:// or https:// URL")
        return self

    @model_validator(mode="before")
    @classmethod
    def _roll_scoring_mode(cls, data: Any) -> Any:
        """ROLL's reward_type loose/soft/strict is a scoring mode of its worker_cls, not a reward function."""
        if isinstance(data, dict) and data.get("reward_type") in ("loose", "soft", "strict"):
            data = {**data, "scoring_mode": data["reward_type"]}
            data.pop("reward_type")
        return data


class WorkerRoles(Section):
    """Worker roles."""

    actor_train: WorkerConfig = fld_factory(
        WorkerConfig, category="Workers", description="The policy being trained."
    )
    actor_infer: WorkerConfig = fld_factory(
        WorkerConfig, category="Workers", description="The generation engine that samples responses."
    )
    reference: WorkerConfig | None = fld(
        None, category="Workers", description="Frozen reference policy for KL; unset when no KL is used."
    )
    critic: WorkerConfig | None = fld(None, category="Workers", description="Value model (needed by gae).")
    rewards: dict[str, RewardWorkerConfig] = fld_factory(
        dict, category="Workers", description="Reward workers by name."
    )
    validation: WorkerConfig | None = fld(
        None, category="Workers", description="Evaluation data and sampling settings."
    )
    reward_model: WorkerConfig | None = fld(
        None, category="Workers",
        description="ROLL's shared judge model: its own worker group (model_args, data_args.template, strategy_args "
        "hf_infer or vllm, generating_args, device_mapping) that every llm_judge reward with judge_model_type: "
        "cluster sends its judge prompts to; the path defaults to reward_pretrain.",
    )
