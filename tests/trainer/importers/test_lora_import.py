"""verl's and SkyRL's LoRA keys become ROLL's (decision 0033): LoRA here turns on with lora_target, so a
positive rank brings the source's default targets (all-linear) and alpha (16) when the file leaves them out."""

from __future__ import annotations

import pytest
from importer_testing import set_key, with_key

from trainer.config import validate_config
from trainer.config.importers import translate


@pytest.mark.parametrize(("fmt", "section", "rank"), [
    ("verl", "actor_rollout_ref.model", "lora_rank"),
    ("skyrl", "trainer.policy.model", "lora.rank"),
])
def test_a_positive_rank_alone_trains_adapters_with_the_sources_defaults(fmt: str, section: str, rank: str) -> None:
    native, issues = translate(with_key(fmt, f"{section}.{rank}", 32), fmt)
    assert not [i for i in issues if i.severity == "error"], issues
    model_args = native["actor_train"]["model_args"]
    assert (model_args["lora_rank"], model_args["lora_alpha"], model_args["lora_target"]) == (32, 16, "all-linear")
    result = validate_config(native)
    assert result.ok, result.errors
    args = result.config.actor_train.model_args
    assert (args.lora_rank, args.lora_alpha, args.lora_target) == (32, 16, "all-linear")


def test_skyrl_lora_dropout_is_imported() -> None:
    raw = with_key("skyrl", "trainer.policy.model.lora.rank", 8)
    set_key(raw, "trainer.policy.model.lora.dropout", 0.05)
    native, _ = translate(raw, "skyrl")
    assert native["actor_train"]["model_args"]["lora_dropout"] == 0.05
