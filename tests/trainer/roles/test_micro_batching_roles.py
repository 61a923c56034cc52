"""Token-budget micro-batches and sequence packing act through the roles (issue 36; decision 0032).

The knobs (ROLL use_dynamic_batching_in_train/infer, verl use_dynamic_bsz, ROLL use_sequence_packing
with sequence_packing_args) change how actor_train, critic and the reference cut their rows, and must
change nothing else: the same loss, gradient norm and gradients as the padded fixed-row update (the
losses are divided by the mini-batch's global counts), and the same log-probs and values on every real
token, on torch_train, fsdp2_train/_infer, deepspeed_train/_infer and hf_infer (one rank, gloo).

How it fails: drop `micro_batching=` from TrainedRole.update (or the spec from compute_log_probs /
compute_values) and test_the_knobs_reach_the_model fails (the model never sees a packed sequence or a
trimmed micro-batch); break the packed read-back (packed_index) or the attention bounds and the
equality tests fail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

from trainer.cluster import LocalWorkerGroup
from trainer.models.batch import build_batch

# one mini-batch of 8 rows (micro-batches of 2 by default), responses 1-24 tokens, prompts 2-7
PROMPT_LENGTHS = [2, 7, 3, 5, 4, 6, 2, 3]
RESPONSE_LENGTHS = [1, 24, 5, 17, 9, 2, 12, 20]
COMMON = ("ppo_epochs=1", "response_length=24", "prompt_length=8", "entropy_loss_coef=0.1",
          "actor_train.training_args.per_device_train_batch_size=2",
          "actor_train.training_args.gradient_accumulation_steps=4",
          "actor_train.training_args.learning_rate=1e-20", "actor_train.training_args.max_grad_norm=1000",
          "actor_train.training_args.warmup_steps=0", "actor_train.infer_batch_size=3")
MODES: dict[str, tuple[str, ...]] = {
    "padded": (),
    "roll_dynamic": ("actor_train.use_dynamic_batching_in_train=true",
                     "actor_train.max_tokens_per_microbatch_in_train=64",
                     "actor_train.use_dynamic_batching_in_infer=true",
                     "actor_train.max_tokens_per_microbatch_in_infer=48"),
    "verl_dynamic": ("actor_train.use_dynamic_bsz=true", "actor_train.max_token_len_per_gpu=40"),
    "roll_remove_padding": ("actor_train.use_remove_padding=true",),
    "packed": ("actor_train.use_sequence_packing=true",),
    "packed_balanced": ("actor_train.use_sequence_packing=true",
                        "+actor_train.sequence_packing_args.algorithm=load_balance",
                        "+actor_train.sequence_packing_args.max_packed_sequence_length_train=40",
                        "+actor_train.sequence_packing_args.max_packed_sequence_length_forward=32"),
    "roll_dynamic_packed": ("actor_train.use_dynamic_batching_in_train=true",
                            "actor_train.max_tokens_per_microbatch_in_train=64",
                            "actor_train.use_sequence_packing=true"),
}
STRATEGY_ARGS = {
    "torch_train": (),
    "fsdp2_train": ("actor_train.strategy_args.strategy_name=fsdp2_train",),
    "deepspeed_train": ("actor_train.strategy_args.strategy_name=deepspeed_train",
                        "+actor_train.strategy_args.strategy_config.zero_optimization.stage=2"),
}


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tests.trainer.pipeline.conftest import load_cfg
    from trainer.pipeline.run.models import materialise_tiny_models

    return str(materialise_tiny_models(load_cfg(tmp_path_factory.mktemp("tiny"))).pretrain)


def config(tmp_path: Path, tiny_path: str, *overrides: str, source: str = "demo_grpo_cpu.yaml") -> Any:
    from tests.trainer.pipeline.conftest import REPO_ROOT, load_cfg

    return load_cfg(tmp_path, f"pretrain={tiny_path}", *COMMON, *overrides, source=REPO_ROOT / "examples" / source)


def rollout_batch() -> dict[str, Tensor]:
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, 200, (n,), generator=generator).tolist() for n in PROMPT_LENGTHS]
    responses = [torch.randint(10, 200, (n,), generator=generator).tolist() for n in RESPONSE_LENGTHS]
    batch = build_batch(prompts, responses, pad_token_id=0)
    shape = batch["response_mask"].shape
    batch["advantages"] = torch.randn(shape, generator=generator)
    batch["old_log_probs"] = -5 + 0.3 * torch.randn(shape, generator=generator)
    batch["scores"] = torch.rand(shape[0], generator=generator)
    return batch


def run_update(group: LocalWorkerGroup, cfg: Any, batch: dict[str, Tensor]) -> tuple[dict[str, float], Tensor]:
    """(metrics, log-probs) with `cfg` on the same worker: lr 1e-20 keeps the weights, so every mode starts
    from them; the gradients stay on the parameters after the step."""
    group.worker.cfg = cfg
    logprobs = group.worker.compute_log_probs(batch)
    metrics = group.worker.train_step(batch, step=1)
    return metrics, logprobs


def flat_grads(model: torch.nn.Module) -> Tensor:
    grads = []
    for param in model.parameters():
        grad = param.grad
        grad = grad.full_tensor() if hasattr(grad, "full_tensor") else grad
        grads.append(grad.reshape(-1))
    return torch.cat(grads)


def relative_error(got: Tensor, expected: Tensor) -> float:
    """‖got − expected‖ / ‖expected‖: fp32 summation-order noise is ~1e-7 of the norm."""
    return float((got - expected).norm() / expected.norm())


@pytest.mark.parametrize("strategy", list(STRATEGY_ARGS))
def test_actor_loss_gradients_and_logprobs_match_the_padded_batch(tmp_path: Path, tiny_path: str,
                                                                  strategy: str) -> None:
    from trainer.roles.actor import ActorTrainWorker

    cfgs = {mode: config(tmp_path / mode, tiny_path, *STRATEGY_ARGS[strategy], *args) for mode, args in MODES.items()}
    batch = rollout_batch()
    mask = batch["response_mask"] > 0
    group = LocalWorkerGroup(ActorTrainWorker, "actor_train", init_args=(cfgs["padded"],),
                             distributed=strategy != "torch_train")
    try:
        results = {}
        for mode, cfg in cfgs.items():
            metrics, logprobs = run_update(group, cfg, batch)
            grads = flat_grads(group.worker.strategy.model) if strategy != "deepspeed_train" else None
            results[mode] = (metrics, logprobs, grads)
    finally:
        group.shutdown()
    base_metrics, base_logprobs, base_grads = results["padded"]
    assert base_metrics["actor/grad_norm"] > 0
    for mode, (metrics, logprobs, grads) in results.items():
        assert metrics["actor/loss"] == pytest.approx(base_metrics["actor/loss"], rel=1e-5, abs=1e-7), mode
        assert metrics["actor/grad_norm"] == pytest.approx(base_metrics["actor/grad_norm"], rel=1e-5), mode
        torch.testing.assert_close(logprobs[mask], base_logprobs[mask], rtol=0, atol=2e-5, msg=mode)
        if grads is not None:
            assert relative_error(grads, base_grads) < 1e-5, mode


@pytest.mark.parametrize("name", ["hf_infer", "fsdp2_infer", "deepspeed_infer"])
def test_reference_log_probs_match_the_padded_batch(tmp_path: Path, tiny_path: str, name: str) -> None:
    from trainer.roles.reference import ReferenceWorker

    extra = ("+reference.strategy_args.strategy_config.zero_optimization.stage=3",) if name == "deepspeed_infer" else ()
    base = ("+reference.model_args.model_name_or_path=" + tiny_path, f"+reference.strategy_args.strategy_name={name}",
            *extra)
    padded = config(tmp_path / "padded", tiny_path, *base)
    modes = {
        "roll_dynamic": ("+reference.use_dynamic_batching_in_infer=true",
                         "+reference.max_tokens_per_microbatch_in_infer=48"),
        "packed": ("+reference.use_sequence_packing=true", "+reference.infer_batch_size=3"),
        "packed_balanced": ("+reference.use_sequence_packing=true",
                            "+reference.sequence_packing_args.algorithm=load_balance",
                            "+reference.sequence_packing_args.max_packed_sequence_length_forward=32"),
    }
    batch = rollout_batch()
    mask = batch["response_mask"] > 0
    group = LocalWorkerGroup(ReferenceWorker, "reference", init_args=(padded,), distributed=name != "hf_infer")
    try:
        expected = group.worker.compute_log_probs(batch)
        for mode, args in modes.items():
            group.worker.cfg = config(tmp_path / mode, tiny_path, *base, *args)
            got = group.worker.compute_log_probs(batch)
            torch.testing.assert_close(got[mask], expected[mask], rtol=0, atol=2e-5, msg=mode)
    finally:
        group.shutdown()


def test_critic_loss_gradients_and_values_match_the_padded_batch(tmp_path: Path, tiny_path: str) -> None:
    from trainer.roles.critic import CriticWorker

    critic = ("critic.training_args.per_device_train_batch_size=2", "critic.training_args.gradient_accumulation_steps=4",
              "critic.training_args.learning_rate=1e-20", "critic.training_args.max_grad_norm=1000",
              "critic.infer_batch_size=3", f"critic.model_args.model_name_or_path={tiny_path}")
    modes = {
        "padded": (),
        "verl_dynamic": ("critic.use_dynamic_bsz=true", "critic.max_token_len_per_gpu=40"),
        "packed": ("critic.use_sequence_packing=true",),
        "packed_balanced": ("critic.use_sequence_packing=true", "+critic.sequence_packing_args.algorithm=load_balance",
                            "+critic.sequence_packing_args.max_packed_sequence_length_train=40"),
    }
    cfgs = {mode: config(tmp_path / mode, tiny_path, *critic, *args, source="demo_ppo_cpu.yaml")
            for mode, args in modes.items()}
    batch = rollout_batch()
    mask = batch["response_mask"] > 0
    batch["values"] = 0.1 * torch.randn(batch["response_mask"].shape, generator=torch.Generator().manual_seed(1))
    batch["returns"] = batch["values"] + batch["advantages"]
    group = LocalWorkerGroup(CriticWorker, "critic", init_args=(cfgs["padded"],))
    try:
        with torch.no_grad():  # a non-zero head, so that the backbone gets gradients too
            group.worker.strategy.model.value_head.weight.normal_(0, 0.5, generator=torch.Generator().manual_seed(2))
        results = {}
        for mode, cfg in cfgs.items():
            group.worker.cfg = cfg
            values = group.worker.compute_values(batch)
            metrics = group.worker.train_step(batch, step=1)
            results[mode] = (metrics, values, flat_grads(group.worker.strategy.model))
    finally:
        group.shutdown()
    base_metrics, base_values, base_grads = results["padded"]
    assert base_metrics["critic/grad_norm"] > 0
    for mode, (metrics, values, grads) in results.items():
        assert metrics["critic/loss"] == pytest.approx(base_metrics["critic/loss"], rel=1e-5, abs=1e-7), mode
        torch.testing.assert_close(values[mask], base_values[mask], rtol=0, atol=2e-5, msg=mode)
        assert relative_error(grads, base_grads) < 1e-5, mode


class Recorder(torch.nn.Module):
    """Wraps a model and records the input_ids shape, whether an attention mask came with it, and how many
    positions went through the LM head when the caller chose them (logits_to_keep)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.inner = model
        self.calls: list[tuple[tuple[int, ...], bool]] = []
        self.kept: list[int] = []

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        ids = kwargs.get("input_ids", args[0] if args else None)
        mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
        self.calls.append((tuple(ids.shape), mask is not None))
        if "logits_to_keep" in kwargs:
            self.kept.append(len(kwargs["logits_to_keep"]))
        return self.inner(*args, **kwargs)


