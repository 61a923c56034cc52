"""Name → function tables for every algorithm knob, with lookups that list the valid names.

The names are those fixed in docs/decisions/0001-module-contracts.md (`adv_estimator`,
`kl_penalty`, `loss_agg_mode`) plus the policy-loss names of policy_loss.POLICY_LOSSES.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from trainer.algorithms.advantages import ADV_ESTIMATORS
from trainer.algorithms.aggregation import LOSS_AGG_MODES
from trainer.algorithms.kl import KL_ESTIMATORS
from trainer.algorithms.policy_loss import POLICY_LOSSES
from trainer.algorithms.rewards import NORM_TYPES

__all__ = [
    "ADV_ESTIMATORS",
    "KL_ESTIMATORS",
    "LOSS_AGG_MODES",
    "NORM_TYPES",
    "POLICY_LOSSES",
    "get_adv_estimator",
    "get_kl_estimator",
    "get_loss_agg_mode",
    "get_policy_loss",
]


def _lookup(table: Mapping[str, Callable[..., Any]], knob: str, name: str) -> Callable[..., Any]:
    if name not in table:
        raise ValueError(f"{knob} {name!r} is not known; valid: {', '.join(table)}")
    return table[name]


def get_adv_estimator(name: str) -> Callable[..., Any]:
    return _lookup(ADV_ESTIMATORS, "adv_estimator", name)


def get_kl_estimator(name: str) -> Callable[..., Any]:
    return _lookup(KL_ESTIMATORS, "kl_penalty", name)


def get_loss_agg_mode(name: str) -> Callable[..., Any]:
    return _lookup(LOSS_AGG_MODES, "loss_agg_mode", name)


def get_policy_loss(name: str) -> Callable[..., Any]:
    return _lookup(POLICY_LOSSES, "policy loss", name)
