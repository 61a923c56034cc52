"""The registries carry exactly the names fixed in docs/decisions/0001 and reject others clearly."""

from __future__ import annotations

import pytest

from trainer.algorithms import registry

# Copied from docs/decisions/0001-module-contracts.md: a change there must show up here.
CONTRACT_ADV_ESTIMATORS = {
    "gae",
    "reinforce",
    "grpo",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "rloo",
    "remax",
}
CONTRACT_KL_PENALTIES = {"kl", "abs", "mse", "low_var_kl", "full"}
CONTRACT_LOSS_AGG_MODES = {
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
}
CONTRACT_NORM_TYPES = {"batch", "group", "running", "none"}


def test_registries_match_the_contract() -> None:
    assert set(registry.ADV_ESTIMATORS) == CONTRACT_ADV_ESTIMATORS
    assert set(registry.KL_ESTIMATORS) == CONTRACT_KL_PENALTIES
    assert set(registry.LOSS_AGG_MODES) == CONTRACT_LOSS_AGG_MODES
    assert set(registry.NORM_TYPES) == CONTRACT_NORM_TYPES
    assert set(registry.POLICY_LOSSES) == {"ppo", "pg", "gspo", "topr", "topr_token"}


@pytest.mark.parametrize(
    ("getter", "table"),
    [
        (registry.get_adv_estimator, registry.ADV_ESTIMATORS),
        (registry.get_kl_estimator, registry.KL_ESTIMATORS),
        (registry.get_loss_agg_mode, registry.LOSS_AGG_MODES),
        (registry.get_policy_loss, registry.POLICY_LOSSES),
    ],
)
def test_lookups_return_the_function_or_list_the_valid_names(getter, table) -> None:
    for name, fn in table.items():
        assert getter(name) is fn
    with pytest.raises(ValueError) as excinfo:
        getter("no-such-name")
    message = str(excinfo.value)
    assert "'no-such-name' is not known" in message
    assert all(name in message for name in table)
