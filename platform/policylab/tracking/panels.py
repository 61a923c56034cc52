"""The run page's panel of asynchronous-rollout metrics (docs/decisions/0017): the trainer's `async/` keys
(trainer/pipeline/rlvr.py, async_rollout.py and the off-policy ratio statistics of
trainer/algorithms/off_policy.py) drawn together, several keys to a chart. A test keeps these keys among the
ones the trainer writes; `async/` keys not named here get a chart of their own inside the panel."""

from __future__ import annotations

ASYNC_PREFIX = "async/"
ASYNC_CHARTS: tuple[dict[str, object], ...] = (
    {"title": "Staleness (policy versions behind)",
     "keys": ("async/staleness_min", "async/staleness_mean", "async/staleness_max")},
    {"title": "Idle time per step (s)", "keys": ("async/generation_idle_s", "async/training_idle_s")},
    {"title": "Weight sync (s)", "keys": ("async/weight_sync_s", "async/weight_load_s")},
    {"title": "Off-policy ratio ρ = π_old / μ", "keys": ("async/is_ratio_min", "async/is_ratio_mean",
                                                        "async/is_ratio_max")},
    {"title": "Tokens beyond the cap (share)", "keys": ("async/is_ratio_above_cap", "async/is_ratio_outside_band")},
    {"title": "Samples dropped or down-weighted",
     "keys": ("async/dropped_samples", "async/downweighted_samples", "async/is_masked_tokens")},
    {"title": "Policy version and buffered batches", "keys": ("async/policy_version", "async/buffer_batches")},
)
