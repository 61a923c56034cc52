"""Hugging Face <-> Megatron weight conversion (trainer.models.megatron_convert), by simulating every
tensor- and pipeline-parallel rank: the round trip is bit-exact, and each rank's shard holds exactly
the rows and columns Megatron reads there, checked against the HF weights sliced by head by hand."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, LlamaConfig

from tests.trainer.train.megatron_testing import VOCAB, tiny_causal_lm
from trainer.models.megatron_convert import (
    EMBEDDING,
    OUTPUT,
    check_tensor_parallel,
    from_te_names,
    gpt_layout,
    hf_to_megatron,
    megatron_to_hf,
    padded_vocab_size,
    stage_layers,
    to_te_names,
)
from trainer.models.value import ValueModel


def shards(hf: dict, layout, tp: int, pp: int) -> tuple[list[list[dict]], list[list[int]]]:
    """Every rank's state dict: [pipeline stage][tensor-parallel rank]."""
    layers = stage_layers(layout.num_layers, pp)
    return [
        [
            hf_to_megatron(
                hf,
                layout,
                tp_rank=r,
                tp_size=tp,
                layers=layers[s],
                pre_process=s == 0,
                post_process=s == pp - 1,
            )
            for r in range(tp)
        ]
        for s in range(pp)
    ], layers


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 1), (1, 2), (2, 2)])
def test_round_trip_is_bit_exact(arch: str, tied: bool, tp: int, pp: int) -> None:
    model = tiny_causal_lm(arch, tied=tied)
    hf = model.state_dict()
    layout = gpt_layout(model.config)
    stages, layers = shards(hf, layout, tp, pp)
    back = megatron_to_hf(stages, layers, layout)
    assert sorted(back) == sorted(hf)
    assert all(torch.equal(back[k], hf[k]) for k in hf)
    # a stage holds its own layers only, numbered from 0 on the stage
    local = {k.split(".")[2] for k in stages[-1][0] if k.startswith("decoder.layers.")}
    assert local == {str(i) for i in range(4 // pp)}
    if tied:  # Megatron keeps no output layer beside the embedding, and a copy on a later last stage
        assert (OUTPUT in stages[-1][0]) == (pp > 1)


def test_grouped_query_attention_with_more_tp_ranks_than_kv_heads_round_trips() -> None:
    model = tiny_causal_lm("qwen2")
    layout = gpt_layout(model.config)
    stages, layers = shards(model.state_dict(), layout, tp=4, pp=1)
    back = megatron_to_hf(stages, layers, layout)
    assert all(torch.equal(back[k], v) for k, v in model.state_dict().items())
    rows = stages[0][0]["decoder.layers.0.self_attention.linear_qkv.weight"].shape[0]
    assert rows == (4 + 2 * 2) * 8 // 4  # each rank: a quarter of the fused rows


def test_each_rank_holds_the_heads_and_columns_megatron_reads() -> None:
    """TP 2 of 4 query heads in 2 groups: rank r holds group r = [q heads 2r, 2r+1; k head r; v head r]."""
    model = tiny_causal_lm("qwen2")
    hf = model.state_dict()
    layout = gpt_layout(model.config)
    attn, mlp = "model.layers.1.self_attn.", "model.layers.1.mlp."
    head = 8
    for rank in range(2):
        shard = hf_to_megatron(
            hf, layout, tp_rank=rank, tp_size=2, layers=[1], pre_process=True, post_process=True
        )
        q = hf[f"{attn}q_proj.weight"][2 * rank * head : (2 * rank + 2) * head]
        k = hf[f"{attn}k_proj.weight"][rank * head : (rank + 1) * head]
        v = hf[f"{attn}v_proj.weight"][rank * head : (rank + 1) * head]
        assert torch.equal(shard["decoder.layers.0.self_attention.linear_qkv.weight"], torch.cat([q, k, v]))
        qb = hf[f"{attn}q_proj.bias"][2 * rank * head : (2 * rank + 2) * head]
        kb, vb = (hf[f"{attn}{n}_proj.bias"][rank * head : (rank + 1) * head] for n in "kv")
        assert torch.equal(shard["decoder.layers.0.self_attention.linear_qkv.bias"], torch.cat([qb, kb, vb]))
        assert torch.equal(
            shard["decoder.layers.0.self_attention.linear_proj.weight"],
            hf[f"{attn}o_proj.weight"][:, rank * 16 : (rank + 1) * 16],
        )
        half = slice(rank * 32, (rank + 1) * 32)
        assert torch.equal(
            shard["decoder.layers.0.mlp.linear_fc1.weight"],
            torch.cat([hf[f"{mlp}gate_proj.weight"][half], hf[f"{mlp}up_proj.weight"][half]]),
        )
        assert torch.equal(
            shard["decoder.layers.0.mlp.linear_fc2.weight"], hf[f"{mlp}down_proj.weight"][:, half]
        )
        assert torch.equal(
            shard["decoder.layers.0.pre_mlp_layernorm.weight"],
            hf["model.layers.1.post_attention_layernorm.weight"],
        )


def test_the_vocabulary_is_padded_with_zero_rows_to_a_multiple_of_tp() -> None:
    model = tiny_causal_lm("llama")
    hf = model.state_dict()
    layout = gpt_layout(model.config)
    assert padded_vocab_size(VOCAB, 2) == 302
    last = hf_to_megatron(hf, layout, tp_rank=1, tp_size=2, layers=[], pre_process=True, post_process=True)
    assert last[EMBEDDING].shape == (151, 32)
    assert torch.equal(last[EMBEDDING][:150], hf["model.embed_tokens.weight"][151:])
    assert torch.equal(last[EMBEDDING][150], torch.zeros(32))
    assert torch.equal(last[OUTPUT][:150], hf["lm_head.weight"][151:])


def test_a_critic_value_head_round_trips_replicated() -> None:
    critic = ValueModel(tiny_causal_lm("qwen2"))
    with torch.no_grad():
        critic.value_head.weight.normal_()
        critic.value_head.bias.fill_(0.5)
    hf = critic.state_dict()
    layout = gpt_layout(critic.backbone.config, head="value")
    stages, layers = shards(hf, layout, tp=2, pp=2)
    assert torch.equal(stages[-1][1][OUTPUT], hf["value_head.weight"])  # whole on every TP rank
    back = megatron_to_hf(stages, layers, layout)
    assert sorted(back) == sorted(hf) and all(torch.equal(back[k], hf[k]) for k in hf)


def test_transformer_engine_names_fuse_the_norms_into_the_next_linear() -> None:
    model = tiny_causal_lm("qwen2", layers=2)
    state = hf_to_megatron(
        model.state_dict(),
        gpt_layout(model.config),
        tp_rank=0,
        tp_size=1,
        layers=[0, 1],
        pre_process=True,
        post_process=True,
    )
    te = to_te_names(state)
    assert "decoder.layers.1.self_attention.linear_qkv.layer_norm_weight" in te
    assert "decoder.layers.1.mlp.linear_fc1.layer_norm_weight" in te
    assert "decoder.layers.1.input_layernorm.weight" not in te and "decoder.final_layernorm.weight" in te
    assert from_te_names(te).keys() == state.keys()


def test_what_megatron_cannot_hold_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="model_type qwen2, qwen3, qwen3_moe, llama; this model is 'gpt2'"):
        gpt_layout(GPT2Config())
    with pytest.raises(ValueError, match="attention_bias or mlp_bias"):
        gpt_layout(LlamaConfig(attention_bias=True))
    layout = gpt_layout(tiny_causal_lm("qwen2", layers=2).config)
    with pytest.raises(ValueError, match=r"tensor_model_parallel_size=3 .*num_attention_heads=4"):
        check_tensor_parallel(layout, 3)
    with pytest.raises(
        ValueError, match="num_hidden_layers=2 does not split evenly over pipeline_model_parallel_size=4"
    ):
        stage_layers(2, 4)
