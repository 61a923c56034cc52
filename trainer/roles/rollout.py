"""actor_infer: the rollout engine (`hf_infer` or `vllm`). Samples responses for its shard of the
prompts and receives the policy's new weights after each update."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from trainer.config import topology
from trainer.models import adapters, lora
from trainer.roles.common import (
    RoleBase,
    adapter_source,
    device,
    load_role_model,
    lora_served,
    model_path,
    role_section,
)
from trainer.roles.profiling import profiled
from trainer.rollout.base import Generation, SamplingParams

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig, WorkerConfig


class ActorInferWorker(RoleBase):
    def __init__(self, role: str, cfg: PipelineConfig, rank: int, world_size: int) -> None:
        self.role, self.cfg, self.rank, self.world_size = role, cfg, rank, world_size
        name = topology.strategy_name(role, role_section(cfg, role))
        if name == "vllm":
            self.engine = vllm_engine(cfg, role, rank)
        elif name == "hf_infer":
            self.engine = hf_engine(cfg, role)
        else:
            raise ValueError(
                f"{role}.strategy_args.strategy_name: {name!r} is not available in this build; valid: hf_infer, vllm"
            )

    @profiled
    def generate(self, batch: dict[str, Any], params: SamplingParams) -> list[Generation]:
        """Generate for this rank's prompt shard; the seed is offset by rank so shards differ."""
        if params.seed is not None and self.rank:
            params = SamplingParams(**{**params.__dict__, "seed": params.seed + 7919 * self.rank})
        return self.engine.generate(list(batch["prompt_ids"]), params)

    def load_weights(self, state_dict: Mapping[str, Tensor]) -> None:
        self.engine.load_weights(state_dict)

    def weight_format(self) -> tuple[str, torch.dtype]:
        """Where the engine's weights live now and their dtype: what an in-process sync should send."""
        weight = next(self.engine.model.parameters())
        return str(weight.device), weight.dtype

    def sleep(self) -> None:
        self.engine.sleep()

    def wake(self) -> None:
        self.engine.wake()

    def shutdown(self) -> None:
        """Release the engine's resources (vLLM's processes; hf_infer has none beyond its model)."""
        self.engine.shutdown()


def hf_engine(cfg: PipelineConfig, role: str) -> Any:
    return hf_engine_of(role_section(cfg, role), model_path(cfg, role), load_role_model(cfg, role))


def hf_engine_of(section: WorkerConfig, path: str, model: Any) -> Any:
    """An hf_infer engine over `model` (loaded from `path`): EOS from the tokenizer and the model's generation
    config, batches of the section's infer_batch_size."""
    from trainer.models.loading import load_tokenizer
    from trainer.rollout.hf import HFInferEngine

    tokenizer = load_tokenizer(path, trust_remote_code=section.model_args.trust_remote_code)
    eos = {tokenizer.eos_token_id}
    gen_eos = getattr(model.generation_config, "eos_token_id", None)
    eos.update(gen_eos if isinstance(gen_eos, list) else [gen_eos] if gen_eos is not None else [])
    return HFInferEngine(
        model,
        eos_token_ids=sorted(eos),
        pad_token_id=tokenizer.pad_token_id,
        device=device(),
        max_batch_size=section.infer_batch_size if section.infer_batch_size > 1 else None,
        decode=tokenizer.decode,
    )


def vllm_engine(cfg: PipelineConfig, role: str, rank: int) -> Any:
    """One in-process vLLM engine from the role's strategy_config and model_args (seed: pipeline seed + rank)."""
    from trainer.rollout.vllm import VllmEngine, engine_dtype, engine_kwargs

    section = role_section(cfg, role)
    path = model_path(cfg, role)
    options = topology.strategy_config(section)
    colocated = bool(set(section.device_mapping or ()) & set(cfg.actor_train.device_mapping or ()))
    policy = cfg.actor_train.model_args
    kwargs = engine_kwargs(
        options.model_dump(), dtype=engine_dtype(path, section.model_args.dtype), seed=cfg.seed + rank,
        on_gpu=torch.cuda.is_available(), colocated=colocated,
        trust_remote_code=section.model_args.trust_remote_code, hf_overrides=section.model_args.model_config_kwargs,
        lora_rank=lora.lora_rank(policy),
    )
    adapter, _ = adapter_source(cfg, role)
    if not lora_served(cfg):
        engine = VllmEngine(path, kwargs, sleep_level=options.sleep_level)
        if adapter is not None and options.load_format != "dummy":  # dummy: the trainer's weights come at start
            engine.load_weights(load_role_model(cfg, role).state_dict())  # the adapter merged (load_role_model)
        return engine
    # vLLM serves actor_train's LoRA: the adapter to start from (if any), later the trained one's tensors
    lora_config = adapters.adapter_config(policy, [], path)
    return VllmEngine(path, kwargs, sleep_level=options.sleep_level, lora_config=lora_config, adapter=adapter)
