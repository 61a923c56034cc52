"""Partial freezing (ROLL's freeze_module_prefix, trainer.models.freezing, decision 0042): parameters under the
prefixes keep requires_grad False, are left out of the optimizer and do not move in a step; the others train; a
prefix that matches nothing is refused naming the model's parameter names."""

from __future__ import annotations

import pytest
import torch

from tests.trainer.train.tiny_qwen import count_loss_tokens, make_batch, tiny_qwen2, token_mean_loss
from trainer.models.freezing import freeze_by_prefix, freeze_prefixes
from trainer.train import OptimConfig, build_strategy

FIELD = "actor_train.model_args.freeze_module_prefix"


def test_frozen_prefixes_stay_as_they_were_and_the_rest_trains() -> None:
    model = tiny_qwen2(seed=2)
    prefixes = freeze_prefixes(" model.embed_tokens, model.layers.0. ")
    assert prefixes == ["model.embed_tokens", "model.layers.0."]
    frozen = set(freeze_by_prefix(model, prefixes, FIELD))
    names = {name for name, _ in model.named_parameters()}
    assert frozen == {n for n in names if n.startswith(("model.embed_tokens.", "model.layers.0."))}
    assert len(frozen) == 1 + 12  # the embedding; layer 0's 7 projections, 3 biases and 2 norms

    before = {k: v.clone() for k, v in model.state_dict().items()}
    strategy = build_strategy("torch_train", model, OptimConfig(lr=1e-2, max_grad_norm=None))
    stepped = {id(p) for group in strategy.optimizer.param_groups for p in group["params"]}
    assert stepped == {id(p) for n, p in model.named_parameters() if n not in frozen}
    batch = make_batch(4, 12, torch.Generator().manual_seed(0))
    strategy.train_step([batch], token_mean_loss(count_loss_tokens(batch)))
    after = model.state_dict()
    moved = {k for k in names if not torch.equal(after[k], before[k])}
    assert moved == names - frozen  # every trainable parameter took the step, no frozen one did


def test_prefixes_match_as_roll_matches_them_by_startswith() -> None:
    model = tiny_qwen2()
    # "model.layers.1" is a plain prefix: it also names model.layers.10… where a model has them; the dot ends it
    assert freeze_by_prefix(model, ["model.layers.1"], FIELD) == freeze_by_prefix(tiny_qwen2(), ["model.layers.1."],
                                                                                   FIELD)
    assert freeze_by_prefix(tiny_qwen2(), ["lm_head"], FIELD) == ["lm_head.weight"]


def test_a_prefix_that_matches_no_parameter_is_refused_naming_some() -> None:
    with pytest.raises(ValueError, match=FIELD) as error:
        freeze_by_prefix(tiny_qwen2(), ["model.embed_tokens", "vision_tower"], FIELD)
    message = str(error.value)
    assert "'vision_tower' matches no parameter" in message and "'model.embed_tokens'" not in message
    assert "lm_head, model.embed_tokens, model.layers, model.norm" in message
