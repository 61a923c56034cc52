"""Compare's config diff (issue 46): a key set to None in some runs and absent in the others is the same unset
setting and is not a difference; a None against a value still is."""

from __future__ import annotations

from policylab.tracking.compare import MISSING, config_diff, split_none_against_absent


def test_none_against_absent_is_set_apart_and_none_against_a_value_is_a_difference() -> None:
    configs = [{"lr": 1e-6, "lora.rank": None, "critic": None, "seed": None},
               {"lr": 3e-6, "critic.lr": None, "seed": 7},
               {"lr": 1e-6, "lora.rank": None, "seed": None}]
    differ, unset = split_none_against_absent(config_diff(configs))
    assert differ == [("lr", [1e-6, 3e-6, 1e-6]), ("seed", [None, 7, None])]
    assert unset == ["critic", "critic.lr", "lora.rank"]
    assert config_diff(configs)[0] == ("critic", [None, MISSING, MISSING])  # still shown as absent where listed


def test_identical_configs_have_nothing_either_way() -> None:
    assert split_none_against_absent(config_diff([{"a": None}, {"a": None}])) == ([], [])
