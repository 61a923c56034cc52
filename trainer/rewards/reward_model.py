"""Reward-model scoring with an HF sequence-classification model loaded from a local directory."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any


@lru_cache(maxsize=4)
def load_reward_model(path: str, device: str = "cpu", adapter: str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) from a local HF directory, a trained LoRA adapter folder merged into it when given
    (model_args.adapter_name_or_path; trainer.models.adapters); cached so a worker loads it once."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if not Path(path).is_dir():
        raise ValueError(f"reward_model.model_name_or_path: {path!r} is not a local model directory")
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    tokenizer.padding_side = "right"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForSequenceClassification.from_pretrained(path, local_files_only=True)
    if adapter is not None:
        from trainer.models.adapters import merge_adapter

        model = merge_adapter(model, adapter, "reward_model.adapter_name_or_path")
    model = model.to(device).eval()
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def score_with_reward_model(prompts: list[str], responses: list[str], model_path: str, *,
                            batch_size: int = 16, max_length: int = 2048, device: str = "cpu",
                            label_index: int = 0, adapter: str | None = None) -> list[float]:
    """Score `prompt + response` texts: the classifier's logit `label_index` (the last-token head)."""
    import torch

    model, tokenizer = load_reward_model(str(model_path), device, adapter)
    texts = [p + r for p, r in zip(prompts, responses, strict=True)]
    scores: list[float] = []
    with torch.no_grad():
        for start in range(0, len(texts), batch_size):
            enc = tokenizer(texts[start:start + batch_size], return_tensors="pt", padding=True,
                            truncation=True, max_length=max_length).to(device)
            logits = model(**enc).logits.float()
            scores.extend(logits[:, label_index].tolist())
    return scores
