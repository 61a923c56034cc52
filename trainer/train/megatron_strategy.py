"""`megatron_train` (actor_train, critic) and `megatron_infer` (forward-only roles) on megatron-core 0.16.

The caller has initialised torch.distributed (nccl for CUDA tensors, gloo for CPU ones) and loaded the
same Hugging Face model on every rank. Each strategy

1. refuses to start without CUDA (megatron-core's forward pass calls torch.cuda;
   megatron_config.require_cuda);
2. initialises megatron's parallel state: tensor (TP) × pipeline (PP, optionally virtual) model-parallel
   groups, context parallelism (CP: each rank holds 2 of 2·cp sequence chunks and attends to the
   gathered keys and values, trainer.train.megatron_cp), data parallelism (DP) over the rest — or joins
   the state an earlier role in this process set up with the same sizes;
3. builds GPTModel chunks with Transformer Engine layers when TE is installed, megatron-core's local
   layers otherwise, converts the HF weights to this rank's TP/PP shard (trainer.models.megatron_convert)
   and loads them; the HF model is kept only as a weight-less skeleton (meta device) for save_pretrained;
4. trains with megatron's pipeline schedules, DDP (fp32 gradient buffers) and optimizer (optionally the
   distributed one); the LR schedule (base.write_lr), global-norm clipping and the skip of a non-finite
   update (base.step_unless_non_finite) are ours, as for every strategy here.

Rows: the ranks of one model-parallel group (TP × PP) and their CP ranks compute on the same rows. The worker groups hand
every rank its own slice of a batch; `join_model_parallel_rows` gathers the group's slices (the rows of
its data-parallel rank) and says which rows of a result are this rank's to return.

What a LossFn or a forward fn sees as the model: in training, on the last pipeline stage, a StageOutput
whose call returns the output the pipeline computed for that micro-batch — full-vocabulary logits
gathered across the TP ranks (gradient split back) or a critic's values. In forward_no_grad, a
PipelineModel whose call runs the pipeline over its inputs on every stage and returns the last stage's
output on all of them; its `response_logprobs` computes log-probs from the vocab-sharded logits
(trainer.train.megatron_vocab) without gathering the vocabulary.

Padding: attention uses an explicit mask (causal and the batch's padding, `AttnMaskType.arbitrary`):
the fused causal kernels would ignore the left padding of our prompts.

Checkpoint layout in `path`: `dist/` (megatron's distributed checkpoint of the model chunks and the
optimizer, Megatron-LM's keys `model` / `model<i>` and `optimizer`), `rng_rank<r>.pt` per rank (RNG
states, megatron's CUDA RNG tracker, the optimizer step count). Resume needs the same TP × PP layout.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import Tensor, nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from trainer.checkpoint.core import get_rng_state, set_rng_state
from trainer.models.megatron_convert import (
    EMBEDDING,
    FINAL_NORM,
    OUTPUT,
    OUTPUT_BIAS,
    GPTLayout,
    Head,
    from_te_names,
    gpt_layout,
    is_expert_key,
    layer_tensors,
    megatron_edges_to_hf,
    megatron_experts_to_hf,
    megatron_layer_to_hf,
)
from trainer.models.value import ValueModel
from trainer.train.base import (
    DataParallel,
    LossFn,
    OptimConfig,
    StrategyBase,
    check_loss_metrics,
    require_process_group,
    require_same_micro_batch_count,
    step_unless_non_finite,
    to_device,
    write_lr,
)
from trainer.train.megatron_build import (
    build_chunks,
    context_parallel,
    global_layers,
    initialize_parallel_state,
    load_exactly,
    load_hf_weights,
    seed_model_parallel_rng,
    unwrap,
)
from trainer.train.megatron_config import (
    check_model_parallel,
    ddp_config_kwargs,
    optimizer_config_kwargs,
    parse_strategy_config,
    require_cuda,
    transformer_config_kwargs,
)
from trainer.train.megatron_cp import (
    ContextParallel,
    gather_replicated,
    sequence_multiple,
    split_sequence,
)
from trainer.train.megatron_lora import (
    LoraSpec,
    adapter_tensors,
    attach_adapters,
    base_state,
    is_adapter_key,
    lora_hf_tensors,
    lora_spec,
    restore_adapter_dtype,
    with_base_layer_names,
)
from trainer.train.megatron_vocab import vocab_parallel_logprobs_entropy

with (
    warnings.catch_warnings()
):  # "Transformer Engine and Apex are not installed": we say so in the spec choice
    warnings.simplefilter("ignore", UserWarning)
    from megatron.core import dist_checkpointing, tensor_parallel
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
        finalize_model_grads,
    )
    from megatron.core.models.gpt.gpt_layer_specs import (
        HAVE_TE,
    )
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.optimizer.clip_grads import clip_grad_by_total_norm_fp32
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.transformer.module import Float16Module
    from megatron.core.transformer.transformer_config import TransformerConfig

CHECKPOINT_DIR = "dist"


def sharding_metadata() -> dict[str, Any]:
    """A fresh metadata dict for every checkpoint (megatron adds this layout's groups to it in place):
    Megatron-LM's default optimizer format, resharding over data parallelism only."""
    return {"distrib_optim_sharding_type": "dp_reshardable"}


def attention_mask(mask_2d: Tensor) -> Tensor:
    """[B, S] 1 = token -> [B, 1, S, S] True = masked (Megatron's convention): causal, padding keys masked."""
    width = mask_2d.shape[1]
    causal = torch.ones(width, width, dtype=torch.bool, device=mask_2d.device).tril()
    return ~(causal[None, None] & mask_2d.bool()[:, None, None, :])


def pad_width(micro_batch: Mapping[str, Tensor], multiple: int) -> dict[str, Tensor]:
    """input_ids / attention_mask / position_ids right-padded (masked) to a multiple of `multiple`
    (sequence parallelism splits the sequence over the TP ranks, context parallelism into 2·cp chunks)."""
    ids = micro_batch["input_ids"]
    mask = micro_batch.get("attention_mask", torch.ones_like(ids))
    positions = micro_batch.get("position_ids", torch.arange(ids.shape[1], device=ids.device).expand_as(ids))
    extra = -ids.shape[1] % multiple
    pad = partial(nn.functional.pad, pad=(0, extra))
    return {"input_ids": pad(ids), "attention_mask": pad(mask), "position_ids": pad(positions)}


# --------------------------------------------------------------------------------------------
# what a loss or forward fn sees as the model


class StageOutput(nn.Module):
    """The model as a LossFn or forward fn sees it on the last pipeline stage: the pipeline has already
    run this micro-batch, so a call returns that output whatever inputs it is given — full-vocabulary
    logits (gathered across TP ranks; the gradient is split back) or a critic's values [B, S]. With
    context parallelism `output` holds this rank's zigzag positions; what a call returns is gathered
    back to whole sequences (megatron_cp.gather_replicated: every CP rank computes the same loss)."""

    def __init__(self, output: Tensor, width: int, layout: GPTLayout, cp: ContextParallel) -> None:
        super().__init__()
        self.output, self.width, self.layout, self.cp = output, width, layout, cp

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        out = gather_replicated(self.output, self.cp, dim=1)[:, : self.width]
        if self.layout.head == "value":
            return out.squeeze(-1)
        logits = tensor_parallel.gather_from_tensor_model_parallel_region(out)
        return CausalLMOutputWithPast(logits=logits[..., : self.layout.vocab_size])

    def response_logprobs(self, batch: Mapping[str, Tensor], temperature: float) -> Tensor:
        """log p(response token) [B, R] from this rank's vocabulary shard (trainer.models.batch's
        response_logprobs, computed without gathering the vocabulary)."""
        width_r = batch["response_mask"].size(1)
        ids = batch["input_ids"].to(self.output.device)
        if self.cp.size > 1:  # labels shifted over the whole sequence, then split as the inputs were
            labels = nn.functional.pad(
                ids[:, 1:], (0, self.output.shape[1] * self.cp.size - ids.shape[1] + 1)
            )
            local = self._vocab_logprobs(self.output, split_sequence(labels, self.cp, dim=1), temperature)
            return gather_replicated(local, self.cp, dim=1)[:, self.width - width_r - 1 : self.width - 1]
        shard = self.output[:, self.width - width_r - 1 : self.width - 1]
        return self._vocab_logprobs(shard, ids[:, -width_r:], temperature)

    def _vocab_logprobs(self, shard: Tensor, labels: Tensor, temperature: float) -> Tensor:
        """log p(labels) [B, S] from this rank's vocabulary shard of the logits [B, S, V / tp]."""
        shard = shard.float()
        if temperature > 0:
            shard = shard / temperature
        group = ps.get_tensor_model_parallel_group()
        logprobs, _ = vocab_parallel_logprobs_entropy(
            shard,
            labels,
            vocab_start=ps.get_tensor_model_parallel_rank() * shard.shape[-1],
            vocab_size=self.layout.vocab_size,
            reduce_max=partial(_all_reduce, op=dist.ReduceOp.MAX, group=group),
            reduce_sum=partial(_all_reduce, op=dist.ReduceOp.SUM, group=group),
        )
        return logprobs


def _all_reduce(tensor: Tensor, op: Any, group: Any) -> Tensor:  # op: a dist.ReduceOp member
    dist.all_reduce(tensor, op=op, group=group)
    return tensor


class PipelineModel(nn.Module):
    """The model forward_no_grad hands to its fn: a call runs the pipeline over the given inputs on
    every stage (every rank of the model-parallel group makes the same call) and returns the last
    stage's output on all of them."""

    def __init__(self, runner: _MegatronModel) -> None:
        super().__init__()
        self.runner = runner
        self.stages = nn.ModuleList(runner.chunks)  # so eval()/train() reach the model chunks
        self.train(runner.chunks[0].training)  # and eval_mode restores the chunks' own mode

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        **_: Any,
    ) -> Any:
        batch = {"input_ids": input_ids}
        batch |= {"attention_mask": attention_mask} if attention_mask is not None else {}
        batch |= {"position_ids": position_ids} if position_ids is not None else {}
        if self.runner.layout.head == "value":
            return self.runner.forward_only(batch, lambda out: out())
        return CausalLMOutputWithPast(
            logits=cast(torch.FloatTensor, self.runner.forward_only(batch, lambda out: out().logits))
        )

    def response_logprobs(self, batch: Mapping[str, Tensor], temperature: float) -> Tensor:
        return self.runner.forward_only(batch, lambda out: out.response_logprobs(batch, temperature))


