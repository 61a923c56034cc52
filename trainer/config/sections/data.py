"""Data arguments of a worker role (data_args), the synthetic tasks, the load-time dataset filter and the
chat-template check."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import field_validator, model_validator

from trainer.config.registries import CHAT_TEMPLATES, RAW_TEMPLATES, SYNTHETIC_TASKS
from trainer.config.sections.base import SEED_MAX, Section, fld, fld_factory, import_only


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
        description="Chat template used to build prompts; native (or ROLL's chatml, qwen2, qwen2_5, qwen3, "
        "qwen3_coder) uses the tokenizer's own chat template, none (or raw) feeds the raw prompt text.",
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
