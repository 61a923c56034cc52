"""torch_train's mixed precision: fp32 master weights and optimizer state, forward and backward under
autocast in the role's dtype (CPU autocast here; the same code path runs under CUDA autocast)."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from tests.trainer.train.tiny_qwen import count_loss_tokens, make_batch, tiny_qwen2, token_mean_loss
from trainer.config.schema import PipelineConfig
from trainer.train import OptimConfig, build_strategy
from trainer.train.base import fused_kernels_apply


def optim() -> OptimConfig:
    return OptimConfig(lr=1e-2, num_training_steps=10)


def recording_loss(global_tokens: int, seen: list[torch.dtype]):
    inner = token_mean_loss(global_tokens)

    def loss_fn(model: nn.Module, batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        seen.append(model(input_ids=batch["input_ids"]).logits.dtype)
        return inner(model, batch)

    return loss_fn


@pytest.mark.parametrize(("loaded", "option", "computes"), [
    (torch.bfloat16, None, torch.bfloat16),       # model_args.dtype: bf16 chooses bf16 autocast
    (torch.float32, "bf16", torch.bfloat16),      # strategy_config.param_dtype chooses it
    (torch.bfloat16, "fp32", torch.float32),      # the option wins over the load dtype
    (torch.float32, None, torch.float32),         # neither: plain fp32, no autocast
])
def test_master_weights_stay_fp32_and_compute_follows_the_chosen_dtype(loaded, option, computes) -> None:
    config = {"param_dtype": option} if option else None
    strategy = build_strategy("torch_train", tiny_qwen2(3).to(loaded), optim(), strategy_config=config)
    batch = make_batch(2, 8, torch.Generator().manual_seed(0))
    seen: list[torch.dtype] = []
    metrics = strategy.train_step([batch], recording_loss(count_loss_tokens(batch), seen))
    assert seen == [computes]
    assert {p.dtype for p in strategy.model.parameters()} == {torch.float32}
    exp_avg = {s["exp_avg"].dtype for s in strategy.optimizer.state.values()}
    assert exp_avg == {torch.float32} and metrics["update_skipped"] == 0.0
    logits = strategy.forward_no_grad(lambda m, b: m(input_ids=b["input_ids"]).logits, batch)
    assert logits.dtype == computes  # log-probs are computed under the same autocast


def test_bf16_autocast_trains_like_fp32() -> None:
    """The same steps in fp32 and under bf16 autocast land on nearby weights (bf16 keeps 8 bits of
    mantissa in the matmuls; the fp32 master weights keep every small update)."""
    batch = make_batch(4, 12, torch.Generator().manual_seed(1))
    loss_fn = token_mean_loss(count_loss_tokens(batch))
    runs = {}
    for dtype in ("fp32", "bf16"):
        strategy = build_strategy("torch_train", tiny_qwen2(4), optim(), strategy_config={"param_dtype": dtype})
        runs[dtype] = [strategy.train_step([batch], loss_fn)["loss"] for _ in range(4)]
    assert runs["bf16"][-1] < runs["bf16"][0]
    for full, mixed in zip(runs["fp32"], runs["bf16"], strict=True):
        assert mixed == pytest.approx(full, rel=2e-2)


def test_fp16_scales_the_loss_and_resumes_the_scaler(tmp_path) -> None:
    strategy = build_strategy("torch_train", tiny_qwen2(5), optim(), strategy_config={"param_dtype": "fp16"})
    assert strategy.scaler is not None
    batch = make_batch(2, 8, torch.Generator().manual_seed(2))
    loss_fn = token_mean_loss(count_loss_tokens(batch))
    before = strategy.model.model.norm.weight.detach().clone()
    strategy.train_step([batch], loss_fn)
    assert not torch.equal(before, strategy.model.model.norm.weight)  # unscaled gradients stepped the weights
    strategy.scaler.update(1024.0)  # a scale the fresh scaler would not have
    strategy.save_checkpoint(tmp_path)
    resumed = build_strategy("torch_train", tiny_qwen2(5), optim(), strategy_config={"param_dtype": "fp16"})
    resumed.load_checkpoint(tmp_path)
    assert resumed.scaler.get_scale() == 1024.0


def test_bad_param_dtype_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"param_dtype='int8'.*fp32, bf16, fp16"):
        build_strategy("torch_train", tiny_qwen2(0), optim(), strategy_config={"param_dtype": "int8"})
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['reshard'\] for torch_train"):
        build_strategy("torch_train", tiny_qwen2(0), optim(), strategy_config={"reshard": True})


def test_the_schema_accepts_torch_names_for_torch_train_param_dtype() -> None:
    cfg = PipelineConfig.model_validate({"actor_train": {"strategy_args": {
        "strategy_name": "torch_train", "strategy_config": {"param_dtype": "bfloat16"}}}})
    assert cfg.actor_train.strategy_args.strategy_config.param_dtype == "bf16"


def test_fused_optimizer_kernels_only_where_they_exist() -> None:
    """CPU keeps torch's default AdamW (CPU results unchanged); CUDA parameters get the fused kernel
    (tests/trainer/train/test_strategies_gpu.py checks that on a GPU)."""
    params = list(tiny_qwen2(0).parameters())
    assert not fused_kernels_apply(params)
    assert not fused_kernels_apply([])
    assert not build_strategy("torch_train", tiny_qwen2(0), optim()).optimizer.defaults.get("fused")


def test_a_forward_only_torch_train_role_computes_in_its_param_dtype() -> None:
    from trainer.train import build_forward_strategy

    batch = make_batch(1, 6)
    plain = build_forward_strategy("torch_train", tiny_qwen2(0))
    mixed = build_forward_strategy("torch_train", tiny_qwen2(0).to(torch.bfloat16),
                                   strategy_config={"param_dtype": "bf16"})
    assert {p.dtype for p in mixed.model.parameters()} == {torch.float32}
    logits = {name: s.forward_no_grad(lambda m, b: m(input_ids=b["input_ids"]).logits, batch)
              for name, s in (("plain", plain), ("mixed", mixed))}
    assert logits["plain"].dtype == torch.float32 and logits["mixed"].dtype == torch.bfloat16
