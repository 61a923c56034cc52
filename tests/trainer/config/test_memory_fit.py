"""The memory-fit estimate against numbers worked out by hand (and parameter counts against transformers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from trainer.config import PipelineConfig
from trainer.config.memory_fit import (
    GIB,
    ModelShape,
    estimate_memory,
    model_shapes,
    read_model_config,
    shape_from_hf_config,
    tiny_shape,
)

# Qwen2.5-1.5B's config.json (the fields the count uses). Its model card says 1.54B parameters; by hand:
# embeddings 151936·1536 = 233,373,696 (tied); per layer q 1536·1536+1536, k and v 1536·256+256 each,
# o 1536·1536, MLP 3·1536·8960, norms 2·1536 = 46,797,824; 28 layers + final norm 1536 = 1,543,714,304.
QWEN25_15B = {"model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
              "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
              "torch_dtype": "bfloat16"}
# Llama-2-7B: 2·32000·4096 + 32·(4·4096² + 3·4096·11008 + 2·4096) + 4096 = 6,738,415,616 (the published count).
LLAMA2_7B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000, "tie_word_embeddings": False}

# A round model for hand arithmetic: 1e9 parameters, 10 layers, hidden 1000, 8 kv heads of 100, 10,000 tokens.
ROUND = ModelShape(params=10**9, layers=10, hidden=1000, kv_heads=8, head_dim=100, vocab=10_000)


def test_parameter_counts_by_hand() -> None:
    qwen = shape_from_hf_config(QWEN25_15B)
    assert qwen.params == 1_543_714_304
    assert (qwen.layers, qwen.kv_heads, qwen.head_dim, qwen.dtype_bytes) == (28, 2, 128, 2)
    assert shape_from_hf_config(LLAMA2_7B).params == 6_738_415_616


@pytest.mark.parametrize("config", [
    {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2,
     "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 259, "tie_word_embeddings": True},
    {"model_type": "llama", "hidden_size": 128, "intermediate_size": 320, "num_hidden_layers": 3,
     "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000, "attention_bias": True,
     "mlp_bias": True, "tie_word_embeddings": False},
    {"model_type": "qwen2_moe", "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
     "shared_expert_intermediate_size": 96, "num_experts": 4, "num_experts_per_tok": 2, "num_hidden_layers": 2,
     "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300, "mlp_only_layers": []},
    {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128, "num_local_experts": 4,
     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300},
], ids=["qwen2", "llama-biases", "qwen2-moe", "mixtral"])
def test_parameter_count_matches_the_model_transformers_builds(config: dict[str, Any]) -> None:
    """A reference implementation: the model itself, built by transformers from the same config."""
    transformers = pytest.importorskip("transformers")
    hf_config = transformers.AutoConfig.for_model(**config)
    model = transformers.AutoModelForCausalLM.from_config(hf_config)
    assert shape_from_hf_config(hf_config.to_dict()).params == sum(p.numel() for p in model.parameters())


def config_of(actor_train: dict[str, Any], actor_infer: dict[str, Any] | None = None, **top: Any) -> PipelineConfig:
    return PipelineConfig.model_validate({
        "rollout_batch_size": 8, "num_return_sequences_in_group": 4, "prompt_length": 100, "response_length": 100,
        "actor_train": {"model_args": {"model_name_or_path": "/models/m", "dtype": "bf16"},
                        "training_args": {"per_device_train_batch_size": 2}, **actor_train},
        "actor_infer": actor_infer or {"model_args": {"model_name_or_path": "/models/m", "dtype": "bf16"},
                                       "strategy_args": {"strategy_name": "hf_infer"}},
        **top,
    })


def role(estimate, name: str):
    return next(r for r in estimate.roles if r.role == name)


def test_training_role_by_hand() -> None:
    """torch_train, bf16, one device: weights 2e9, gradients 2e9, AdamW moments in bf16 4e9; one micro-batch of
    T = 2·(100+100) = 400 tokens with gradient checkpointing keeps (L·h·w + 17·h·w)·T = (20,000 + 34,000)·400 =
    21.6e6 bytes, its logits T·V·(w+4) = 400·10,000·6 = 24e6."""
    cfg = config_of({"strategy_args": {"strategy_name": "torch_train"}, "device_mapping": [0]})
    actor = role(estimate_memory(cfg, {"/models/m": ROUND}), "actor_train")
    assert actor.parts == {"weights": 2 * 10**9, "gradients": 2 * 10**9, "optimizer": 4 * 10**9,
                           "activations": 21_600_000 + 24_000_000}
    assert actor.total == 8_045_600_000 and actor.fits

    no_ckpt = config_of({"strategy_args": {"strategy_name": "torch_train"},
                         "model_args": {"model_name_or_path": "/models/m", "dtype": "bf16",
                                        "disable_gradient_checkpointing": True}})
    # every layer keeps 17·h·w per token: 10·34,000·400 = 136e6, + the same logits
    assert role(estimate_memory(no_ckpt, {"/models/m": ROUND}), "actor_train").parts["activations"] == 160_000_000


@pytest.mark.parametrize(("strategy", "devices", "weights", "gradients", "optimizer"), [
    # ZeRO-2 over 4 ranks: the optimizer (fp32 master + 2 moments = 12 bytes) and the gradients are split
    ({"strategy_name": "deepspeed_train", "strategy_config": {"zero_optimization": {"stage": 2}}}, [0, 1, 2, 3],
     2 * 10**9, 5 * 10**8, 3 * 10**9),
    # ZeRO-3: the weights too
    ({"strategy_name": "deepspeed_train", "strategy_config": {"zero_optimization": {"stage": 3}}}, [0, 1, 2, 3],
     5 * 10**8, 5 * 10**8, 3 * 10**9),
    # ZeRO-2 with the optimizer offloaded to the host
    ({"strategy_name": "deepspeed_train", "strategy_config": {"zero_optimization": {
        "stage": 2, "offload_optimizer": {"device": "cpu"}}}}, [0, 1, 2, 3], 2 * 10**9, 5 * 10**8, 0),
    # Megatron TP 2 × PP 2 on 8 devices (dp 2), distributed optimizer: everything ÷ 4, the optimizer ÷ 4·2
    ({"strategy_name": "megatron_train", "strategy_config": {"tensor_model_parallel_size": 2,
      "pipeline_model_parallel_size": 2, "use_distributed_optimizer": True}}, list(range(8)),
     5 * 10**8, 5 * 10**8, 15 * 10**8),
    # FSDP2 over 4 ranks: all three split 4 ways; AdamW moments in bf16 (2·2 bytes)
    ({"strategy_name": "fsdp2_train"}, [0, 1, 2, 3], 5 * 10**8, 5 * 10**8, 10**9),
])
def test_strategies_split_the_states_by_hand(strategy, devices, weights, gradients, optimizer) -> None:
    cfg = config_of({"strategy_args": strategy, "device_mapping": devices})
    parts = role(estimate_memory(cfg, {"/models/m": ROUND}), "actor_train").parts
    assert (parts["weights"], parts["gradients"], parts["optimizer"]) == (weights, gradients, optimizer)


def test_megatron_splits_activations_by_tp_and_cp() -> None:
    """TP 2, CP 2: T = 400/2 = 200 tokens; kept (10·1000·2/2 + 34,000/2)·200 = 5.4e6; logits 200·10,000·6/2 = 6e6."""
    cfg = config_of({"strategy_args": {"strategy_name": "megatron_train", "strategy_config": {
        "tensor_model_parallel_size": 2, "context_parallel_size": 2}}, "device_mapping": [0, 1, 2, 3]})
    assert role(estimate_memory(cfg, {"/models/m": ROUND}), "actor_train").parts["activations"] == 11_400_000


def test_vllm_reserves_its_share_and_counts_sequences_by_hand() -> None:
    """0.5 of 80 GiB = 42,949,672,960 bytes; weights 2e9; KV per token 2·10·8·100·2 = 32,000 bytes, a sequence
    of 200 tokens 6.4e6, so (42,949,672,960 − 2e9) // 6.4e6 = 6398 sequences at once (a rollout has 32)."""
    infer = {"model_args": {"model_name_or_path": "/models/m", "dtype": "bf16"}, "device_mapping": [0],
             "strategy_args": {"strategy_name": "vllm", "strategy_config": {"gpu_memory_utilization": 0.5}}}
    engine = role(estimate_memory(config_of({}, infer), {"/models/m": ROUND}), "actor_infer")
    assert engine.parts == {"weights": 2 * 10**9, "kv_cache": 40 * GIB - 2 * 10**9}
    assert "holds 6398 sequences of 200 tokens" in " ".join(engine.notes) and engine.fits

    too_big = ModelShape(params=30 * 10**9, layers=10, hidden=1000, kv_heads=8, head_dim=100, vocab=10_000)
    estimate = estimate_memory(config_of({}, infer), {"/models/m": too_big})
    assert role(estimate, "actor_infer").fits is False
    assert any(w.startswith("actor_infer needs") and "fill the 50% of the device vllm may take" in w
               for w in estimate.warnings)