@pytest.mark.parametrize(("mode", "expected"), [
    # fixed rows: 4 micro-batches of 2 rows, padded to the batch's 7 + 24 columns
    ("padded", {(2, 31)}),
    # ROLL's use_remove_padding: the same pairs of rows, each cut to its longest prompt + longest response
    # (2,1)(7,24): 7 + 24; (3,5)(5,17): 5 + 17; (4,9)(6,2): 6 + 9; (2,12)(3,20): 3 + 20
    ("roll_remove_padding", {(2, 31), (2, 22), (2, 15), (2, 23)}),
    # one packed sequence per chunk of 2 rows: [1, Σ p + r] = 2+1 + 7+24, 3+5 + 5+17, 4+9 + 6+2, 2+12 + 3+20
    ("packed", {(1, 34), (1, 30), (1, 21), (1, 37)}),
])
def test_the_knobs_reach_the_model(tmp_path: Path, tiny_path: str, mode: str, expected: set) -> None:
    from trainer.roles.actor import ActorTrainWorker

    cfg = config(tmp_path, tiny_path, *MODES[mode], "actor_train.infer_batch_size=2")
    group = LocalWorkerGroup(ActorTrainWorker, "actor_train", init_args=(cfg,))
    try:
        strategy = group.worker.strategy
        strategy.model = Recorder(strategy.model)
        batch = rollout_batch()
        group.worker.compute_log_probs(batch)
        forward_calls, forward_kept = list(strategy.model.calls), list(strategy.model.kept)
        strategy.model.calls.clear()
        strategy.model.kept.clear()
        group.worker.train_step(batch, step=1)
        train_calls, train_kept = strategy.model.calls, strategy.model.kept
    finally:
        group.shutdown()
    assert {shape for shape, _ in forward_calls} == expected
    assert len(forward_calls) == 4 and len(train_calls) == 4
    assert all(with_mask == (mode != "packed") for _, with_mask in forward_calls + train_calls)
    if mode == "packed":  # the shuffled mini-batch packs other pairs, but always all 8 rows' tokens
        assert sum(shape[1] for shape, _ in train_calls) == sum(PROMPT_LENGTHS) + sum(RESPONSE_LENGTHS)
        # only the real response tokens reach the LM head: 1 + 24, 5 + 17, 9 + 2, 12 + 20 per pair
        assert sorted(forward_kept) == [11, 22, 25, 32] and sum(train_kept) == sum(RESPONSE_LENGTHS)
    else:
        assert forward_kept == train_kept == []


