"""Reward registry: names equal the config registry; synthetic, format, reward_scale, reward model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainer.config.registries import REWARD_TYPES
from trainer.data.synthetic import get_task
from trainer.rewards.registry import REWARDS, build_reward


def test_names_equal_the_config_registry() -> None:
    assert set(REWARDS) == set(REWARD_TYPES)
    with pytest.raises(ValueError,
                       match=r"reward_type: unknown reward 'crossthink'; valid: code_sandbox, crossthinkqa_rule, format, "
                             r"ifeval_rule, llm_judge, math_rule"):
        build_reward("crossthink")


def test_synthetic_dispatches_by_task() -> None:
    samples = get_task("reverse").make_prompts(2, seed=0) + get_task("add").make_prompts(2, seed=0)
    prompts = [s["prompt"] for s in samples]
    perfect = [s["answer"] for s in samples]
    reward = build_reward("synthetic")
    assert reward(prompts, perfect, samples) == [1.0] * 4
    half = [samples[0]["answer"][:2] + "?", "", "99999", samples[3]["answer"]]
    scores = reward(prompts, half, samples)
    assert scores[0] == pytest.approx(0.8 * 2 / 3 + 0.2) and scores[1] == 0.0 and scores[3] == 1.0
    with pytest.raises(ValueError, match=r"samples\[0\].task: missing"):
        reward(["p"], ["r"], [{"answer": "a"}])


def test_format_penalty_and_reward_scale() -> None:
    reward = build_reward("format", pattern=r"<think>.*?</think>\s*\S.*", penalty=-0.5)
    responses = ["<think>a\nb</think> 42", "42", "<think>unclosed 42", "<think>x</think>"]
    assert reward(["p"] * 4, responses, [{}] * 4) == [0.0, -0.5, -0.5, -0.5]
    scaled = build_reward("synthetic", reward_scale=2.0)
    sample = get_task("copy").make_prompts(1, seed=0)
    assert scaled([sample[0]["prompt"]], [sample[0]["answer"]], sample) == [2.0]
    with pytest.raises(ValueError, match=r"format_pattern: invalid regular expression"):
        build_reward("format", pattern="(unclosed")(["p"], ["r"], [{}])
    with pytest.raises(ValueError, match=r"differ in length \(2, 1, 1\)"):
        scaled(["a", "b"], ["c"], [{}])


def test_reward_model_scores_with_a_local_classifier(tmp_path: Path) -> None:
    from transformers import AutoModelForSequenceClassification, Qwen2Config, Qwen2ForSequenceClassification

    from trainer.models.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, num_labels=1,
                         pad_token_id=tokenizer.pad_token_id)
    Qwen2ForSequenceClassification(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)

    prompts, responses = ["Q: 2+2?\n", "Q: 2+2?\n", "hello "], ["4", "five", "world"]
    reward = build_reward("reward_model", model_name_or_path=str(tmp_path), batch_size=2)
    scores = reward(prompts, responses, [{}] * 3)
    model = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    with torch.no_grad():  # one unpadded forward per text: batching and padding must not change scores
        expected = [model(**tokenizer(p + r, return_tensors="pt")).logits[0, 0].item()
                    for p, r in zip(prompts, responses, strict=True)]
    assert scores == pytest.approx(expected, abs=1e-4)
    assert len(set(scores)) == 3
    with pytest.raises(ValueError, match=r"is not a local model directory"):
        build_reward("reward_model", model_name_or_path=str(tmp_path / "nope"))(["p"], ["r"], [{}])
