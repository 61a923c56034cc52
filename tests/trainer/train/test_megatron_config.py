"""megatron_train / megatron_infer settings: strategy_config (ROLL's and RLinf's keys) and the HF model
config become megatron-core's configs (checked by building a real TransformerConfig on CPU); what
cannot run is refused with a clear reason — on a machine without CUDA, the strategies themselves."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.trainer.config.config_testing import changed
from tests.trainer.train.megatron_testing import tiny_causal_lm
from trainer.config import validate_config
from trainer.config.preflight import check_devices
from trainer.models.megatron_convert import gpt_layout
from trainer.train import OptimConfig, build_forward_strategy, build_strategy
from trainer.train.megatron_config import (
    MegatronOptions,
    check_model_parallel,
    gpt_model_kwargs,
    optimizer_config_kwargs,
    parse_strategy_config,
    rope_kwargs,
    transformer_config_kwargs,
)

ROLL_ACTOR = {
    "tensor_model_parallel_size": 2,
    "pipeline_model_parallel_size": 1,
    "expert_model_parallel_size": 1,
    "use_distributed_optimizer": True,
    "recompute_granularity": "full",
}  # examples/roll_rlvr_megatron.yaml
MEG_CFG = "actor_train.strategy_args.strategy_config"
ROLL_CP_FILE = (
    Path(__file__).parents[2] / "fixtures/foreign_corpus/roll/qwen3-30BA3B-rlvr_megatron/rlvr_config.yaml"
)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("name", ["megatron_train", "megatron_infer"])
def test_the_strategies_refuse_to_start_without_cuda_saying_why(name: str) -> None:
    model = tiny_causal_lm("qwen2", layers=2)
    with pytest.raises(RuntimeError) as refused:
        if name == "megatron_train":
            build_strategy(name, model, OptimConfig(), strategy_config=ROLL_ACTOR)
        else:
            build_forward_strategy(name, model, strategy_config=ROLL_ACTOR)
    message = str(refused.value)
    assert f"{name} needs a CUDA GPU and this machine has none" in message
    assert "forward pass runs only on CUDA" in message and "fsdp2_" in message and "deepspeed_" in message


def test_roll_keys_become_options_and_full_recompute_gets_megatron_lm_defaults() -> None:
    options = parse_strategy_config(ROLL_ACTOR)
    assert (options.tp, options.pp, options.distributed_optimizer) == (2, 1, True)
    assert (options.recompute_granularity, options.recompute_method, options.recompute_num_layers) == (
        "full",
        "uniform",
        1,
    )
    # RLinf writes method and layer count next to selective, where they do not apply
    selective = parse_strategy_config(
        {"recompute_granularity": "selective", "recompute_method": "uniform", "recompute_num_layers": 4}
    )
    assert (selective.recompute_method, selective.recompute_num_layers) == (None, None)
    assert parse_strategy_config(None) == MegatronOptions()


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"overlap_param_gather": True}, "needs use_distributed_optimizer"),
        ({"use_dist_checkpointing": True}, "needs dist_checkpointing_path"),
        ({"tensor_parallel_size": 2}, "tensor_parallel_size"),  # a misspelt key: the schema refuses it
    ],
)
def test_settings_that_cannot_act_are_refused(config: dict, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_strategy_config(config)


@pytest.mark.parametrize(
    ("options", "world", "words"),
    [
        (MegatronOptions(tp=3), 3, "num_attention_heads=4 is not a multiple of it"),
        (MegatronOptions(tp=2, pp=2), 6, r"2 × 2 × 1 does not divide the role's 6 ranks"),
        (MegatronOptions(pp=3), 3, "num_hidden_layers = 4 does not split evenly into .* 3 model chunks"),
        (
            MegatronOptions(pp=2, vpp=2, embedding_in_split=True),
            4,
            "num_hidden_layers \\+ embedding = 5 does not split evenly into .* 4 model chunks",
        ),
        (
            MegatronOptions(
                recompute_granularity="full", recompute_method="block", recompute_num_layers=3, pp=2
            ),
            2,
            "recompute_num_layers=3 exceeds the 2 layers of one model chunk",
        ),
        (
            MegatronOptions(tp=2, sequence_parallel=True),
            2,
            "sequence_parallel needs Transformer Engine layers",
        ),
    ],
)
def test_parallel_sizes_that_do_not_fit_the_model_are_named(
    options: MegatronOptions, world: int, words: str
) -> None:
    layout = gpt_layout(tiny_causal_lm("qwen2").config)
    with pytest.raises(ValueError, match=words):
        check_model_parallel(layout, options, world, te=False)
    if not options.sequence_parallel:
        with pytest.raises(ValueError, match=words):
            check_model_parallel(layout, options, world, te=True)
    else:
        check_model_parallel(layout, options, world, te=True)


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_the_transformer_config_megatron_builds_computes_like_the_hf_model(arch: str) -> None:
    from megatron.core.transformer.transformer_config import TransformerConfig

    hf = tiny_causal_lm(arch).config
    options = parse_strategy_config(
        {**ROLL_ACTOR, "sequence_parallel": True, "pipeline_model_parallel_size": 2}
    )
    config = TransformerConfig(**transformer_config_kwargs(gpt_layout(hf), hf, options, torch.bfloat16))
    assert (config.num_layers, config.hidden_size, config.ffn_hidden_size) == (4, 32, 64)
    assert (config.num_attention_heads, config.num_query_groups, config.kv_channels) == (4, 2, 8)
    assert config.normalization == "RMSNorm" and config.layernorm_epsilon == 1e-6 and config.gated_linear_unit
    assert config.add_qkv_bias is (arch == "qwen2") and not config.add_bias_linear
    assert (
        config.hidden_dropout == 0.0 and config.attention_dropout == 0.0
    )  # HF has none; Megatron's default 0.1
    assert (config.tensor_model_parallel_size, config.pipeline_model_parallel_size) == (2, 2)
    assert config.sequence_parallel and config.bf16 and config.params_dtype == torch.bfloat16
    assert (config.recompute_granularity, config.recompute_method, config.recompute_num_layers) == (
        "full",
        "uniform",
        1,
    )
    assert config.calculate_per_token_loss  # no averaging by Megatron: our losses carry the global normaliser
    single = TransformerConfig(
        **transformer_config_kwargs(
            gpt_layout(hf), hf, parse_strategy_config({"sequence_parallel": True}), torch.float32
        )
    )
    assert not single.sequence_parallel  # needs TP > 1 (validation warns)


def test_gpt_model_settings_pad_the_vocabulary_and_follow_the_rope_parameters() -> None:
    hf = tiny_causal_lm("llama", tied=True).config
    kwargs = gpt_model_kwargs(gpt_layout(hf), hf, tp=2)
    assert kwargs["vocab_size"] == 302 and kwargs["share_embeddings_and_output_weights"] is True
    assert (
        kwargs["position_embedding_type"] == "rope"
        and kwargs["rotary_base"] == hf.rope_parameters["rope_theta"]
    )
    llama3 = {
        "rope_type": "llama3",
        "rope_theta": 5e5,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    hf.rope_parameters = llama3
    assert rope_kwargs(hf) == {
        "position_embedding_type": "rope",
        "rotary_base": 5e5,
        "rope_scaling": True,
        "rope_scaling_factor": 8.0,
    }
    hf.rope_parameters = {**llama3, "high_freq_factor": 2.0}
    with pytest.raises(ValueError, match="rope_type='llama3'"):
        rope_kwargs(hf)
    hf.rope_parameters = {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}
    with pytest.raises(ValueError, match="rope_type='yarn'"):
        rope_kwargs(hf)


@pytest.mark.parametrize(
    ("optim", "kind", "decoupled", "distributed"),
    [("adamw", "adam", True, True), ("adam", "adam", False, True), ("sgd", "sgd", True, False)],
)
def test_the_optimizer_is_training_args_optim(
    optim: str, kind: str, decoupled: bool, distributed: bool
) -> None:
    from megatron.core.optimizer import OptimizerConfig

    options = parse_strategy_config({**ROLL_ACTOR, "use_distributed_optimizer": distributed})
    kwargs = optimizer_config_kwargs(
        OptimConfig(lr=3e-6, weight_decay=0.1, betas=(0.9, 0.95), optimizer=optim), options, torch.bfloat16
    )
    config = OptimizerConfig(**kwargs)
    assert (config.optimizer, config.decoupled_weight_decay, config.sgd_momentum) == (kind, decoupled, 0.0)
    assert (config.lr, config.weight_decay, config.adam_beta2) == (3e-6, 0.1, 0.95)
    assert config.bf16 and config.use_distributed_optimizer is distributed
    assert config.clip_grad == 0.0  # the strategy clips, with the global norm


def test_sgd_cannot_use_the_distributed_optimizer() -> None:
    with pytest.raises(
        ValueError, match=r"optim=sgd cannot run with strategy_config\.use_distributed_optimizer"
    ):
        optimizer_config_kwargs(
            OptimConfig(optimizer="sgd"), parse_strategy_config(ROLL_ACTOR), torch.float32
        )


def test_megatron_configs_validate_and_preflight_wants_cuda_devices() -> None:
    result = validate_config(
        changed(
            {
                "actor_train.strategy_args": {
                    "strategy_name": "megatron_train",
                    "strategy_config": {"tensor_model_parallel_size": 2},
                },
                "actor_train.device_mapping": [0, 1, 2, 3],
                "reference": {"strategy_args": {"strategy_name": "megatron_infer"}},
            }
        )
    )
    assert result.ok, result.errors
    assert result.derived["actor_train.dp_size"] == 2
    found = {i.path: i.message for i in check_devices(result.config, gpus=0)}
    assert (
        "megatron_train needs 4 CUDA device(s) on a node; this machine has 0"
        in found["actor_train.device_mapping"]
    )
    assert "megatron_infer needs 1 CUDA device(s)" in found["reference.device_mapping"]


def test_rolls_context_parallel_megatron_file_validates_as_shipped() -> None:
    """ROLL's qwen3-30BA3B-rlvr_megatron/rlvr_config.yaml trains with TP 1 × PP 2 × CP 4 on 32 GPUs (refused as
    not built before docs/decisions/0058)."""
    result = validate_config(ROLL_CP_FILE)
    assert result.ok, result.errors
    assert result.config is not None
    assert result.config.actor_train.strategy_args.strategy_config.context_parallel_size == 4
    assert result.derived["actor_train.dp_size"] == 4  # 32 devices / (1 × 2 × 4)


def test_context_parallelism_validates_and_must_divide_the_world() -> None:
    cp2 = {"strategy_name": "megatron_train", "strategy_config": {"context_parallel_size": 2}}
    result = validate_config(
        changed({"actor_train.strategy_args": cp2, "actor_train.device_mapping": [0, 1, 2, 3]})
    )
    assert result.ok, result.errors
    assert result.derived["actor_train.dp_size"] == 2  # 4 devices / CP 2
    assert parse_strategy_config(cp2["strategy_config"]).cp == 2
    odd = validate_config(
        changed({"actor_train.strategy_args": cp2, "actor_train.device_mapping": [0, 1, 2]})
    )
    found = {i.path: i.message for i in odd.errors}
    assert (
        "TP × PP × CP = 1 × 1 × 2 = 2 does not divide the role's 3 devices"
        in found[f"{MEG_CFG}.tensor_model_parallel_size"]
    )
    with pytest.raises(
        ValueError, match="× context_parallel_size = 1 × 1 × 2 does not divide the role's 3 ranks"
    ):
        check_model_parallel(
            gpt_layout(tiny_causal_lm("qwen2").config),
            parse_strategy_config(cp2["strategy_config"]),
            3,
            te=False,
        )