def test_hf_infer_needs_the_whole_batch_in_its_kv_cache() -> None:
    """32 samples on one engine: 32·200 tokens·32,000 bytes = 204.8e6; prefill 34,000·32·100 + 32·10,000·4."""
    engine = role(estimate_memory(config_of({}), {"/models/m": ROUND}), "actor_infer")
    assert engine.parts == {"weights": 2 * 10**9, "activations": 108_800_000 + 1_280_000, "kv_cache": 204_800_000}


def test_a_role_that_will_not_fit_is_named() -> None:
    """7B parameters in fp32 with torch_train: 7e9·(4 + 4 + 8) = 112e9 bytes > 80 GiB (85.9e9)."""
    seven = ModelShape(params=7 * 10**9, layers=32, hidden=4096, kv_heads=32, head_dim=128, vocab=32000)
    cfg = config_of({"strategy_args": {"strategy_name": "torch_train"},
                     "model_args": {"model_name_or_path": "/models/m", "dtype": "fp32"}})
    estimate = estimate_memory(cfg, {"/models/m": seven})
    assert role(estimate, "actor_train").fits is False
    assert any(w.startswith("actor_train needs") and "will not fit in 80 GiB" in w for w in estimate.warnings)
    assert estimate.to_dict()["roles"][0]["total"] == role(estimate, "actor_train").total