# --------------------------------------------------------------------------------------------
# the strategies


class _MegatronModel(StrategyBase):
    """What megatron_train and megatron_infer share: parallel state, the model chunks, forward passes,
    rows of the model-parallel group and full HF weights."""

    def __init__(
        self,
        name: str,
        model: nn.Module,
        *,
        rank: int,
        world_size: int,
        device: str,
        strategy_config: Mapping[str, Any] | None,
    ) -> None:
        require_cuda(name)
        require_process_group(name, rank, world_size)
        self.rank, self.device = rank, torch.device(device)
        self.options = parse_strategy_config(strategy_config)
        head: Head = "value" if isinstance(model, ValueModel) else "lm"
        hf_config = cast(nn.Module, model.backbone if isinstance(model, ValueModel) else model).config
        self.layout = gpt_layout(hf_config, head)
        check_model_parallel(self.layout, self.options, world_size, te=HAVE_TE)
        dtype = next(model.parameters()).dtype
        initialize_parallel_state(self.options)
        seed_model_parallel_rng()
        self.config = TransformerConfig(
            **transformer_config_kwargs(self.layout, hf_config, self.options, dtype, te=HAVE_TE)
        )
        chunks = build_chunks(self.config, self.layout, hf_config, self.options)
        # LoRA (trainer.train.megatron_lora): PEFT's adapters move onto the megatron layers, the rest is frozen
        self.lora: LoraSpec | None = lora_spec(model, self.layout)
        if self.lora is not None:
            for chunk in chunks:
                attach_adapters(
                    chunk,
                    global_layers(chunk),
                    self.lora,
                    self.layout,
                    tp_rank=ps.get_tensor_model_parallel_rank(),
                    tp_size=self.options.tp,
                    sequence_parallel=self.config.sequence_parallel,
                    eps=self.config.layernorm_epsilon,
                )
        chunks = [chunk.to(self.device) for chunk in chunks]
        if self.options.init_checkpoint is None:
            load_hf_weights(
                chunks,
                base_state(model.state_dict()),
                self.layout,
                ps.get_tensor_model_parallel_rank(),
                self.options.tp,
                grouped_gemm=self.config.moe_grouped_gemm,
            )
        else:
            loaded = dist_checkpointing.load(self._model_sharded_state(chunks), self.options.init_checkpoint)
            for key, chunk in zip(self._model_keys(chunks), chunks, strict=True):
                load_exactly(chunk, loaded[key])
        self.hf_model: nn.Module = model.to(
            "meta"
        )  # the architecture for save_pretrained, without a second copy of the weights
        self.chunks: list[Any] = [  # megatron modules: methods (zero_grad_buffer, …) beyond nn.Module's
            Float16Module(self.config, c) if dtype != torch.float32 else c for c in chunks
        ]
        if self.lora is not None:
            restore_adapter_dtype(self.chunks, self.lora)
        self.model = nn.ModuleList(self.chunks)
        self.cp = context_parallel()
        self.data_parallel = DataParallel(  # the ranks with rows of their own (CP ranks share theirs)
            ps.get_data_parallel_rank(), ps.get_data_parallel_world_size(), ps.get_data_parallel_group()
        )

    # rows ---------------------------------------------------------------------------------------

    def join_model_parallel_rows(self, batch: Mapping[str, Any]) -> tuple[dict[str, Any], slice]:
        """The rows of this rank's data-parallel rank: the slices every rank of the model-parallel
        group (TP × PP) and of the CP group was handed — first joined over the CP group, then those
        joins over the model-parallel group, each in group-rank order, so every rank of the
        TP × CP × PP block holds the same rows; and the slice of them that is this rank's own."""
        joined, own = _join_rows(batch, ps.get_context_parallel_group())
        joined, block = _join_rows(joined, ps.get_model_parallel_group())
        return joined, slice(block.start + own.start, block.start + own.stop)

    # forward ------------------------------------------------------------------------------------

    def _forward_step(
        self, on_last_stage: Callable[..., Any], data_iterator: Any, model: nn.Module
    ) -> tuple[Tensor, Callable[..., Any]]:
        """Megatron's forward_step_func: one micro-batch through this chunk; `on_last_stage(mb, width,
        output, ...)` becomes the schedule's loss_func."""
        micro_batch = to_device(next(data_iterator), self.device)
        width = micro_batch["input_ids"].shape[1]
        inputs = pad_width(micro_batch, self._sequence_multiple())
        mask = attention_mask(inputs["attention_mask"])
        ids, positions = (split_sequence(inputs[k], self.cp, dim=1) for k in ("input_ids", "position_ids"))
        output = model(ids, positions, split_sequence(mask, self.cp, dim=2))  # this rank's query rows
        return output, partial(on_last_stage, micro_batch, width)

    def _sequence_multiple(self) -> int:
        return sequence_multiple(self.options.cp, self.options.tp if self.config.sequence_parallel else 1)

    def _schedule(
        self, micro_batches: list[dict[str, Tensor]], on_last_stage: Callable[..., Any], *, forward_only: bool
    ) -> list[Any]:
        """Megatron's schedule for the pipeline (1F1B, interleaved with virtual stages, or none). Stages
        exchange activations of one fixed shape [seq, micro-batch, hidden], so the micro-batches of one
        call must have one shape (megatron-core 0.16 refuses variable lengths on a dense model)."""
        shapes = {tuple(mb["input_ids"].shape) for mb in micro_batches}
        if len(shapes) > 1:
            raise ValueError(
                f"megatron: the micro-batches of one step must share one shape, got {sorted(shapes)}"
            )
        rows, width = shapes.pop()
        multiple = self._sequence_multiple()
        chunks = self.chunks
        iterators = [iter(micro_batches) for _ in chunks]
        return get_forward_backward_func()(
            forward_step_func=partial(self._forward_step, on_last_stage),
            data_iterator=iterators if len(chunks) > 1 else iterators[0],
            model=chunks if len(chunks) > 1 else chunks[0],
            num_microbatches=len(micro_batches),
            seq_length=width + (-width % multiple),
            micro_batch_size=rows,
            forward_only=forward_only,
            collect_non_loss_data=forward_only,
        )

    def forward_only(self, batch: Mapping[str, Tensor], fn: Callable[[StageOutput], Tensor]) -> Tensor:
        """fn(the last stage's output for `batch`), on every rank of the pipeline."""

        def collect(micro_batch: Any, width: int, output: Tensor, non_loss_data: bool = True) -> Tensor:
            return fn(StageOutput(output, width, self.layout, self.cp))

        results = self._schedule([dict(batch)], collect, forward_only=True)
        return self._from_last_stage(results[0] if results else None)

    def _from_last_stage(self, tensor: Tensor | None) -> Tensor:
        """The last pipeline stage's tensor on every stage of this rank's pipeline group."""
        if self.options.pp == 1:
            assert tensor is not None, "a single pipeline stage is the last stage"
            return tensor
        group, src = ps.get_pipeline_model_parallel_group(), ps.get_pipeline_model_parallel_last_rank()
        meta: list[Any] = [
            (tuple(tensor.shape), tensor.dtype, tensor.device.type) if tensor is not None else None
        ]
        dist.broadcast_object_list(meta, src=src, group=group)
        shape, dtype, device_type = meta[0]
        device = self.device if device_type == self.device.type else torch.device(device_type)
        out = tensor.contiguous() if tensor is not None else torch.empty(shape, dtype=dtype, device=device)
        dist.broadcast(out, src=src, group=group)
        return out

    def forward_model(self) -> nn.Module:
        return PipelineModel(self)

    def export_model(self) -> PreTrainedModel:
        return cast("PreTrainedModel", self.hf_model)

    # full weights ---------------------------------------------------------------------------------

    def full_state_dict(self) -> dict[str, Tensor]:
        """The whole model in Hugging Face names as CPU tensors on world rank 0; `{}` elsewhere.
        Collective. Each stage's TP group gathers one layer at a time (no rank holds more than one
        full layer beyond its shard); the stages' CPU tensors then go to rank 0."""
        experts = self._gather_experts() if self.layout.moe else {}
        if ps.get_data_parallel_rank(with_context_parallel=True) != 0:
            return {}
        tp_rank = ps.get_tensor_model_parallel_rank()
        part: dict[str, Tensor] = {}
        for chunk in self.chunks:
            model = unwrap(chunk)
            # the tensors only: not Transformer Engine's `_extra_state` (fp8 metadata, sized per rank)
            state = {
                k: v
                for k, v in model.state_dict().items()
                if isinstance(v, Tensor) and not k.endswith("_extra_state")
            }
            state = self._local_names(state)
            for index, layer in enumerate(global_layers(model)):
                tensors = layer_tensors(state, index)
                parts = self._gather_tensor_parallel(
                    {k: v for k, v in tensors.items() if not is_adapter_key(k) and not is_expert_key(k)}
                )
                hf = megatron_layer_to_hf(parts, layer, self.layout) if tp_rank == 0 else {}
                if self.lora is not None:  # PEFT's names, which the actor's merge_lora and save_adapter read
                    lora_parts = self._gather_tensor_parallel(adapter_tensors(tensors))
                    hf = with_base_layer_names(hf, self.lora) | lora_hf_tensors(lora_parts, layer, self.lora)
                if tp_rank == 0:
                    part |= {k: v.cpu() for k, v in hf.items()}
            first = self._gather_tensor_parallel({EMBEDDING: state[EMBEDDING]}) if model.pre_process else None
            last_keys = [k for k in (FINAL_NORM, OUTPUT, OUTPUT_BIAS) if k in state]
            last = (
                self._gather_tensor_parallel({k: state[k] for k in last_keys}) if model.post_process else None
            )
            if tp_rank == 0:
                part |= {k: v.cpu() for k, v in megatron_edges_to_hf(first, last, self.layout).items()}
        if tp_rank != 0:
            return {}
        part |= experts
        if self.options.pp == 1:
            return part
        stages: list[Any] | None = [None] * self.options.pp if self.rank == 0 else None
        dist.gather_object(part, stages, dst=0, group=ps.get_pipeline_model_parallel_group())
        return {k: v for stage in stages for k, v in stage.items()} if stages is not None else {}

    def _local_names(self, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """A chunk's state dict in local-spec names (Transformer Engine's renamed back)."""
        return from_te_names(state, self.layout, self.config.moe_grouped_gemm) if HAVE_TE else dict(state)

    def _gather_experts(self) -> dict[str, Tensor]:
        """This stage's MoE routers and experts in HF names, on the first rank of its expert TP × EP group
        (the stage's first rank, which assembles the stage: megatron orders both rank layouts from TP
        outwards); `{}` elsewhere. Collective over the ranks of expert-data-parallel rank 0, one layer
        at a time (CPU copies, as gather_object pickles them)."""
        if ps.get_expert_data_parallel_rank() != 0:
            return {}
        group = ps.get_expert_tensor_and_model_parallel_group()
        first = dist.get_rank(group) == 0
        coords = (ps.get_expert_model_parallel_rank(), ps.get_expert_tensor_parallel_rank())
        out: dict[str, Tensor] = {}
        for chunk in self.chunks:
            model = unwrap(chunk)
            state = self._local_names(
                {k: v for k, v in model.state_dict().items() if isinstance(v, Tensor) and "mlp." in k}
            )
            for index, layer in enumerate(global_layers(model)):
                mine = {k: v.cpu() for k, v in layer_tensors(state, index).items() if is_expert_key(k)}
                gathered: list[Any] | None = [None] * dist.get_world_size(group) if first else None
                dist.gather_object((coords, mine), gathered, dst=dist.get_global_rank(group, 0), group=group)
                if gathered is not None:
                    grid: list[list[dict[str, Tensor]]] = [
                        [{} for _ in range(self.options.expert_tp)] for _ in range(self.options.ep)
                    ]
                    for (ep, etp), tensors in gathered:
                        grid[ep][etp] = tensors
                    out |= megatron_experts_to_hf(grid, layer, self.layout)
        return out

    def _gather_tensor_parallel(self, tensors: Mapping[str, Tensor]) -> list[dict[str, Tensor]]:
        """`tensors` from every TP rank of this stage, in TP-rank order."""
        size = self.options.tp
        if size == 1:
            return [dict(tensors)]
        out: list[dict[str, Tensor]] = [{} for _ in range(size)]
        for key in sorted(tensors):
            pieces = [torch.empty_like(tensors[key]) for _ in range(size)]
            dist.all_gather(pieces, tensors[key].contiguous(), group=ps.get_tensor_model_parallel_group())
            for rank, piece in enumerate(pieces):
                out[rank][key] = piece
        return out

    # checkpoint keys --------------------------------------------------------------------------------

    @staticmethod
    def _model_keys(chunks: list[Any]) -> list[str]:
        return ["model"] if len(chunks) == 1 else [f"model{i}" for i in range(len(chunks))]

    def _model_sharded_state(self, chunks: list[Any]) -> dict[str, Any]:
        metadata = sharding_metadata()
        return {
            key: unwrap(c).sharded_state_dict(metadata=metadata)
            for key, c in zip(self._model_keys(chunks), chunks, strict=True)
        }


def _join_rows(batch: Mapping[str, Any], group: Any) -> tuple[dict[str, Any], slice]:
    """Every group rank's `batch` joined in group-rank order, and the slice of them that is this rank's."""
    parts: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(parts, dict(batch), group=group)
    sizes = [len(next(iter(part.values()))) for part in parts]
    mine = dist.get_rank(group)
    start = sum(sizes[:mine])
    joined = {key: _concat([part[key] for part in parts]) for key in batch}
    return joined, slice(start, start + sizes[mine])


def _concat(values: list[Any]) -> Any:
    return torch.cat(values) if isinstance(values[0], Tensor) else [v for part in values for v in part]


def _finalize_grads(model: list[nn.Module], num_tokens: Tensor | None, **kwargs: Any) -> None:
    """megatron's finalize_model_grads without its division by the token count: our losses arrive
    divided by the global normaliser already (so the step's gradient is their sum over micro-batches
    and data-parallel ranks, which DDP sums with calculate_per_token_loss set)."""
    finalize_model_grads(model, None, **kwargs)


class MegatronStrategy(_MegatronModel):
    """`megatron_train`: TP × PP model parallelism, DDP, megatron's optimizer (distributed optional)."""

    def __init__(
        self,
        model: nn.Module,
        optim: OptimConfig,
        *,
        rank: int,
        world_size: int,
        device: str = "cuda",
        strategy_config: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            "megatron_train",
            model,
            rank=rank,
            world_size=world_size,
            device=device,
            strategy_config=strategy_config,
        )
        self.optim = optim
        dtype = self.config.params_dtype
        ddp_config = DistributedDataParallelConfig(**ddp_config_kwargs(self.options))
        self.chunks = [
            DistributedDataParallel(
                config=self.config, ddp_config=ddp_config, module=chunk, disable_bucketing=index > 0
            )
            for index, chunk in enumerate(self.chunks)
        ]
        self.model = nn.ModuleList(self.chunks)
        self.optimizer = get_megatron_optimizer(
            OptimizerConfig(**optimizer_config_kwargs(optim, self.options, dtype)),
            self.chunks,
            config_overrides={},
        )
        self.config.finalize_model_grads_func = _finalize_grads
        if self.options.overlap_grad_reduce:
            no_sync = [c.no_sync for c in self.chunks]
            grad_sync = [c.start_grad_sync for c in self.chunks]
            self.config.no_sync_func = no_sync[0] if len(no_sync) == 1 else no_sync
            self.config.grad_sync_func = grad_sync[0] if len(grad_sync) == 1 else grad_sync
        if self.config.fp16:
            self.config.grad_scale_func = self.optimizer.scale_loss
        self.optimizer_steps = 0

    def train_step(self, micro_batches: list[dict[str, Tensor]], loss_fn: LossFn) -> dict[str, float]:
        """One optimizer step over this data-parallel rank's micro-batches (every rank must bring the
        same number: checked first, a mismatch would hang in a collective). `loss` is this DP rank's
        sum of micro-batch losses, the loss_fn metrics their mean, on every rank of the pipeline."""
        require_same_micro_batch_count("megatron_train", len(micro_batches))
        if not micro_batches:
            raise ValueError("train_step got no micro-batches")
        for chunk in self.chunks:
            chunk.train()
            chunk.zero_grad_buffer()
        self.optimizer.zero_grad()

        def loss(micro_batch: Any, width: int, output: Tensor) -> tuple[Tensor, Tensor, dict[str, Any]]:
            value, metrics = loss_fn(StageOutput(output, width, self.layout, self.cp), micro_batch)
            check_loss_metrics(metrics)
            no_count = torch.zeros((), dtype=torch.int, device=value.device)  # see _finalize_grads
            return value, no_count, {"loss": float(value.detach()), "metrics": metrics}

        reduced = self._schedule(micro_batches, loss, forward_only=False)
        summary: list[Any] = [_summarise(reduced)] if reduced else [None]
        if self.options.pp > 1:
            dist.broadcast_object_list(
                summary,
                src=ps.get_pipeline_model_parallel_last_rank(),
                group=ps.get_pipeline_model_parallel_group(),
            )
        loss_sum, metrics = summary[0]
        return {**metrics, **self._optimizer_step(), "loss": loss_sum}

    def _optimizer_step(self) -> dict[str, float]:
        """Write this step's LR, measure the global gradient norm, skip a non-finite update (the
        schedule advances either way), clip to max_grad_norm, step."""
        lr = write_lr(self.optimizer, self.optim, self.optimizer_steps)
        self.optimizer_steps += 1
        found_inf = self.optimizer.prepare_grads()  # fp16: unscales and updates the loss scale
        grad_norm = math.inf if found_inf else float(self.optimizer.get_grad_norm())

        def clip_and_step() -> None:
            if self.optim.max_grad_norm is not None:
                for sub in getattr(self.optimizer, "chained_optimizers", [self.optimizer]):
                    params = sub.get_parameters()
                    if params:
                        clip_grad_by_total_norm_fp32(
                            params, max_norm=self.optim.max_grad_norm, total_norm=grad_norm
                        )
            self.optimizer.step_with_ready_grads()

        return step_unless_non_finite(grad_norm, lr, apply=clip_and_step, discard=self.optimizer.zero_grad)

    def progress(self) -> dict[str, int | None]:
        """The LR schedule's position (optimizer_steps, skipped updates included); megatron's optimizer keeps
        no count of applied updates this strategy reads."""
        return {"optimizer_step": None, "scheduler_step": self.optimizer_steps}

    def full_state_dict(self) -> dict[str, Tensor]:
        self._sync_params()
        return super().full_state_dict()

    def _sync_params(self) -> None:
        """With overlap_param_gather the distributed optimizer's all-gather of updated parameters waits
        for the next forward: finish it before the parameters are read."""
        if self.options.overlap_param_gather:
            for chunk in self.chunks:
                chunk.start_param_sync(force_sync=True)

    def save_checkpoint(self, path: Path) -> None:
        """Collective: every rank, the same (shared-filesystem) path."""
        path = Path(path)
        (path / CHECKPOINT_DIR).mkdir(parents=True, exist_ok=True)
        dist.barrier()
        self._sync_params()
        dist_checkpointing.save(self._sharded_state(is_loading=False), str(path / CHECKPOINT_DIR))
        torch.save(
            {
                "rng": get_rng_state(),
                "tracker": tensor_parallel.get_cuda_rng_tracker().get_states(),
                "optimizer_steps": self.optimizer_steps,
                "adam_steps": self._adam_steps(),
            },
            path / f"rng_rank{self.rank}.pt",
        )
        dist.barrier()

    def load_checkpoint(self, path: Path) -> None:
        """Collective. The TP × PP layout must equal the one that saved."""
        path = Path(path)
        own = path / f"rng_rank{self.rank}.pt"
        if not own.exists():
            raise FileNotFoundError(
                f"{own} missing: was this checkpoint saved with the same number of ranks?"
            )
        with torch.no_grad():  # the distributed optimizer copies into views of parameters that require grad
            self._ready_optimizer_state()
            loaded = dist_checkpointing.load(self._sharded_state(is_loading=True), str(path / CHECKPOINT_DIR))
            for key, chunk in zip(self._model_keys(self.chunks), self.chunks, strict=True):
                load_exactly(unwrap(chunk), loaded[key])
            self.optimizer.load_state_dict(loaded["optimizer"])
        extra = torch.load(own, weights_only=True)
        self._set_adam_steps(extra["adam_steps"])
        self.optimizer_steps = int(extra["optimizer_steps"])
        set_rng_state(extra["rng"])
        tensor_parallel.get_cuda_rng_tracker().set_states(extra["tracker"])

    def _sub_optimizers(self) -> list[Any]:
        return list(getattr(self.optimizer, "chained_optimizers", [self.optimizer]))

    def _ready_optimizer_state(self) -> None:
        """megatron-core loads a distributed optimizer's checkpoint into Adam state that must exist
        already (Megatron-LM creates it at set-up with init_state_fn); torch's own Adam (used without
        Transformer Engine or Apex) also needs its per-parameter step there. SGD without momentum has
        no state, but megatron-core 0.16 calls its (absent) init_state_fn when loading all the same."""
        for sub in self._sub_optimizers():
            if sub.init_state_fn is None:
                sub.init_state_fn = _no_state
            if isinstance(sub, DistributedOptimizer) and not sub.optimizer.state:
                sub.init_state_fn(sub.optimizer, sub.config)
            if isinstance(sub.optimizer, torch.optim.Adam | torch.optim.AdamW):
                for state in sub.optimizer.state.values():
                    state.setdefault("step", torch.zeros((), dtype=torch.float32))

    def _torch_adam_states(self) -> list[dict[str, Any]]:
        return [
            state
            for sub in self._sub_optimizers()
            if isinstance(sub.optimizer, torch.optim.Adam | torch.optim.AdamW)
            for state in sub.optimizer.state.values()
        ]

    def _adam_steps(self) -> float | None:
        """The update count of torch's own Adam (None without its state: TE / Apex Adam keep theirs in the
        param groups, which megatron's checkpoint restores)."""
        states = [state for state in self._torch_adam_states() if "step" in state]
        return float(states[0]["step"]) if states else None

    def _set_adam_steps(self, steps: float | None) -> None:
        """Restore torch Adam's per-parameter step ourselves: megatron-core 0.16's distributed optimizer
        restores it from its own param groups, not the checkpoint's, as ONE tensor shared by all
        parameters (the next update would then advance it once per parameter)."""
        if steps is not None:
            for state in self._torch_adam_states():
                state["step"] = torch.tensor(steps, dtype=torch.float32)

    def _sharded_state(self, *, is_loading: bool) -> dict[str, Any]:
        state = self._model_sharded_state(self.chunks)
        state["optimizer"] = self.optimizer.sharded_state_dict(
            state, is_loading=is_loading, metadata=sharding_metadata()
        )
        return state


def _no_state(optimizer: torch.optim.Optimizer, config: Any = None) -> None:
    """init_state_fn of an optimizer without state (SGD without momentum)."""


def _summarise(reduced: list[dict[str, Any]]) -> tuple[float, dict[str, float]]:
    """(Σ micro-batch losses, loss_fn metrics averaged over micro-batches) on the last stage."""
    sums: dict[str, float] = {}
    for item in reduced:
        for key, value in item["metrics"].items():
            sums[key] = sums.get(key, 0.0) + float(value)
    return sum(item["loss"] for item in reduced), {k: v / len(reduced) for k, v in sums.items()}


class MegatronForward(_MegatronModel):
    """`megatron_infer`: a frozen model sharded TP × PP for forward passes (reference log-probs)."""

    def __init__(
        self,
        model: nn.Module,
        *,
        rank: int,
        world_size: int,
        device: str = "cuda",
        strategy_config: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            "megatron_infer",
            model,
            rank=rank,
            world_size=world_size,
            device=device,
            strategy_config=strategy_config,
        )
        for chunk in self.chunks:
            chunk.eval().requires_grad_(False)
