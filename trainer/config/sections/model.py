"""Model and training arguments of a worker role (model_args, training_args)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator

from trainer.config.sections.base import SEED_MAX, Dtype, Section, fld, fld_factory, import_only, planned


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
