"""The loop's per-step data metrics, under our names and, next to them, verl's (`compute_data_metrics`
in verl's `metric_utils.py`), so that dashboards compare runs across frameworks.

All are computed over real tokens / real samples of the step's rollout batch:

    reward/mean|std|max|min            raw scores s_i (ours)
    critic/score/mean|max|min          raw scores s_i (verl: sequence score)
    critic/rewards/mean|max|min        Σ_t r_it, the sequence reward the advantage estimator sees
                                       (after reward processing and KL in the reward)
    advantages/mean                    mean of A_it over real tokens (ours)
    critic/advantages/mean|max|min     the same mean, and the extremes over real tokens
    critic/returns/…, critic/values/…  the same for returns / values (critic runs only)
    response_length/mean|max|min       response tokens per sample
    response_length/clip_ratio         fraction of responses cut at the length limit
    prompt_length/mean|max|min         prompt tokens per sample
    prompt_length/clip_ratio           fraction of prompts exactly `prompt_length` long
"""

from __future__ import annotations

from torch import Tensor


def _masked_stats(name: str, values: Tensor, mask: Tensor) -> dict[str, float]:
    real = values[mask > 0]
    if real.numel() == 0:
        return {f"{name}/mean": 0.0, f"{name}/max": 0.0, f"{name}/min": 0.0}
    return {f"{name}/mean": float(real.mean()), f"{name}/max": float(real.max()), f"{name}/min": float(real.min())}


def _stats(name: str, values: Tensor) -> dict[str, float]:
    values = values.float()
    return {f"{name}/mean": float(values.mean()), f"{name}/max": float(values.max()),
            f"{name}/min": float(values.min())}


def data_metrics(
    *,
    scores: Tensor,
    token_rewards: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    prompt_lengths: Tensor,
    max_prompt_length: int,
    truncated: Tensor,
    values: Tensor | None = None,
    returns: Tensor | None = None,
) -> dict[str, float]:
    """Metrics of one rollout batch (module docstring). Shapes: scores, prompt_lengths, truncated
    [batch]; token_rewards, advantages, response_mask, values, returns [batch, response_len]."""
    lengths = response_mask.sum(-1).float()
    metrics = {
        "reward/mean": float(scores.mean()),
        "reward/std": float(scores.std()) if scores.numel() > 1 else 0.0,
        "reward/max": float(scores.max()),
        "reward/min": float(scores.min()),
        "advantages/mean": float((advantages * response_mask).sum() / response_mask.sum().clamp(min=1)),
        **_stats("critic/score", scores),
        **_stats("critic/rewards", (token_rewards * response_mask).sum(-1)),
        **_masked_stats("critic/advantages", advantages, response_mask),
        **_stats("response_length", lengths),
        "response_length/clip_ratio": float(truncated.float().mean()),
        **_stats("prompt_length", prompt_lengths),
        "prompt_length/clip_ratio": float((prompt_lengths == max_prompt_length).float().mean()),
    }
    if values is not None:
        metrics |= _masked_stats("critic/values", values, response_mask)
        metrics["critic/values_mean"] = metrics["critic/values/mean"]
    if returns is not None:
        metrics |= _masked_stats("critic/returns", returns, response_mask)
        metrics["critic/returns_mean"] = metrics["critic/returns/mean"]
    return metrics

