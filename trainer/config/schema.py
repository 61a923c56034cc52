"""The native experiment config: pydantic v2 models in ROLL's layout (torch-free).

This module is the single source of truth for every config field: its type, default, description
and form category. Forms, REST validation, JSON Schema, docs/config.md, the importers and the
trainer all read it. A ROLL config file loads unchanged; settings from verl, SkyRL and RLinf that
ROLL lacks have a home here too, so the importers never drop a value.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from trainer.config.device_mapping import check_device_ids, parse_device_mapping
from trainer.config.registries import (
    CHAT_TEMPLATES,
    JUDGE_PROMPTS,
    RAW_TEMPLATES,
    REWARD_TYPES,
    ROLL_REWARD_WORKERS,
    SYNTHETIC_TASKS,
)
from trainer.telemetry.events import ALERT_KINDS

# ---------------------------------------------------------------------------------------------
# helpers


PathAccess = Literal["read", "write"]
SEED_MAX = 2**32 - 1  # numpy's seeds are 32-bit; a larger seed would fail at the first generator
STEP_MAX = 2**31 - 1  # max_steps becomes the platform's Run.total_steps, a 32-bit integer column


@dataclass(frozen=True)
class Inactive:
    """Why a field the schema accepts does not act in this build (docs/decisions/0011).

    import_only: kept so that an imported or ROLL config loses nothing, but nothing here reads it.
    planned: reserved for a backend or feature that is not built yet.
    Every field without an Inactive acts: the engine reads it (tests/trainer/config/test_field_status.py)."""

    status: Literal["import_only", "planned"]
    reason: str


def import_only(reason: str) -> Inactive:
    return Inactive("import_only", reason)


def planned(feature: str) -> Inactive:
    return Inactive("planned", f"{feature} is not built yet")


def fld(
    default: Any = ...,
    *,
    category: str,
    description: str,
    path: PathAccess | None = None,
    inactive: Inactive | None = None,
    acts_through: str | None = None,
    common: bool = False,
    **kwargs: Any,
) -> Any:
    """A pydantic Field carrying a description and the form category it is grouped under.

    `path` marks a file-system location the run reads or writes: the platform confines those
    (trainer.config.confinement). `inactive` says the engine does not act on it, and why.
    `acts_through` names the fields a schema validator copies this one into (an older spelling).
    `common` marks one of the ~20 knobs people change most: the editor's basic view shows only these."""
    extra = _extra(category, path, inactive, acts_through) | ({"common": True} if common else {})
    return Field(default, description=description, json_schema_extra=extra, **kwargs)


def fld_factory(
    factory: Any, *, category: str, description: str, path: PathAccess | None = None,
    inactive: Inactive | None = None, **kwargs: Any,
) -> Any:
    extra = _extra(category, path, inactive, None)
    return Field(default_factory=factory, description=description, json_schema_extra=extra, **kwargs)


def _extra(category: str, path: PathAccess | None, inactive: Inactive | None, acts_through: str | None) -> dict[str, Any]:
    extra: dict[str, Any] = {"category": category}
    if path is not None:
        extra["path"] = path
    if inactive is not None:
        extra |= {"status": inactive.status, "status_reason": inactive.reason}
    if acts_through is not None:
        extra["acts_through"] = acts_through
    return extra


