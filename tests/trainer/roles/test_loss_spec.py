"""LossSpec (trainer.roles.actor): the trained roles' narrow view of the config, and the one registry every
policy loss is dispatched through (trainer.algorithms.registry.POLICY_LOSSES, issue 42)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from trainer.algorithms import registry
from trainer.config import load_config
from trainer.roles.actor import POLICY_LOSS_OPTIONS, LossSpec

REPO = Path(__file__).resolve().parents[3]


def spec(tmp_path: Path, *overrides: str) -> LossSpec:
    cfg = load_config(REPO / "examples" / "demo_grpo_cpu.yaml", [f"output_dir={tmp_path}", *overrides])
    return LossSpec.from_config(cfg)


@pytest.mark.parametrize(("overrides", "name"), [
    ((), "ppo"),
    (("policy_loss=gspo",), "gspo"),
    (("use_policy_loss_type=PG",), "pg"),
    (("use_topr_loss=true",), "topr"),
    (("actor_train.pg_variant=topr",), "topr_token"),
], ids=["ppo", "gspo", "pg", "topr", "topr_token"])
def test_the_config_picks_the_registered_policy_loss(tmp_path: Path, overrides: tuple[str, ...], name: str) -> None:
    assert spec(tmp_path, *overrides).policy_loss == name


def test_the_spec_reads_the_loss_knobs(tmp_path: Path) -> None:
    got = spec(tmp_path, "pg_clip=0.2", "pg_clip_high=0.28", "dual_clip_loss=true", "clip_ratio_c=2.5",
               "loss_agg_mode=seq-mean-token-mean", "entropy_loss_coef=0.3", "value_clip=0.5")
    assert (got.clip_low, got.clip_high, got.dual_clip_c) == (0.2, 0.28, 2.5)
    assert (got.loss_agg_mode, got.entropy_loss_coef, got.value_clip) == ("seq-mean-token-mean", 0.3, 0.5)
    assert spec(tmp_path, "dual_clip_loss=false").dual_clip_c is None


def test_every_registered_policy_loss_has_its_options_and_takes_them() -> None:
    """One registry: every loss it holds can be dispatched, with keyword options its function accepts."""
    assert set(POLICY_LOSS_OPTIONS) == set(registry.POLICY_LOSSES)
    for name, options in POLICY_LOSS_OPTIONS.items():
        params = inspect.signature(registry.get_policy_loss(name)).parameters
        assert {"agg", "sample_weights", *options} <= set(params), name


def test_an_unknown_policy_loss_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="valid: ppo, pg, gspo, topr, topr_token"):
        registry.get_policy_loss("cispo")