def test_unknown_size_is_said_not_guessed() -> None:
    estimate = estimate_memory(config_of({}), {"/models/m": None})
    actor = role(estimate, "actor_train")
    assert actor.fits is None and actor.parts == {} and "declare its size" in actor.notes[0]
    assert estimate.warnings == []


def test_shapes_come_from_tiny_models_config_json_or_the_declared_size(tmp_path: Path) -> None:
    cfg = PipelineConfig.model_validate({
        "actor_train": {"model_args": {"model_name_or_path": "tiny://small?seed=0"}},
        "actor_infer": {"model_args": {"model_name_or_path": str(tmp_path / "qwen")}},
        "reference": {"model_args": {"model_name_or_path": "org/hub-model"}},
    })
    (tmp_path / "qwen").mkdir()
    (tmp_path / "qwen" / "config.json").write_text(json.dumps(QWEN25_15B))
    shapes = model_shapes(cfg, lambda path: read_model_config(path, [tmp_path]), declared=ROUND)
    assert shapes["tiny://small?seed=0"] == tiny_shape("tiny://small?seed=0")
    assert shapes["tiny://small?seed=0"].source == "tiny model"
    assert shapes[str(tmp_path / "qwen")].params == 1_543_714_304
    assert shapes["org/hub-model"] == ROUND  # not readable here: the declared size
    assert model_shapes(cfg, lambda path: None)["org/hub-model"] is None


def test_config_json_is_read_only_inside_the_allowed_roots(tmp_path: Path) -> None:
    root, outside = tmp_path / "models", tmp_path / "elsewhere"
    for folder in (root / "ok", outside):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(QWEN25_15B))
    (root / "escape").symlink_to(outside)
    (root / "big").mkdir()
    (root / "big" / "config.json").write_text(json.dumps({"x": "y" * 2_000_000}))
    (root / "list").mkdir()
    (root / "list" / "config.json").write_text("[1, 2]")
    assert read_model_config(str(root / "ok"), [root])["hidden_size"] == 1536
    assert read_model_config(str(root / "ok" / ".." / "ok"), [root]) is not None
    for refused in (outside, root / "escape", root / "big", root / "list", root / "missing", root / ".." / "elsewhere"):
        assert read_model_config(str(refused), [root]) is None, refused