class Section(BaseModel):
    """Base of every config section: unknown keys are errors.

    `class X(Section, inactive=planned("…"))` marks every field X declares as inactive (fields that
    carry their own status keep it)."""

    model_config = ConfigDict(extra="forbid", validate_default=False, populate_by_name=True)

    def __init_subclass__(cls, inactive: Inactive | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)  # `inactive` is applied once pydantic has built the fields

    @classmethod
    def __pydantic_init_subclass__(cls, inactive: Inactive | None = None, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if inactive is None:
            return
        own = inspect.get_annotations(cls)
        for name, info in cls.model_fields.items():
            if name in own and isinstance(info.json_schema_extra, dict) and "status" not in info.json_schema_extra:
                info.json_schema_extra |= {"status": inactive.status, "status_reason": inactive.reason}
        cls.model_rebuild(force=True)


def field_status(model: type[BaseModel], name: str) -> tuple[str, str]:
    """("acts", "") or (status, reason) of `model.name`."""
    extra = model.model_fields[name].json_schema_extra
    if isinstance(extra, dict) and "status" in extra:
        return extra["status"], extra["status_reason"]
    return "acts", ""


Dtype = Literal["fp32", "bf16", "fp16"]
# remax: the schema accepts it, this build cannot run it: its baseline is a greedy rollout per prompt, which
# the RLVR pipeline does not generate
UNBUILT_ADV_ESTIMATORS = ("remax",)
# ROLL's step-wise estimators: advantages per turn of a multi-turn trajectory, agentic runs only
# (trainer.algorithms.step_advantages.STEP_ADV_ESTIMATORS, which a test keeps equal)
AGENTIC_ADV_ESTIMATORS = ("gigpo", "step_reinforce", "agentic_reinforce")
NormType = Literal["batch", "group", "running", "none"]
AutoInt = int | Literal["auto"]
AutoFloat = float | Literal["auto"]
AutoBool = bool | Literal["auto"]

# ---------------------------------------------------------------------------------------------
# model / training / data / generation arguments of a worker


class ModelArgs(Section):
    model_name_or_path: str | None = fld(
        None, category="Model", path="read", common=True,
        description="Local directory (or hub id resolved ahead of time) of the HF-format model this role loads.",
    )
    dtype: Dtype | None = fld(
        None, category="Model",
        description="Precision the weights are loaded in; unset keeps the dtype stored in the model config. A "
        "torch_train or deepspeed_train role computes in it as mixed precision (fp32 master weights and optimizer "
        "state).",
    )
    disable_gradient_checkpointing: bool = fld(
        False, category="Model",
        description="Keep all activations instead of recomputing them in the backward pass (more memory, "
        "slightly faster). Only meaningful for training roles.",
    )
    attn_implementation: Literal["eager", "sdpa", "fa2", "flash_attention_2", "flash_attention_3"] | None = fld(
        None, category="Model",
        description="Attention kernel used by the HF model; fa2 is shorthand for flash_attention_2.",
    )
    trust_remote_code: bool = fld(
        False, category="Model",
        description="Allow model repositories that ship their own modelling code. Off by default for safety.",
    )
    model_type: Literal["auto_sequence_classification", "auto_token_classification", "trl"] | None = fld(
        None, category="Model", inactive=import_only("the critic is a value head on the causal LM; reward_model loads a sequence classifier"),
        description="Head put on top of the model for scoring roles (reward model / critic); unset for a causal LM.",
    )
    num_labels: int = fld(
        1, category="Model", inactive=import_only("the critic is a value head on the causal LM; reward_model loads a sequence classifier"), ge=1,
        description="Number of outputs of a classification head (1 for a scalar reward or value).",
    )
    moe_aux_loss_coef: float | None = fld(
        None, category="Model", inactive=import_only("set the model's router loss weight through model_config_kwargs"),
        description="Weight of the router load-balancing loss of mixture-of-experts models; unset keeps the model's own.",
    )
    freeze_module_prefix: str | None = fld(
        None, category="Model",
        description="Comma-separated parameter-name prefixes kept frozen while a training role trains (ROLL: "
        "name.startswith(prefix), so model.layers.1 also freezes model.layers.10; write model.layers.1. for one "
        "layer): no gradient, not in the optimizer. Only without lora_target (LoRA freezes the base already); a "
        "prefix that matches no parameter is refused.",
    )
    model_config_kwargs: dict[str, Any] = fld_factory(
        dict, category="Model",
        description="Values that override entries of the model's config.json at load time (e.g. dropout).",
    )
    lora_rank: int | None = fld(
        None, category="Model", ge=1,
        description="Rank of the LoRA adapters (with lora_target); unset: 8, ROLL's default.",
    )
    lora_alpha: int | None = fld(
        None, category="Model", ge=1,
        description="Scaling numerator of the LoRA update (alpha / rank); unset: twice lora_rank, ROLL's default.",
    )
    lora_target: str | None = fld(
        None, category="Model",
        description="Train LoRA adapters on these modules, the rest of the model frozen: comma-separated names "
        "(e.g. q_proj,v_proj), all (every linear layer but the output head), or a regex; unset trains all weights.",
    )
    lora_dropout: float = fld(0.0, category="Model", ge=0, lt=1,
                              description="Dropout on the LoRA adapters' input.")
    additional_target: str | None = fld(
        None, category="Model",
        description="Comma-separated modules besides the adapters that are trained and saved with them.",
    )
    autocast_adapter_dtype: bool = fld(True, category="Model",
                                       description="Keep LoRA adapter weights in float32 when the model is 16-bit.")
    adapter_name_or_path: str | None = fld(
        None, category="Model", path="read",
        description="Folder of a trained LoRA adapter (PEFT's adapter_config.json + adapter_model.safetensors, "
        "e.g. a checkpoint's lora_adapter/) loaded on top of model_name_or_path: a training role with lora_target "
        "continues training it (rank, alpha and modules must match the lora_* fields); every other role loads it "
        "merged into the weights. actor_infer serves actor_train's adapter.",
    )
    ulysses_size: int = fld(
        1, category="Model", inactive=planned("Ulysses sequence parallelism"), ge=1,
        description="ROLL's Ulysses group size: ranks that split each sequence (attention all-to-all).",
    )
    gradient_checkpointing_use_reentrant: bool | None = fld(
        None, category="Model", inactive=import_only("gradient checkpointing uses the model's default implementation"),
        description="torch.utils.checkpoint's reentrant variant; unset picks it per model (ROLL: reentrant for MoE).",
    )
    device_map: str | None = fld(
        None, category="Model", inactive=import_only("each worker loads the model onto its own device"),
        description="transformers' from_pretrained device_map (ROLL's default: balanced).",
    )
    vision_dp: bool = fld(False, category="Model", inactive=import_only("multi-modal models are not supported"),
                          description="Spread the vision tower over the Ulysses ranks.")
    flash_attn: str | None = fld(
        None, category="Model", inactive=import_only("the attention kernel is attn_implementation"),
        description="Older ROLL/LLaMA-Factory spelling of the attention kernel (auto, sdpa, fa2, disabled).",
    )

    @field_validator("attn_implementation", mode="before")
    @classmethod
    def _auto_is_unset(cls, value: Any) -> Any:
        return None if value == "auto" else value  # ROLL: auto keeps the model's own kernel


class TrainingArgs(Section):
    learning_rate: float = fld(1e-6, category="Optimizer", gt=0, common=True, description="Peak learning rate of the optimizer.")
    weight_decay: float = fld(0.0, category="Optimizer", ge=0, description="Decoupled (AdamW) weight decay.")
    adam_beta1: float = fld(0.9, category="Optimizer", ge=0, lt=1, description="AdamW first-moment decay.")
    adam_beta2: float = fld(0.999, category="Optimizer", ge=0, lt=1, description="AdamW second-moment decay.")
    adam_epsilon: float = fld(1e-8, category="Optimizer", gt=0, description="AdamW denominator epsilon.")
    max_grad_norm: float | None = fld(
        1.0, category="Optimizer",
        description="Clip the global gradient L2 norm to this value before each optimizer step; unset disables clipping.",
    )
    per_device_train_batch_size: int = fld(
        1, category="Batch sizes", ge=1, common=True,
        description="Samples in one forward/backward pass on one data-parallel rank (micro-batch).",
    )
    gradient_accumulation_steps: int = fld(
        1, category="Batch sizes", ge=1, common=True,
        description="Micro-batches accumulated per rank before one optimizer step.",
    )
    warmup_steps: int = fld(
        0, category="Optimizer", ge=0,
        description="Optimizer steps of linear learning-rate warmup; when 0, warmup_ratio decides.",
    )
    warmup_ratio: float = fld(
        0.0, category="Optimizer", ge=0, le=1,
        description="Fraction of all optimizer steps used for warmup when warmup_steps is 0.",
    )
    lr_scheduler_type: Literal["constant", "linear", "cosine"] = fld(
        "constant", category="Optimizer", description="Learning-rate schedule after warmup."
    )
    min_lr_ratio: float = fld(
        0.0, category="Optimizer", ge=0, le=1,
        description="Floor of the decaying schedules, as a fraction of learning_rate.",
    )
    num_train_epochs: float = fld(
        1.0, category="Optimizer", inactive=import_only("the pipeline's max_steps sets the length of training"), gt=0,
        description="Passes over the prompt set; max_steps, when set, takes precedence.",
    )
    max_steps: int = fld(
        -1, category="Optimizer",
        description="Per-role cap on optimizer schedule length; -1 derives it from the pipeline's max_steps.",
    )
    seed: int | None = fld(None, category="Optimizer", ge=0, le=SEED_MAX, description="Seed for this role; unset uses the pipeline seed.")
    data_seed: int | None = fld(None, category="Optimizer", ge=0, le=SEED_MAX, description="Seed of the data sampler; unset uses seed.")
    dataloader_num_workers: int = fld(0, category="Data", inactive=import_only("prompts are tokenized once, in the driver"), ge=0, description="Background processes loading data.")
    bf16: bool = fld(False, category="Optimizer", inactive=import_only("set model_args.dtype, or the strategy's mixed precision (fsdp2_train: param_dtype)"), description="Mixed precision in bfloat16 (implied by dtype bf16).")
    fp16: bool = fld(False, category="Optimizer", inactive=import_only("set model_args.dtype, or the strategy's mixed precision (fsdp2_train: param_dtype)"), description="Mixed precision in float16 (implied by dtype fp16).")
    tf32: bool | None = fld(None, category="Optimizer", description="Allow TF32 matmuls on Ampere+ GPUs.")
    optim: Literal["adamw_torch", "adamw", "adam", "sgd"] = fld(
        "adamw_torch", category="Optimizer", description="Optimizer algorithm."
    )


class SyntheticData(Section):
    task: Literal[SYNTHETIC_TASKS] = fld(  # type: ignore[valid-type]
        ..., category="Data", description="Code-generated verifiable task that produces the prompts."
    )
    num_prompts: int = fld(1024, category="Data", ge=1, description="How many distinct prompts to generate.")
    seed: int = fld(0, category="Data", ge=0, le=SEED_MAX, description="Seed of the prompt generator (same seed, same prompts).")
    kwargs: dict[str, Any] = fld_factory(
        dict, category="Data", description="Task-specific knobs (e.g. string length, digit count)."
    )


class DatasetFilter(Section):
    """ROLL's `dataset_filter` (its DatasetFilterConfig): which training rows are kept when the data is loaded."""

    source: str | None = fld(
        None, category="Data",
        description="Value of the rows' `source` column the filter applies to; rows of other sources are kept "
        "as they are. Unset: every row.",
    )
    min_difficulty: float | None = fld(
        None, category="Data",
        description="Keep rows whose `difficulty` column is >= this (inclusive); rows without a difficulty "
        "value are dropped when a bound is set. Unset: no lower bound.",
    )
    max_difficulty: float | None = fld(
        None, category="Data",
        description="Keep rows whose `difficulty` column is <= this (inclusive). Unset: no upper bound.",
    )
    num_samples: int = fld(
        0, category="Data", ge=0,
        description="Keep at most this many of the rows that pass, the first ones in file order; 0 keeps all.",
    )

    @model_validator(mode="after")
    def _bounds_in_order(self) -> DatasetFilter:
        low, high = self.min_difficulty, self.max_difficulty
        if low is not None and high is not None and low > high:
            raise ValueError(f"min_difficulty {low} is above max_difficulty {high}: no row could pass; "
                             "set min_difficulty <= max_difficulty")
        return self


def check_domain_probs(probs: dict[str, float] | None) -> dict[str, float] | None:
    """domain_interleave_probs: a non-empty mapping of probabilities in (0, 1] that sum to at most 1 (ROLL gives the
    last listed domain the rest of a batch, so a sum below 1 is ROLL's way of writing that; validation says the split)."""
    if probs is None:
        return None
    if not probs:
        raise ValueError("no domain listed; list each domain's share of a rollout batch, e.g. "
                         "{math_rule: 0.5, code_sandbox: 0.5}, or leave it unset")
    bad = {domain: p for domain, p in probs.items() if not 0 < p <= 1}
    if bad:
        raise ValueError(f"{', '.join(f'{d}: {p}' for d, p in bad.items())}: each probability must be in (0, 1]")
    total = sum(probs.values())
    if total > 1.0 + 1e-6:
        raise ValueError(f"the probabilities sum to {total:g}; they must sum to at most 1 (the last listed domain "
                         f"takes the rest of a batch) ({', '.join(f'{d}: {p}' for d, p in probs.items())})")
    return probs


def template_error(name: str) -> str:
    """Why `name` is not a prompt template here, with the valid names."""
    hint = (" (vision-language templates are not built: the pipelines feed text prompts)"
            if "vl" in name.lower() else "")
    return f"unknown template {name!r}{hint}; valid: {', '.join(CHAT_TEMPLATES + RAW_TEMPLATES)}"


def known_template(name: str | None) -> str | None:
    if name is not None and name not in CHAT_TEMPLATES + RAW_TEMPLATES:
        raise ValueError(template_error(name))
    return name


class DataArgs(Section):
    template: str = fld(
        "native", category="Data",
        description="Chat template used to build prompts; native (or ROLL's chatml, qwen2, qwen2_5, qwen3) uses "
        "the tokenizer's own chat template, none (or raw) feeds the raw prompt text.",
    )

    file_name: str | list[str] | None = fld(
        None, category="Data", path="read", common=True,
        description="Prompt file(s): JSON, JSONL, CSV or Parquet. Exclusive with synthetic.",
    )
    eval_file_name: str | list[str] | None = fld(
        None, category="Data", path="read", description="Held-out prompt file(s) used for evaluation."
    )
    dataset_dir: str | None = fld(None, category="Data", path="read", description="Folder that relative file names are read from.")
    prompt: str | None = fld(
        None, category="Data", description="Column holding the prompt text. Exclusive with messages."
    )
    messages: str | None = fld(
        None, category="Data",
        description="Column holding a chat (list of role/content messages). Exclusive with prompt.",
    )
    response: str | None = fld(
        None, category="Data",
        description="Column holding the reference answer the reward checks against (default: answer); a dotted path "
        "reads a nested field, as verl's reward_model.ground_truth and SkyRL's reward_spec.ground_truth.",
    )
    tag: str | None = fld(
        None, category="Data",
        description="Column naming each sample's domain; rewards pick samples by tag (tag_included).",
    )
    id: str | None = fld(None, category="Data", description="Column holding a stable sample id.")
    max_samples: int | None = fld(
        None, category="Data", ge=1, description="Use at most this many rows of the file (for debugging)."
    )
    preprocessing_num_workers: int | None = fld(
        None, category="Data", inactive=import_only("prompts are tokenized once, in the driver"), ge=1, description="Processes used to tokenize the dataset."
    )
    truncation_side: Literal["left", "right", "drop", "error"] = fld(
        "error", category="Data",
        description="What happens to prompts longer than prompt_length: cut from the left, from the right, "
        "leave the sample out (counted in one warning), or report an error.",
    )
    domain_interleave_probs: dict[str, float] | None = fld(
        None, category="Data",
        description="Share of each domain in every rollout batch (actor_train only; ROLL's rounding: "
        "floor(p x rollout_batch_size) prompts for each domain but the last listed, which takes the rest). "
        "Each domain is its own stream over its prompts (reshuffled each pass with shuffle), resumed exactly. "
        "A row's domain: its `domain` column, else the "
        "reward whose tag_included routes its tag, else its tag; rows of unlisted domains are never drawn.",
    )
    shuffle: bool = fld(True, category="Data", description="Shuffle prompts at each pass over the data.")
    synthetic: SyntheticData | None = fld(
        None, category="Data", description="Generate prompts with a built-in verifiable task instead of a file."
    )
    cache_path: str | None = fld(
        None, category="Data", inactive=import_only("prompts are tokenized once per run; nothing is cached"),
        path="write", description="Folder where ROLL caches the preprocessed dataset.",
    )
    dataset_type: str | list[str] | None = fld(
        None, category="Data", inactive=import_only("the file format follows the file extension"),
        description="ROLL's dataset loader type per file (e.g. json).",
    )
    interleave_probs: str | float | list[float] | None = fld(
        None, category="Data", inactive=import_only("the files of file_name are read one after another; no per-file "
                                                    "sampling weights"),
        description="ROLL: probability of sampling each file of file_name (comma-separated).",
    )
    enable_thinking: bool | None = fld(
        None, category="Data", inactive=import_only("the chat template is applied with its own default"),
        description="ROLL: thinking mode of the chat template (None: the template's default).",
    )
    rollout_dataloader_num_workers: int | None = fld(
        None, category="Data", ge=0, inactive=import_only("prompts are tokenized once, in the driver"),
        description="ROLL: DataLoader workers of the rollout scheduler.",
    )
    rollout_dataloader_batch_size: int | None = fld(
        None, category="Data", ge=1, inactive=import_only("prompts are tokenized once, in the driver"),
        description="ROLL: DataLoader batch size of the rollout scheduler.",
    )

    @field_validator("template")
    @classmethod
    def _known_template(cls, value: str) -> str:
        return known_template(value)

    @field_validator("domain_interleave_probs")
    @classmethod
    def _domain_probs(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        return check_domain_probs(value)


class GeneratingArgs(Section):
    max_new_tokens: int | None = fld(
        None, category="Generation", ge=1,
        description="Most tokens sampled per response; unset uses response_length.",
    )
    max_length: int | None = fld(
        None, category="Generation", inactive=import_only("max_new_tokens (or response_length) bounds each response"), ge=1,
        description="Cap on prompt plus response tokens; max_new_tokens wins when both are set.",
    )
    min_new_tokens: int | None = fld(None, category="Generation", ge=0, description="Fewest tokens sampled per response.")
    temperature: float = fld(
        1.0, category="Generation", ge=0, common=True, description="Softmax temperature; 0 means greedy decoding."
    )
    top_p: float = fld(1.0, category="Generation", gt=0, le=1, description="Nucleus sampling mass (1 disables it).")
    top_k: int = fld(-1, category="Generation", ge=-1, description="Keep only the k most likely tokens (-1 or 0 disables it).")
    min_p: float = fld(
        0.0, category="Generation", ge=0, le=1,
        description="Drop tokens whose probability is below min_p times the top token's (0 disables it).",
    )
    num_beams: int = fld(1, category="Generation", inactive=import_only("RL sampling does not use beam search"), ge=1, description="Beam search width; 1 samples without beams.")
    num_return_sequences: int = fld(
        1, category="Generation", inactive=import_only("training samples num_return_sequences_in_group and evaluation val_n_sample responses per prompt"), ge=1,
        description="Responses per prompt of one request; training rollouts use num_return_sequences_in_group "
        "and evaluation uses val_n_sample instead.",
    )
    repetition_penalty: float = fld(1.0, category="Generation", gt=0, description="Penalty on repeated tokens (1 = none).")
    length_penalty: float = fld(1.0, category="Generation", inactive=import_only("RL sampling does not use beam search"), description="Length exponent used by beam search.")
    do_sample: bool = fld(True, category="Generation", description="Sample tokens; false decodes greedily.")
    stop_strings: list[str] | None = fld(
        None, category="Generation", description="Generation stops once any of these strings appears."
    )
    stop_token_ids: list[int] | None = fld(
        None, category="Generation", description="Generation stops at any of these token ids (besides EOS)."
    )
    ignore_eos: bool = fld(False, category="Generation", description="Keep generating after the EOS token.")
    include_stop_str_in_output: bool = fld(
        True, category="Generation",
        inactive=import_only("a response always keeps the token that completes a stop string"),
        description="Keep the stop string at the end of the response (vLLM's sampling option).",
    )
    seed: int | None = fld(None, category="Generation", ge=0, le=SEED_MAX, description="Sampling seed; unset derives it from the pipeline seed.")


# ---------------------------------------------------------------------------------------------
# strategy configs, typed per strategy_name


MEGATRON_MOE = planned("Mixture-of-experts models under megatron_train / megatron_infer (Qwen2 and Llama are dense)")


class MegatronConfig(Section):
    tensor_model_parallel_size: int = fld(1, category="Strategy", ge=1, description="Tensor-parallel degree (TP).")
    pipeline_model_parallel_size: int = fld(1, category="Strategy", ge=1, description="Pipeline-parallel degree (PP).")
    virtual_pipeline_model_parallel_size: int | None = fld(
        None, category="Strategy", ge=1, description="Model chunks per pipeline stage (interleaved schedule)."
    )
    context_parallel_size: int = fld(
        1, category="Strategy", ge=1,
        description="Context-parallel degree (CP): long sequences split across ranks. This build runs 1 only.",
    )
    expert_model_parallel_size: int = fld(
        1, category="Strategy", ge=1, inactive=MEGATRON_MOE,
        description="Expert-parallel degree (EP) for mixture-of-experts layers.",
    )
    expert_tensor_parallel_size: int | None = fld(
        None, category="Strategy", ge=1, inactive=MEGATRON_MOE,
        description="Tensor-parallel degree inside experts; unset uses TP.",
    )
    sequence_parallel: bool = fld(
        False, category="Strategy", description="Shard layer-norm and dropout activations along the sequence (needs TP > 1)."
    )
    recompute_granularity: Literal["full", "selective"] | None = fld(
        None, category="Strategy",
        description="Activation recomputation: full recomputes whole layers, selective only core attention.",
    )
    recompute_method: Literal["uniform", "block"] | None = fld(
        None, category="Strategy", description="How layers are chosen for full recomputation."
    )
    recompute_num_layers: int | None = fld(
        None, category="Strategy", ge=1, description="Layers recomputed per chunk (uniform) or per stage (block)."
    )
    moe_layer_recompute: bool = fld(False, category="Strategy", inactive=MEGATRON_MOE,
                                    description="Recompute mixture-of-experts layers.")
    moe_token_dispatcher_type: Literal["allgather", "alltoall", "flex"] = fld(
        "allgather", category="Strategy", inactive=MEGATRON_MOE, description="How tokens are routed to experts."
    )
    moe_grouped_gemm: bool = fld(False, category="Strategy", inactive=MEGATRON_MOE,
                                 description="Run all local experts as one grouped GEMM.")
    moe_shared_expert_overlap: bool = fld(
        False, category="Strategy", inactive=MEGATRON_MOE, description="Overlap shared-expert compute with token dispatch."
    )
    overlap_grad_reduce: bool = fld(
        False, category="Strategy", description="Overlap gradient reduction with the backward pass."
    )
    overlap_param_gather: bool = fld(
        False, category="Strategy", description="Overlap parameter all-gather with the forward pass."
    )
    use_distributed_optimizer: bool = fld(
        False, category="Strategy", description="Shard optimizer state across data-parallel ranks (ZeRO-1 style)."
    )
    account_for_embedding_in_pipeline_split: bool = fld(
        False, category="Strategy", description="Count the embedding as a layer when splitting pipeline stages."
    )
    account_for_loss_in_pipeline_split: bool = fld(
        False, category="Strategy", description="Count the loss head as a layer when splitting pipeline stages."
    )
    param_offload: bool = fld(
        False, category="Strategy", inactive=planned("Megatron offload between phases"),
        description="Move parameters to CPU memory while the role is idle (colocation).",
    )
    grad_offload: bool = fld(False, category="Strategy", inactive=planned("Megatron offload between phases"),
                             description="Move gradients to CPU memory while idle.")
    optimizer_offload: bool = fld(
        False, category="Strategy", inactive=planned("Megatron offload between phases"),
        description="Move optimizer state to CPU memory while the role is idle.",
    )
    use_dist_checkpointing: bool = fld(
        False, category="Strategy",
        description="Load the initial weights from a Megatron distributed checkpoint instead of the HF model.",
    )
    dist_checkpointing_path: str | None = fld(
        None, category="Strategy", path="read", description="Folder of that distributed checkpoint."
    )
    use_flash_attn: bool | None = fld(
        None, category="Strategy", inactive=import_only("megatron-core picks its attention kernel"),
        description="ROLL: ask megatron-core for flash attention.",
    )
    moe_router_dtype: str | None = fld(
        None, category="Strategy", inactive=MEGATRON_MOE, description="ROLL: dtype of the MoE router's logits.",
    )
    fp8: str | None = fld(
        None, category="Strategy", inactive=import_only("FP8 training is not built; the role trains in model_args.dtype"),
        description="ROLL: megatron-core's FP8 format (e4m3, hybrid).",
    )
    fp8_recipe: str | None = fld(
        None, category="Strategy", inactive=import_only("FP8 training is not built; the role trains in model_args.dtype"),
        description="ROLL: megatron-core's FP8 scaling recipe (delayed, tensorwise, mxfp8, …).",
    )


class OffloadConfig(Section):
    device: Literal["none", "cpu", "nvme"] = fld("none", category="Strategy", description="Where state is offloaded.")
    pin_memory: bool = fld(False, category="Strategy", description="Use page-locked host memory for faster copies.")
    nvme_path: str | None = fld(None, category="Strategy", path="write", description="Folder on NVMe used when device is nvme.")
    buffer_count: int | None = fld(None, category="Strategy", ge=1, description="Offload buffers (nvme).")


class ZeroOptimization(Section):
    stage: Literal[0, 1, 2, 3] = fld(0, category="Strategy", description="ZeRO stage: what is sharded (0 none … 3 params).")
    offload_optimizer: OffloadConfig | None = fld(None, category="Strategy", description="Offload of optimizer state.")
    offload_param: OffloadConfig | None = fld(None, category="Strategy", description="Offload of parameters (stage 3).")
    overlap_comm: bool | None = fld(None, category="Strategy", description="Overlap gradient reduction with backward.")
    contiguous_gradients: bool | None = fld(None, category="Strategy", description="Copy gradients to one buffer.")
    allgather_partitions: bool | None = fld(None, category="Strategy", description="All-gather updated partitions.")
    allgather_bucket_size: AutoFloat | None = fld(None, category="Strategy", description="All-gather bucket (elements).")
    reduce_scatter: bool | None = fld(None, category="Strategy", description="Reduce gradients with reduce-scatter.")
    reduce_bucket_size: AutoFloat | None = fld(None, category="Strategy", description="Reduction bucket (elements).")
    round_robin_gradients: bool | None = fld(None, category="Strategy", description="Round-robin gradient partitioning.")
    sub_group_size: AutoFloat | None = fld(None, category="Strategy", description="Parameters per optimizer sub-group.")
    stage3_prefetch_bucket_size: AutoFloat | None = fld(None, category="Strategy", description="Stage-3 prefetch size.")
    stage3_param_persistence_threshold: AutoFloat | None = fld(
        None, category="Strategy", description="Stage-3: parameters smaller than this stay unpartitioned."
    )
    stage3_max_live_parameters: AutoFloat | None = fld(
        None, category="Strategy", description="Stage-3: most parameters resident on a GPU at once."
    )
    stage3_max_reuse_distance: AutoFloat | None = fld(
        None, category="Strategy", description="Stage-3: keep a parameter if it is reused within this distance."
    )
    stage3_gather_16bit_weights_on_model_save: bool | None = fld(
        True, category="Strategy",
        inactive=import_only("deepspeed_train always gathers the full weights for the HF checkpoint and weight sync"),
        description="Stage-3: gather full 16-bit weights when saving.",
    )
    zero_hpz_partition_size: int | None = fld(
        None, category="Strategy", ge=1, description="Hierarchical partition size (ZeRO++ hpZ)."
    )

    @model_validator(mode="after")
    def _offload_needs_partitions(self) -> ZeroOptimization:
        """DeepSpeed offloads only what ZeRO partitions: optimizer state from stage 1, parameters at stage 3."""
        if self.offload_optimizer is not None and self.offload_optimizer.device != "none" and self.stage < 1:
            raise ValueError("offload_optimizer needs stage 1, 2 or 3 (stage 0 keeps whole optimizer "
                             "state on every rank); set stage or offload_optimizer.device: none")
        if self.offload_param is not None and self.offload_param.device != "none" and self.stage != 3:
            raise ValueError(f"offload_param needs stage 3 (only stage 3 partitions parameters), got stage "
                             f"{self.stage}; set stage: 3 or offload_param.device: none")
        return self


class PrecisionToggle(Section):
    enabled: AutoBool = fld("auto", category="Strategy", description="Turn this precision on, off, or follow model dtype.")
    loss_scale: float | None = fld(None, category="Strategy", description="fp16: static loss scale (0 = dynamic).")
    loss_scale_window: int | None = fld(None, category="Strategy", description="fp16: steps between scale raises.")
    initial_scale_power: int | None = fld(None, category="Strategy", description="fp16: initial scale is 2^power.")
    hysteresis: int | None = fld(None, category="Strategy", description="fp16: overflows tolerated before lowering scale.")
    min_loss_scale: float | None = fld(None, category="Strategy", description="fp16: lowest dynamic loss scale.")


class DeepSpeedConfig(Section):
    """DeepSpeed's JSON config, the part RL training uses (deepspeed_train / deepspeed_infer). `auto` lets
    the trainer fill a value; the batch keys and gradient_clipping are derived (trainer.config.presets)."""

    train_batch_size: AutoInt | None = fld(None, category="Strategy", description="Global batch; keep auto.")
    train_micro_batch_size_per_gpu: AutoInt | None = fld(
        None, category="Strategy", description="Micro-batch per GPU; keep auto (from training_args)."
    )
    gradient_accumulation_steps: AutoInt | None = fld(
        None, category="Strategy", description="Accumulation steps; keep auto (from training_args)."
    )
    gradient_clipping: AutoFloat | None = fld(
        None, category="Strategy", description="Gradient norm clip; keep auto (from training_args.max_grad_norm)."
    )
    zero_optimization: ZeroOptimization = fld_factory(
        ZeroOptimization, category="Strategy", description="ZeRO sharding and offload settings."
    )
    bf16: PrecisionToggle | None = fld(None, category="Strategy", description="bfloat16 mixed precision.")
    fp16: PrecisionToggle | None = fld(None, category="Strategy", description="float16 mixed precision.")
    zero_allow_untested_optimizer: bool | None = fld(
        True, category="Strategy",
        description="Allow optimizers DeepSpeed has not tested with ZeRO (training_args.optim: sgd needs it).",
    )
    steps_per_print: int | None = fld(None, category="Strategy", description="DeepSpeed's own logging interval.")
    wall_clock_breakdown: bool | None = fld(None, category="Strategy", description="Print timing breakdowns.")

    @model_validator(mode="after")
    def _bf16_has_no_loss_scale(self) -> DeepSpeedConfig:
        given = self.bf16.model_dump(exclude_none=True, exclude={"enabled"}) if self.bf16 is not None else {}
        scaling = sorted(given)
        if scaling:
            raise ValueError(f"bf16.{scaling[0]}: bf16 needs no loss scaling; loss-scale settings belong under fp16")
        return self


def torch_dtype_alias(cls: type, value: Any) -> Any:
    """ROLL writes torch's names (float32, bfloat16, float16)."""
    names = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16"}
    return names.get(value, value) if isinstance(value, str) else value


class Fsdp2Config(Section):
    reshard_after_forward: bool | int = fld(
        True, category="Strategy",
        description="Free gathered parameters after forward (true), keep them (false, like ZeRO-2), or reshard "
        "to this smaller group size.",
    )
    cpu_offload: bool = fld(False, category="Strategy", description="Keep parameters and optimizer state in CPU memory.")
    param_dtype: Dtype | None = fld(None, category="Strategy", description="Mixed precision: dtype of gathered parameters.")
    reduce_dtype: Dtype | None = fld(None, category="Strategy", description="Mixed precision: dtype of gradient reduction.")
    fsdp_size: int = fld(
        -1, category="Strategy",
        description="Ranks that shard one model copy (hybrid sharding); -1 shards across the whole role.",
    )
    offload_pin_memory: bool = fld(False, category="Strategy", description="Pin CPU memory used for offload.")
    ulysses_sequence_parallel_size: int = fld(
        1, category="Strategy", inactive=planned("Ulysses sequence parallelism"), ge=1,
        description="Ranks that split each sequence (Ulysses attention); data-parallel size is world / this.",
    )
    offload_policy: bool = fld(
        False, category="Strategy", acts_through="cpu_offload",
        description="ROLL's name for FSDP2's CPU offload policy; true turns cpu_offload on.",
    )
    wrap_policy: dict[str, Any] | None = fld(
        None, category="Strategy", inactive=import_only("FSDP2 shards each decoder layer; the wrap policy is fixed"),
        description="Which modules are sharded as units (ROLL: transformer_layer_cls_to_wrap).",
    )
    use_batched_model_update: bool = fld(
        False, category="Strategy",
        inactive=import_only("weights reach the rollout engine in buckets after every update, whatever this says"),
        description="ROLL: send updated weights to the rollout engine in batches.",
    )

    _torch_dtype_names = field_validator("param_dtype", "reduce_dtype", mode="before")(torch_dtype_alias)

    @model_validator(mode="after")
    def _offload_policy_offloads(self) -> Fsdp2Config:
        if self.offload_policy and "cpu_offload" not in self.model_fields_set:
            self.cpu_offload = True
        return self


class TorchTrainConfig(Section):
    """The single-process strategy: one device, plain PyTorch (as a forward-only role too)."""

    param_dtype: Dtype | None = fld(
        None, category="Strategy",
        description="Mixed precision: forward and backward under autocast in this dtype, master weights and "
        "optimizer state in fp32 (fp16 adds a gradient scaler). Unset: the role's model_args.dtype.",
    )

    _torch_dtype_names = field_validator("param_dtype", mode="before")(torch_dtype_alias)


class HfInferConfig(Section):
    """transformers `generate` needs no engine knobs."""


class VllmConfig(Section):
    gpu_memory_utilization: float = fld(
        0.6, category="Strategy", gt=0, le=1, description="Fraction of GPU memory vLLM may take (weights + KV cache)."
    )
    block_size: int | None = fld(
        None, category="Strategy", ge=1,
        description="Tokens per KV-cache block; unset lets the attention backend choose (CPU needs a multiple of 32).",
    )
    max_model_len: int | None = fld(
        None, category="Strategy", ge=1,
        description="Longest prompt + response the engine accepts; unset derives it from the model config.",
    )
    load_format: Literal["auto", "dummy", "safetensors", "pt"] = fld(
        "auto", category="Strategy",
        description="How the engine loads weights; dummy skips loading since the trainer pushes weights at start.",
    )
    tensor_parallel_size: int = fld(1, category="Strategy", ge=1, description="GPUs one engine shards a model over.")
    pipeline_parallel_size: int = fld(1, category="Strategy", inactive=planned("pipeline-parallel vLLM engines"), ge=1, description="Pipeline stages of one engine.")
    enforce_eager: bool = fld(
        False, category="Strategy",
        description="Disable CUDA graphs and torch.compile (faster start, slower decode; on CPU start takes seconds).",
    )
    enable_prefix_caching: bool = fld(False, category="Strategy", description="Reuse KV cache of shared prompt prefixes.")
    enable_chunked_prefill: bool | None = fld(None, category="Strategy", description="Split long prefills into chunks.")
    sleep_level: Literal[1, 2] = fld(
        1, category="Strategy",
        description="What sleep frees when colocated: 1 offloads weights and drops KV cache, 2 drops both.",
    )
    max_num_batched_tokens: int | None = fld(None, category="Strategy", ge=1, description="Token budget per engine step.")
    max_num_seqs: int | None = fld(None, category="Strategy", ge=1, description="Most sequences decoded concurrently.")
    disable_log_stats: bool = fld(True, category="Strategy", description="Silence periodic engine statistics.")
    online_quantization: str | None = fld(
        None, category="Strategy",
        inactive=import_only("quantized rollouts are not built; the engine generates in model_args.dtype"),
        description="ROLL: quantize the engine's weights when they are loaded (e.g. Ascend's ascend_mxfp8).",
    )
    online_quantization_config: dict[str, Any] | None = fld(
        None, category="Strategy",
        inactive=import_only("quantized rollouts are not built; the engine generates in model_args.dtype"),
        description="ROLL: settings of online_quantization (e.g. group_size).",
    )
    kv_cache_memory_bytes: int | None = fld(
        None, category="Strategy", ge=1,
        description="KV-cache size in bytes, instead of what gpu_memory_utilization leaves. Unset on CPU: 1 GiB "
        "(vLLM would otherwise reserve most of the node's memory; VLLM_CPU_KVCACHE_SPACE in GiB overrides).",
    )
    enable_lora: bool = fld(
        False, category="Strategy",
        description="Serve actor_train's LoRA adapter with vLLM's LoRA support (LoRARequest) on the base weights "
        "the engine loaded: each sync sends the adapter only, not the merged full weights. Needs actor_train's "
        "lora_target, no additional_target, and a load_format that loads the base weights.",
    )
    max_lora_rank: Literal[1, 8, 16, 32, 64, 128, 256, 320, 512] | None = fld(
        None, category="Strategy",
        description="vLLM's largest servable LoRA rank (with enable_lora); unset: the smallest of vLLM's sizes "
        ">= actor_train's lora_rank.",
    )


class SglangConfig(Section, inactive=planned("the sglang engine")):
    mem_fraction_static: float = fld(
        0.8, category="Strategy", gt=0, le=1, description="Fraction of GPU memory for weights and KV cache."
    )
    load_format: Literal["auto", "dummy", "safetensors", "pt"] = fld(
        "auto", category="Strategy", description="How weights are loaded; dummy waits for the trainer's weights."
    )
    tp_size: int = fld(1, category="Strategy", ge=1, description="GPUs one engine shards a model over.")
    context_length: int | None = fld(
        None, category="Strategy", ge=1, description="Longest prompt + response; unset derives it from the model."
    )
    attention_backend: str | None = fld(None, category="Strategy", description="Attention kernel (e.g. flashinfer, triton).")
    disable_cuda_graph: bool = fld(False, category="Strategy", description="Disable CUDA graphs.")
    enable_memory_saver: bool = fld(True, category="Strategy", description="Allow releasing memory while colocated.")
    max_running_requests: int | None = fld(None, category="Strategy", ge=1, description="Most concurrent requests.")


def _none_as_empty(cls: type, value: Any) -> Any:
    return {} if value is None else value  # ROLL writes `strategy_config: ~` for "no settings"


def _strategy(name: str, config_cls: type[Section], description: str) -> type[Section]:
    """One member of the strategy_args union: strategy_name selects the strategy_config model."""
    return type(
        f"StrategyArgs_{name}",
        (Section,),
        {
            "__annotations__": {"strategy_name": Literal[name], "strategy_config": config_cls},
            "__doc__": description,
            "strategy_name": fld(
                ..., category="Strategy", description="Which training or inference backend runs this role."
            ),
            "strategy_config": fld_factory(
                config_cls, category="Strategy", description=f"Settings of the {name} strategy."
            ),
            "_empty_config": field_validator("strategy_config", mode="before")(_none_as_empty),
            "__module__": __name__,
        },
    )


STRATEGY_CONFIG_MODELS: dict[str, type[Section]] = {
    "megatron_train": MegatronConfig,
    "megatron_infer": MegatronConfig,
    "deepspeed_train": DeepSpeedConfig,
    "deepspeed_infer": DeepSpeedConfig,
    "fsdp2_train": Fsdp2Config,
    "fsdp2_infer": Fsdp2Config,
    "torch_train": TorchTrainConfig,
    "hf_infer": HfInferConfig,
    "vllm": VllmConfig,
    "sglang": SglangConfig,
}
STRATEGY_ARGS_MODELS: dict[str, type[Section]] = {
    name: _strategy(name, cfg, f"strategy_args for {name}") for name, cfg in STRATEGY_CONFIG_MODELS.items()
}
# The tag strategy_name picks the typed strategy_config model.
StrategyArgs = Annotated[
    Union[tuple(STRATEGY_ARGS_MODELS.values())],  # noqa: UP007
    Field(discriminator="strategy_name"),
]


# ---------------------------------------------------------------------------------------------
# workers


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
    judge_model_type: Literal["api", "inference"] | None = fld(
        None, category="Reward processing",
        description="llm_judge: api calls an OpenAI-compatible judge_api_url (POST …/chat/completions); inference "
        "generates the judgment with this reward section's own model (model_args, generating_args) on its "
        "strategy: hf_infer, or vllm with its strategy_config.",
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


MismatchLevel = Literal["token", "segment", "geometric", "sequence"]


class TrainInferISWeightConfig(Section):
    """ROLL's train_infer_correction.is_weight (trainer.algorithms.train_infer, docs/decisions/0040)."""

    enabled: bool = fld(
        False, category="Loss",
        description="Weight each token's policy-gradient term by the train-infer importance ratio rho = "
        "pi_old / mu (actor_train's recomputed log-prob over the rollout engine's), clamped to [0, upper_bound].",
    )
    weight_type: MismatchLevel = fld(
        "token", category="Loss",
        description="Level of rho: token (per token), geometric (exp of the sample's mean log-ratio), sequence "
        "(exp of its sum), segment (exp of the mean over each run of consecutive response tokens: a turn).",
    )
    upper_bound: float | None = fld(
        1.2, category="Loss", gt=0, description="Clamp of the weight (truncated importance sampling); null: untruncated.",
    )
    detach: bool = fld(
        True, category="Loss",
        inactive=import_only("the weight comes from two constant log-probs and never carries a gradient, as in ROLL"),
        description="ROLL: detach the weight from the graph.",
    )


class TrainInferFilterConfig(Section):
    """One of ROLL's train_infer_correction.filters: tokens outside the band leave the actor's loss."""

    enabled: bool = fld(False, category="Loss", description="Apply this filter.")
    agg_type: MismatchLevel = fld(
        "token", category="Loss",
        description="Level the ratio / difference is read at: token, geometric (sample mean of the log-ratio / of "
        "the difference), sequence (sum), segment (mean over each run of consecutive response tokens).",
    )
    ratio_enabled: bool = fld(True, category="Loss",
                              description="Keep only tokens with ratio_low <= rho <= ratio_high (rho = pi_old / mu).")
    ratio_low: float = fld(0.8, category="Loss", description="Lower bound of rho (inclusive).")
    ratio_high: float = fld(1.2, category="Loss", gt=0, description="Upper bound of rho (inclusive).")
    diff_enabled: bool = fld(
        False, category="Loss",
        description="Keep only tokens with diff_low <= pi_old - mu <= diff_high (probabilities of the sampled token).",
    )
    diff_low: float = fld(-0.2, category="Loss", description="Lower bound of pi_old - mu (inclusive).")
    diff_high: float = fld(0.2, category="Loss", description="Upper bound of pi_old - mu (inclusive).")

    @model_validator(mode="after")
    def _bands_not_empty(self) -> TrainInferFilterConfig:
        for name in ("ratio", "diff"):
            low, high = getattr(self, f"{name}_low"), getattr(self, f"{name}_high")
            if low > high:
                raise ValueError(f"{name}_low {low} > {name}_high {high}: no token would pass; swap them")
        return self


class TrainInferCorrectionConfig(Section):
    """ROLL's train_infer_correction: IS weights and filters of actor_train's vs the engine's log-probs (0040)."""

    is_weight: TrainInferISWeightConfig = fld_factory(
        TrainInferISWeightConfig, category="Loss", description="Importance weight of each token's policy-gradient term.",
    )
    filters: list[TrainInferFilterConfig] = fld_factory(
        list, category="Loss", description="Filters applied one after the other to the actor's loss mask.",
    )

    def acts(self) -> bool:
        """Whether it changes anything: the weight is on, or an enabled filter checks a band."""
        return self.is_weight.enabled or any(f.enabled and (f.ratio_enabled or f.diff_enabled) for f in self.filters)


class CheckpointConfig(Section):
    type: Literal["file_system"] = fld(
        "file_system", category="Checkpointing", description="Where checkpoints are stored (a file system path)."
    )
    output_dir: str | None = fld(
        None, category="Checkpointing", path="write", description="Folder for checkpoints; unset uses <output_dir>/checkpoints."
    )


WATCHED_PHASES = ("generate", "reward", "old_log_probs", "ref_log_probs", "values", "advantages", "critic_update",
                  "actor_update", "weight_sync", "eval", "checkpoint")


class WatchdogConfig(Section):
    """PolicyLab's own: when a step's phase counts as stalled, and what then (trainer.pipeline.watchdog)."""

    factor: float = fld(10.0, category="Run supervision", gt=1,
                        description="A phase is stalled past factor × the median of its last durations.")
    floor_s: float = fld(60.0, category="Run supervision", gt=0,
                         description="The smallest learned bound, in seconds (short phases vary a lot).")
    first_s: float = fld(1800.0, category="Run supervision", gt=0,
                         description="The bound of a phase before it has run min_samples times (start-up "
                         "compiles, loads and warms up).")
    window: int = fld(20, category="Run supervision", ge=1, description="Durations the median is taken over.")
    min_samples: int = fld(3, category="Run supervision", ge=1,
                           description="Runs of a phase before its bound is learned from them.")
    phase_timeout_s: dict[str, float] = fld_factory(
        dict, category="Run supervision",
        description=f"A fixed bound in seconds per phase, instead of the learned one; phases: {', '.join(WATCHED_PHASES)}.",
    )
    on_stall: Literal["wait", "fail", "restart_from_checkpoint"] = fld(
        "wait", category="Run supervision",
        description="wait: report the stall (phase, ranks, stacks) and keep waiting; fail: end the attempt, no "
        "retry; restart_from_checkpoint: end it, and the platform resumes the run from its latest checkpoint.",
    )
    poll_s: float = fld(1.0, category="Run supervision", gt=0, le=60, description="How often the watchdog looks.")
    grace_s: float = fld(30.0, category="Run supervision", gt=0,
                         description="After fail / restart, how long the driver may take to stop before it exits.")

    @field_validator("phase_timeout_s")
    @classmethod
    def _known_phases(cls, value: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(value) - set(WATCHED_PHASES))
        if unknown:
            raise ValueError(f"unknown phase(s) {unknown}; valid: {', '.join(WATCHED_PHASES)}")
        bad = sorted(name for name, seconds in value.items() if not seconds > 0)
        if bad:
            raise ValueError(f"bounds must be > 0 seconds: {bad}")
        return value


class HealthConfig(Section):
    """PolicyLab's own: the run-health alerts checked on every step (trainer.pipeline.health; the defaults'
    sources: docs/decisions/0050-run-health-alerts.md)."""

    enabled: bool = fld(True, category="Run supervision", description="Check every step for the signs of a "
                        "failing run and emit an `alert` event when one trips.")
    disabled: list[str] = fld_factory(
        list, category="Run supervision",
        description=f"Alert kinds switched off; kinds: {', '.join(ALERT_KINDS)}.",
    )
    rearm_steps: int = fld(10, category="Run supervision", ge=1,
                           description="An alert fires again only after this many steps without its condition "
                           "(one alert per episode; 1: again at the first trip after a clear step).")
    entropy_min: float = fld(0.05, category="Run supervision", ge=0,
                             description="entropy_collapse: the mean token entropy (nats) below this.")
    length_clip_ratio_max: float = fld(0.5, category="Run supervision", ge=0, le=1,
                                       description="length_cap: the share of responses cut at the length cap at "
                                       "or above this ...")
    length_clip_ratio_rise: float = fld(0.25, category="Run supervision", ge=0, le=1,
                                        description="... and this much above the first step's share.")
    repetition_ngram: int = fld(4, category="Run supervision", ge=1,
                                description="repetition: the n of the token n-grams counted.")
    repetition_max: float = fld(0.5, category="Run supervision", gt=0, le=1,
                                description="repetition: a response repeats when this share of its n-grams are "
                                "repeats ...")
    repetition_share_max: float = fld(0.25, category="Run supervision", gt=0, le=1,
                                      description="... and the alert trips when this share of the step's "
                                      "responses repeat.")
    format_error_max: float = fld(0.5, category="Run supervision", ge=0, le=1,
                                  description="format_collapse (agentic): env/format_error_rate, the share of replies "
                                  "whose action did not parse, at or above this ...")
    format_error_rise: float = fld(0.25, category="Run supervision", ge=0, le=1,
                                   description="... and this much above the first step's rate.")
    eval_divergence: float = fld(0.05, category="Run supervision", gt=0,
                                 description="reward_up_eval_down: between two evaluations the training reward "
                                 "rose and the eval reward fell, each by at least this.")
    ppo_kl_max: float = fld(0.1, category="Run supervision", gt=0,
                            description="kl_blowup: actor/ppo_kl above this.")
    clipfrac_max: float = fld(0.3, category="Run supervision", gt=0, le=1,
                              description="kl_blowup: actor/clipfrac (share of clipped token ratios) above this.")
    grad_norm_factor: float = fld(10.0, category="Run supervision", gt=1,
                                  description="grad_spike: actor/grad_norm above this × the median of the last "
                                  "grad_norm_window steps.")
    grad_norm_window: int = fld(20, category="Run supervision", ge=1,
                                description="grad_spike: steps the median is taken over.")
    grad_norm_min_steps: int = fld(5, category="Run supervision", ge=1,
                                   description="grad_spike: steps seen before the check starts.")
    zero_variance_max: float = fld(0.9, category="Run supervision", gt=0, le=1,
                                   description="zero_variance: the share of groups whose samples all got one "
                                   "reward at or above this ...")
    zero_variance_steps: int = fld(3, category="Run supervision", ge=1,
                                   description="... on this many steps running (nothing left to learn).")
    logprob_diff_max: float = fld(0.1, category="Run supervision", gt=0,
                                  description="logprob_mismatch: rollout/logprob_diff_mean (engine vs trainer "
                                  "token log-probs) above this.")

    @field_validator("disabled")
    @classmethod
    def _known_kinds(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(ALERT_KINDS))
        if unknown:
            raise ValueError(f"unknown alert kind(s) {unknown}; valid: {', '.join(ALERT_KINDS)}")
        return value


# ---------------------------------------------------------------------------------------------
# agentic


class RewardNormalization(Section):
    grouping: Literal["state", "batch", "inductive"] = fld(
        "state", category="Agentic",
        description="Which trajectories are normalised together: same start state, whole batch, or by tag. "
        "ROLL main's traj_group_id (one env group's trajectories, which share the start state) reads as state, "
        "its tags (the env tag column ROLL groups by) as inductive.",
    )
    method: Literal["asym_clip", "identity", "mean_std", "mean"] = fld(
        "identity", category="Agentic",
        description="Normalisation inside a group: none, minus the mean, standardised, or standardised and "
        "clipped to [-1, 3] (docs/algorithms.md).",
    )

    @field_validator("grouping", mode="before")
    @classmethod
    def _roll_main_grouping(cls, value: Any) -> Any:
        return {"traj_group_id": "state", "tags": "inductive"}.get(value, value) if isinstance(value, str) else value


class EnvManagerConfig(Section):
    env_groups: int = fld(1, category="Agentic", ge=1, description="Environment groups, played in lockstep.")
    group_size: int = fld(
        1, category="Agentic", ge=1,
        description="Environments per group; all share one configuration and seed, so they form one "
        "comparison group.",
    )
    tags: list[str] = fld_factory(list, category="Agentic", description="Environment names (keys of custom_envs).")
    n_groups: list[int] | None = fld(
        None, category="Agentic", description="Groups given to each tag; unset splits env_groups evenly."
    )
    max_traj_per_env: int = fld(
        -1, category="Agentic",
        description="Most trajectories one environment may play per batch (-1: no limit); a batch needing "
        "more is refused.",
    )
    max_env_num_per_worker: int = fld(
        0, category="Agentic", ge=0, inactive=import_only("environments run in the driver process, all in lockstep"),
        description="Environments per worker (0: all).",
    )
    format_penalty: float = fld(
        0.0, category="Agentic", le=0, description="Reward added (a value <= 0) when a reply breaks the action format."
    )
    worker_cls: str | None = fld(
        None, category="Agentic", description="ROLL env-manager class path (looked up in a registry, never imported)."
    )
    num_env_groups: int | None = fld(
        None, category="Agentic", ge=1, acts_through="env_groups",
        description="ROLL main's name of env_groups (copied into it when env_groups is unset).",
    )
    num_groups_partition: list[int] | None = fld(
        None, category="Agentic", acts_through="n_groups",
        description="ROLL main's name of n_groups (copied into it when n_groups is unset).",
    )
    group_size_redundancy: int = fld(
        0, category="Agentic", ge=0, inactive=import_only("groups are played in lockstep; none is abandoned"),
        description="Extra environments per group whose late trajectories ROLL may drop.",
    )
    llm_proxy: dict[str, Any] = fld_factory(
        dict, category="Agentic", inactive=import_only("the policy being trained plays every environment"),
        description="ROLL's LLM proxy (policy, openai or random) that plays the environments.",
    )
    group_filter_cls: str | None = fld(
        None, category="Agentic", inactive=import_only("classes named in a config are never imported"),
        description="ROLL's group-level filter class.",
    )
    system_envs: dict[str, str] = fld_factory(
        dict, category="Agentic", inactive=import_only("environments run in the driver process"),
        description="Environment variables of ROLL's environment workers.",
    )
    generating_args: GeneratingArgs | None = fld(
        None, category="Agentic", inactive=import_only("environments are played with actor_infer.generating_args"),
        description="ROLL: sampling settings of this env manager's rollouts.",
    )

    @model_validator(mode="after")
    def _roll_main_names(self) -> EnvManagerConfig:
        if self.num_env_groups is not None and "env_groups" not in self.model_fields_set:
            self.env_groups = self.num_env_groups
        if self.num_groups_partition is not None and "n_groups" not in self.model_fields_set:
            self.n_groups = list(self.num_groups_partition)
        return self


class CustomEnvConfig(Section):
    env_type: str = fld(
        ..., category="Agentic",
        description="Registered environment type: frozen_lake, sokoban, calculator or tool_use (tool calls in "
        "the Qwen/Hermes format).",
    )
    max_steps: int | None = fld(
        None, category="Agentic", ge=1,
        description="Replies before the episode is cut off (unset: max_actions_per_traj, else 10).",
    )
    max_actions_per_traj: int | None = fld(
        None, category="Agentic", ge=1,
        description="Valid actions before the episode is cut off; replies that break the format do not count.",
    )
    max_tokens_per_step: int | None = fld(
        None, category="Agentic", ge=1,
        description="Tokens sampled per turn (unset: actor_infer's max_new_tokens, else response_length).",
    )
    env_instruction: str | None = fld(
        None, category="Agentic",
        description="Text shown before the first observation (unset: the environment's own; empty: none).",
    )
    env_config: dict[str, Any] = fld_factory(
        dict, category="Agentic", description="Settings of the environment type (docs: trainer/envs)."
    )
    env_manager_cls: str | None = fld(
        None, category="Agentic",
        description="ROLL's env-manager class for this environment (it overrides the env manager's worker_cls): "
        "StepEnvManager plays it step-wise (a fresh prompt each turn with the recent turns as text, see "
        "history_length; one training row per reply); TrajEnvManager or unset, one multi-turn conversation per row.",
    )
    history_length: int | None = fld(
        None, category="Agentic", ge=1,
        description="Step-wise environments (StepEnvManager): as in ROLL, each turn's prompt shows the last "
        "history_length − 1 turns (observation, reply, reward) before the current observation; unset: none.",
    )
    use_thread_lock: bool = fld(False, category="Agentic", inactive=import_only("environments run in the driver"),
                                description="ROLL: serialise this environment's steps across threads.")
    agent_system_template: str | None = fld(
        None, category="Agentic", inactive=import_only("prompts come from env_instruction and the chat template"),
        description="ROLL's system prompt for this environment.",
    )
    agent_template: str | None = fld(
        None, category="Agentic", inactive=import_only("prompts come from env_instruction and the chat template"),
        description="ROLL's per-turn prompt template ({observation}, {turn_idx}, …).",
    )
    max_env_step_concurrent: int | None = fld(
        None, category="Agentic", ge=1, inactive=import_only("environments run in the driver"),
        description="ROLL: most concurrent steps of this environment type.",
    )
    tool_wrapper: dict[str, Any] | None = fld(
        None, category="Agentic",
        inactive=planned("ROLL's tool_wrapper (tools such as python_code around an environment; ROLL's examples wrap "
                         "GEM math and QA environments, which are not built: tool calls act in env_type tool_use)"),
        description="ROLL: tools wrapped around this environment (wrapper_args, tool_configs).",
    )
    agent_runner_cls: str | None = fld(
        None, category="Agentic", inactive=import_only("classes named in a config are never imported; environments "
                                                       "are played by the trajectory manager"),
        description="ROLL: the AgentRunner class that plays this environment (proxy env managers).",
    )


# ---------------------------------------------------------------------------------------------
# root


class PipelineConfig(Section):
    """The whole experiment: pipeline keys at the top, one section per worker role."""

    # Experiment
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
    system_envs: dict[str, str] = fld_factory(
        dict, category="Cluster", description="Environment variables set in every worker process."
    )
    track_with: Literal["tensorboard", "wandb", "stdout", "swanlab", "none"] = fld(
        "tensorboard", category="Logging", description="Extra experiment tracker (events.jsonl is always written)."
    )
    tracker_kwargs: dict[str, Any] = fld_factory(
        dict, category="Logging", description="Arguments of the tracker (e.g. log_dir, project, entity)."
    )

    # Cluster
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

    # Schedule
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

    # Batch sizes and lengths
    rollout_batch_size: int = fld(128, category="Batch sizes", ge=1, common=True, description="Prompts sampled per step.")
    val_batch_size: int = fld(128, category="Batch sizes", ge=1, description="Prompts per evaluation batch.")
    num_return_sequences_in_group: int = fld(
        1, category="Batch sizes", ge=1, common=True,
        description="Responses sampled per prompt (the GRPO group); samples per step = rollout_batch_size x this.",
    )
    prompt_length: int = fld(1024, category="Batch sizes", ge=1, common=True, description="Longest prompt in tokens.")
    response_length: int = fld(1024, category="Batch sizes", ge=1, common=True, description="Longest response in tokens.")
    sequence_length: int | None = fld(
        None, category="Batch sizes", inactive=import_only("prompt_length + response_length bound every sequence"), ge=1, description="Longest prompt + response; unset is their sum."
    )

    # Scheduling of generation requests
    generate_opt_level: Literal[0, 1] = fld(
        1, category="Generation", inactive=import_only("ROLL's request scheduler; our engines take each batch whole"),
        description="0 sends the whole batch to generate at once; 1 streams requests through a scheduler.",
    )
    is_num_return_sequences_expand: bool = fld(
        False, category="Generation", inactive=import_only("ROLL's request scheduler; our engines take each batch whole"),
        description="Send each prompt n times with one sample each instead of one request asking for n samples.",
    )
    max_running_requests: int = fld(128, category="Generation", inactive=import_only("ROLL's request scheduler; our engines take each batch whole"), ge=1, description="Most requests in flight per engine.")
    is_use_additional_prompts: bool = fld(
        False, category="Generation",
        description="Dynamic sampling: draw extra prompts to replace the groups a reward's query_filter_config "
        "drops, until rollout_batch_size groups pass (sync rollout).",
    )
    max_additional_running_prompts: int = fld(
        16, category="Generation", ge=0,
        description="Extra prompts one step may draw beyond rollout_batch_size; past it, filtered groups fill "
        "the batch and stay out of the loss (when no group passed, the actor does not step).",
    )
    async_generation_ratio: float = fld(
        0.0, category="Async rollout", ge=0,
        description="ROLL's knob: rollout batches generation may run ahead of the step being trained (whole "
        "numbers only). With rollout_mode unset: 0 is sync, 1 one_step_off, 2 or more async with that lookahead.",
    )

    # Asynchronous rollout (docs/decisions/0017)
    rollout_mode: Literal["sync", "one_step_off", "async"] | None = fld(
        None, category="Async rollout",
        description="sync: generate with the current weights, then train. one_step_off: batch k+1 is generated "
        "while step k trains (one policy version old). async: a producer keeps generating, up to "
        "async_generation_ratio batches ahead, with the latest synced weights. Unset follows async_generation_ratio. "
        "Overlap needs actor_infer and actor_train on different devices.",
    )
    max_staleness: int | None = fld(
        None, category="Async rollout", ge=0,
        description="Policy versions a trained sample may lag behind the policy being updated; older batches are "
        "treated as stale_samples says. Unset: the lookahead (1 for one_step_off), which no batch exceeds.",
    )
    stale_samples: Literal["drop", "downweight"] = fld(
        "drop", category="Async rollout",
        description="Batches older than max_staleness: drop (discard them and regenerate their prompts with the "
        "latest weights; no prompt is lost) or downweight (train them with loss weight "
        "stale_sample_decay ^ (staleness - max_staleness)).",
    )
    stale_sample_decay: float = fld(
        0.5, category="Async rollout", ge=0, le=1,
        description="Loss weight factor per policy version beyond max_staleness (stale_samples: downweight).",
    )
    off_policy_correction: Literal["none", "tis", "mask"] = fld(
        "tis", category="Async rollout",
        description="Correction of samples with staleness > 0, with rho = pi_old / mu per token (mu: the rollout "
        "engine's log-probs, pi_old: actor_train's recompute): tis weights the policy-gradient term by "
        "min(rho, off_policy_cap); mask leaves tokens with rho outside [1/cap, cap] out of the loss; none trusts the "
        "PPO ratio alone.",
    )
    off_policy_cap: float = fld(
        2.0, category="Async rollout", gt=1,
        description="C of the off-policy correction: tis truncates rho at C, mask keeps tokens with rho in [1/C, C].",
    )

    # Algorithm
    adv_estimator: Literal[
        "gae", "reinforce", "grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "rloo", "remax",
        "gigpo", "step_reinforce", "agentic_reinforce",
    ] = fld(
        "gae", category="Algorithm", common=True,
        description="How advantages are computed: gae needs a critic; grpo, rloo and reinforce_plus_plus_baseline "
        "compare the responses of one prompt. Agentic runs only, per turn of a trajectory (ROLL's step-wise "
        "estimators): gigpo (GiGPO: the episode's score normalised in its reward_normalization group, weighted by "
        "episode_reward_weight, plus the turn's discounted step return normalised among the turns of its start-state "
        "group that answered the same observation, weighted by step_reward_weight), step_reinforce (the turn's "
        "discounted step return normalised in its reward_normalization group), agentic_reinforce (the trajectory's "
        "score discounted by gamma once per later turn). remax is accepted but not built.",
    )
    ppo_epochs: int = fld(1, category="Algorithm", ge=1, description="Passes of optimizer updates over each rollout batch.")
    use_rollout_log_probs: bool = fld(
        False, category="Loss",
        description="Old log-probs of the PPO ratio come from the rollout engine instead of a recompute by "
        "actor_train (verl and ROLL recompute). rollout/logprob_diff_mean and _max report the gap whenever both exist.",
    )
    gamma: float = fld(1.0, category="Algorithm", ge=0, le=1, description="Discount factor of future rewards.")
    lambd: float = fld(
        0.95, category="Algorithm", ge=0, le=1, description="GAE lambda: 1 is low bias / high variance, 0 the opposite."
    )
    norm_adv_by_std_in_grpo: bool = fld(
        True, category="Algorithm",
        description="GRPO: divide group-centred rewards by the group's std; false gives Dr.GRPO.",
    )
    policy_loss: Literal["ppo", "gspo"] = fld(
        "ppo", category="Loss", description="Policy objective: token-level PPO ratio clipping, or sequence-level GSPO."
    )
    critic_warmup: int = fld(0, category="Algorithm", ge=0, description="Steps that train only the critic at the start.")

    # KL
    kl_penalty: Literal["kl", "abs", "mse", "low_var_kl", "full"] = fld(
        "kl", category="KL",
        description="KL estimator between policy and reference: kl (k1), abs, mse (k2), low_var_kl (k3), full.",
    )
    add_token_level_kl: bool = fld(False, category="KL", description="Subtract a per-token KL penalty from rewards.")
    init_kl_coef: float = fld(0.2, category="KL", ge=0, common=True, description="Starting coefficient of the KL penalty in the reward.")
    kl_ctrl_type: Literal["fixed", "adaptive"] | None = fld(
        None, category="KL",
        description="KL-in-reward controller: fixed keeps init_kl_coef, adaptive steers it toward target_kl; "
        "unset is adaptive exactly when target_kl is set (ROLL's rule).",
    )
    target_kl: float | None = fld(None, category="KL", gt=0, description="KL the adaptive controller steers toward.")
    kl_horizon: int = fld(10000, category="KL", ge=1, description="Time constant (steps) of the adaptive controller.")
    use_kl_loss: bool = fld(False, category="KL", common=True, description="Add a KL term to the policy loss (GRPO style).")
    kl_loss_coef: float = fld(0.0, category="KL", ge=0, common=True, description="Weight of the KL loss term.")

    # Loss
    pg_clip: float = fld(0.2, category="Loss", gt=0, acts_through="clip_range",
                         description="PPO ratio clip range (both sides).")
    pg_clip_low: float | None = fld(None, category="Loss", gt=0, acts_through="clip_range",
                                    description="Lower clip range; overrides pg_clip below.")
    pg_clip_high: float | None = fld(
        None, category="Loss", gt=0, acts_through="clip_range",
        description="Upper clip range (clip-higher); overrides pg_clip above.",
    )
    dual_clip_loss: bool = fld(False, category="Loss", description="Bound the loss of negative-advantage tokens (dual clip).")
    clip_ratio_c: float = fld(3.0, category="Loss", gt=1, description="Dual-clip constant c (> 1).")
    value_clip: float | None = fld(None, category="Loss", gt=0, description="Clip value predictions around old values.")
    loss_agg_mode: Literal[
        "token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"
    ] = fld("token-mean", category="Loss", description="How per-token losses are reduced to one number.")
    entropy_loss_coef: float = fld(0.0, category="Loss", description="Weight of the entropy bonus (encourages exploration).")
    sft_loss_coef: float = fld(0.0, category="Loss", ge=0, description="Weight of a supervised loss on positive samples.")
    rl_loss_coef: float = fld(1.0, category="Loss", ge=0, description="Weight of the policy-gradient loss.")
    use_topr_loss: bool = fld(False, category="Loss", description="Use the TOPR (tapered off-policy) objective.")
    max_grad_norm: float = fld(1.0, category="Optimizer", inactive=import_only("each training role clips with its training_args.max_grad_norm"), gt=0, description="Pipeline-level gradient norm clip.")
    l2: float = fld(0.0, category="Loss", inactive=import_only("use training_args.weight_decay (decoupled AdamW decay)"), ge=0, description="L2 penalty on weights added to the loss.")
    difficulty_loss_weight: bool = fld(
        False, category="Loss",
        description="Weight samples by prompt difficulty (0.5 + 1.5 x the data's `difficulty` column in [0, 1]).",
    )
    max_len_mask: bool = fld(
        False, category="Loss",
        description="Leave responses as long as the generation limit (cut off) out of the actor's loss.",
    )
    mask_type: Literal["all", "loss"] = fld(
        "loss", category="Loss", inactive=import_only("the sample masks leave samples out of the actor's loss "
                                                     "(loss); the critic still fits them"),
        description="What the masks drop: the samples entirely, or only their loss.",
    )
    difficulty_mask: bool = fld(
        False, category="Loss", description="Leave prompts that are too easy or too hard (by group accuracy) out."
    )
    difficulty_low_threshold: float = fld(
        0.0, category="Loss", ge=0, le=1, description="Group accuracy at or below which a prompt counts as too hard."
    )
    difficulty_high_threshold: float = fld(
        1.0, category="Loss", ge=0, le=1, description="Group accuracy at or above which a prompt counts as too easy."
    )
    balance_length: bool = fld(False, category="Loss", inactive=import_only("micro-batches are split by sample count"), description="Balance response lengths across data-parallel ranks.")
    minibatch_data_iter_num: int = fld(1, category="Loss", inactive=import_only("ppo_epochs sets the passes over each rollout"), ge=1, description="Passes over each mini-batch.")
    error_max_len_clip: bool = fld(
        False, category="Reward processing",
        description="Leave wrong answers (score 0) of error_max_len_threshold tokens or more out of the actor's "
        "loss; as in ROLL, samples scored neither 0 nor 1 are left out too.",
    )
    error_max_len_threshold: int = fld(
        9999999999, category="Reward processing", ge=1, description="Length from which error_max_len_clip drops wrong answers."
    )
    length_loss_weight: bool = fld(
        False, category="Loss", description="Weight samples by response length (shorter responses weigh more)."
    )

    # Reward processing
    reward_clip: float | None = fld(None, category="Reward processing", gt=0, description="Clip rewards to [-c, c].")
    advantage_clip: float | None = fld(
        None, category="Reward processing", gt=0, description="Clip advantages to [-c, c]."
    )
    whiten_rewards: bool = fld(False, category="Reward processing", description="Zero-mean, unit-variance rewards.")
    whiten_advantages: bool = fld(False, category="Reward processing", description="Zero-mean, unit-variance advantages.")
    use_reward_scaling: bool = fld(False, category="Reward processing", description="Scale rewards by a running std.")
    use_reward_norm: bool = fld(
        False, category="Reward processing", description="Normalise rewards (with use_reward_scaling)."
    )
    add_len_reward: bool = fld(
        False, category="Reward processing",
        description="Add 1 - response tokens / response_length (in [0, 1], more for shorter responses) to each score.",
    )
    reward_norm: NormType | None = fld(
        None, category="Reward processing", acts_through="norm_mean_type, norm_std_type",
        description="Older ROLL name that sets both norm_mean_type and norm_std_type.",
    )
    norm_mean_type: NormType | None = fld(
        None, category="Reward processing",
        description="Mean subtracted from rewards: over the batch, the prompt's group, running stats, or none.",
    )
    norm_std_type: NormType | None = fld(
        None, category="Reward processing", description="Std rewards are divided by (same choices as norm_mean_type)."
    )
    reward_shift: bool = fld(False, category="Reward processing", description="Normalise by subtracting the mean only.")
    reward_scale: bool = fld(False, category="Reward processing", description="Normalise by dividing by the std only.")
    reward_normalization: RewardNormalization | None = fld(
        None, category="Agentic", description="Normalisation of agentic trajectory scores (unset: none)."
    )

    # Worker roles
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

    # Agentic
    train_env_manager: EnvManagerConfig | None = fld(
        None, category="Agentic",
        description="Environments used for training rollouts; set, the run is agentic (multi-turn episodes).",
    )
    val_env_manager: EnvManagerConfig | None = fld(
        None, category="Agentic", description="Environments used for evaluation rollouts."
    )
    custom_envs: dict[str, CustomEnvConfig] = fld_factory(
        dict, category="Agentic", description="Environment definitions by tag."
    )
    batch_adjust_mode: Literal["copy", "delete", "auto", "random_sample"] = fld(
        "copy", category="Agentic",
        inactive=import_only("an agentic batch is exactly rollout_batch_size trajectories; nothing is adjusted"),
        description="How ROLL pads or trims a batch of trajectories to the training batch size.",
    )
    episode_reward_weight: float = fld(
        1.0, category="Agentic", ge=0,
        description="gigpo: weight of the episode-level term (the trajectory's score normalised with "
        "reward_normalization) in each turn's advantage.",
    )
    step_reward_weight: float = fld(
        1.0, category="Agentic", ge=0,
        description="gigpo: weight of the step-level term (the turn's step return normalised among the turns that "
        "answered the same observation from the same start state) in each turn's advantage.",
    )
    step_reward_gamma: float = fld(
        0.95, category="Agentic", ge=0, le=1,
        description="gigpo, step_reinforce: discount of the step return G_k = r_k + gamma * G_k+1 over a "
        "trajectory's turns (r_k: the turn's reward plus its format penalty).",
    )
    ratio_type: Literal["token", "segment"] = fld(
        "token", category="Agentic", inactive=planned("segment-level importance ratios"),
        description="Importance ratio per token or per turn segment.",
    )
    parse_tool_call_parameter_to_dict: bool = fld(
        False, category="Agentic",
        description="Tool calls whose \"arguments\" is a JSON string holding the object are decoded into it "
        "before the tool runs; off, such a call is malformed (tool-calling environments: tool_use).",
    )
    skip_mock_system_prompt: bool = fld(
        False, category="Agentic", inactive=import_only("prompts come from env_instruction and the chat template"),
        description="Do not insert an empty system turn before rendering the template.",
    )

    # ROLL main's other pipeline keys, accepted so that its files load (docs/importers/README.md)
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

    @field_validator("global_template")
    @classmethod
    def _known_global_template(cls, value: str | None) -> str | None:
        return known_template(value)

    @field_validator("reward_norm", mode="before")
    @classmethod
    def _python_none(cls, value: Any) -> Any:
        """`reward_norm: None` (Python's None as a YAML string, ROLL's docs example) is unset: ROLL main drops the key."""
        return None if value == "None" else value

    def clip_range(self) -> tuple[float, float]:
        """(low, high) of the PPO ratio clip: pg_clip_low / pg_clip_high, each else pg_clip."""
        low = self.pg_clip_low if self.pg_clip_low is not None else self.pg_clip
        high = self.pg_clip_high if self.pg_clip_high is not None else self.pg_clip
        return low, high

    @model_validator(mode="after")
    def _apply_roll_shorthands(self) -> PipelineConfig:
        # ROLL: roles without a model path use pretrain (critic and reward models: reward_pretrain).
        for worker in (self.actor_train, self.actor_infer, self.reference):
            if worker is not None and worker.model_args.model_name_or_path is None:
                worker.model_args.model_name_or_path = self.pretrain
        if self.critic is not None and self.critic.model_args.model_name_or_path is None:
            self.critic.model_args.model_name_or_path = self.reward_pretrain
        # global_template: the chat template of every role whose data_args leave template unset.
        if self.global_template is not None:
            for worker in (self.actor_train, self.validation):
                if worker is not None and worker.data_args is not None and "template" not in worker.data_args.model_fields_set:
                    worker.data_args.template = self.global_template
        # ROLL main's spellings of max_ckpts_to_keep, sft_loss_coef and GSPO.
        if self.max_ckpt_to_keep > 0 and "max_ckpts_to_keep" not in self.model_fields_set:
            self.max_ckpts_to_keep = self.max_ckpt_to_keep
        if self.postive_loss_coef > 0 and "sft_loss_coef" not in self.model_fields_set:
            self.sft_loss_coef = self.postive_loss_coef
        if self.importance_sampling == "seq" and "policy_loss" not in self.model_fields_set:
            self.policy_loss = "gspo"
        # reward_norm is ROLL's older spelling of both norm types.
        if self.reward_norm is not None:
            if self.norm_mean_type is None:
                self.norm_mean_type = self.reward_norm
            if self.norm_std_type is None:
                self.norm_std_type = self.reward_norm
        return self