def test_dynamic_batching_reaches_the_update(tmp_path: Path, tiny_path: str) -> None:
    """ROLL's budget of 64 tokens (rows × padded length rounded to 4) cuts the rows sorted by p + r,
    by hand: (p, r) = (2,1) (3,5) (6,2) (4,9) | (2,12) (5,17) | (3,20) (7,24):
        4 rows × ⌈(6 + 9) / 4⌉·4 = 64;  2 × ⌈(5 + 17) / 4⌉·4 = 48 (+ the next row: 3 × 28 = 84);
        2 × ⌈(7 + 24) / 4⌉·4 = 64
    trimmed to prompt 6 + response 10, 5 + 19 and 7 + 24 (all of R) columns."""
    from trainer.roles.actor import ActorTrainWorker

    cfg = config(tmp_path, tiny_path, *MODES["roll_dynamic"])
    group = LocalWorkerGroup(ActorTrainWorker, "actor_train", init_args=(cfg,))
    try:
        strategy = group.worker.strategy
        strategy.model = Recorder(strategy.model)
        group.worker.train_step(rollout_batch(), step=1)
        calls = [shape for shape, _ in strategy.model.calls]
    finally:
        group.shutdown()
    assert sorted(calls) == [(2, 24), (2, 31), (4, 16)]
