"""What every training strategy shares: the optimiser config, the LR schedule, gradient clipping,
device placement of inputs, mixed precision and the protocol the pipeline programs against.

A strategy owns one model replica (or shard), its optimiser and its scheduler. The pipeline hands
it CPU batches and a function of (model, batch); the strategy puts the batch on its own device —
in one place, `StrategyBase.forward_no_grad` for forward passes and `accumulate_gradients` for
training micro-batches — so no call site moves tensors itself (the first CUDA run died on a
forward pass whose inputs had stayed on the CPU).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.tensor import DTensor

from trainer.config.schema import TrainingArgs

if TYPE_CHECKING:
    from transformers import PreTrainedModel

T = TypeVar("T")

LossFn = Callable[[nn.Module, dict[str, Tensor]], tuple[Tensor, dict[str, float]]]
"""(model, micro_batch) -> (loss already divided by the GLOBAL normaliser, float metrics)."""
ForwardFn = Callable[[nn.Module, dict[str, Tensor]], T]
"""(model, batch on the strategy's device) -> a result, e.g. log-probs [B, R]."""

LR_SCHEDULER_TYPES = ("constant", "linear", "cosine")
OPTIMIZERS = ("adamw", "adamw_torch", "adam", "sgd")  # training_args.optim
RESERVED_METRICS = ("loss", "grad_norm", "lr", "update_skipped")


@dataclass
class OptimConfig:
    """AdamW + warmup/decay schedule, built from a role's `training_args` by the caller."""

    lr: float = 1e-6
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    warmup_steps: int = 0
    lr_scheduler_type: str = "constant"
    num_training_steps: int = 1
    max_grad_norm: float | None = 1.0
    min_lr_ratio: float = 0.0  # linear/cosine decay towards lr × this instead of 0
    optimizer: str = "adamw"

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"OptimConfig.optimizer={self.optimizer!r}; valid: {', '.join(OPTIMIZERS)}")
        if self.lr_scheduler_type not in LR_SCHEDULER_TYPES:
            raise ValueError(
                f"OptimConfig.lr_scheduler_type={self.lr_scheduler_type!r} is not supported; "
                f"valid: {', '.join(LR_SCHEDULER_TYPES)}"
            )
        if self.lr < 0:
            raise ValueError(f"OptimConfig.lr must be >= 0, got {self.lr}")
        if self.warmup_steps < 0:
            raise ValueError(f"OptimConfig.warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.num_training_steps < 1:
            raise ValueError(f"OptimConfig.num_training_steps must be >= 1, got {self.num_training_steps}")
        if self.max_grad_norm is not None and self.max_grad_norm <= 0:
            raise ValueError(
                f"OptimConfig.max_grad_norm must be > 0 or None (no clipping), got {self.max_grad_norm}"
            )
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError(f"OptimConfig.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        self.betas = (float(self.betas[0]), float(self.betas[1]))

    @classmethod
    def from_training_args(cls, training_args: TrainingArgs | Mapping[str, Any], num_training_steps: int) -> OptimConfig:
        """From a role's typed `training_args` (HF-TrainingArguments names, as ROLL has them), or a mapping of
        them, validated as that section (a misspelt name is an error, never a silent default). `warmup_ratio`
        applies when `warmup_steps` is 0."""
        args = training_args if isinstance(training_args, TrainingArgs) else TrainingArgs.model_validate(training_args)
        warmup_steps = args.warmup_steps or round(args.warmup_ratio * num_training_steps)
        return cls(
            lr=args.learning_rate,
            weight_decay=args.weight_decay,
            betas=(args.adam_beta1, args.adam_beta2),
            eps=args.adam_epsilon,
            warmup_steps=warmup_steps,
            lr_scheduler_type=args.lr_scheduler_type,
            num_training_steps=num_training_steps,
            max_grad_norm=args.max_grad_norm,
            min_lr_ratio=args.min_lr_ratio,
            optimizer=args.optim,
        )


class ForwardStrategy(Protocol):
    """A forward-only role (reference, log-prob roles): the model, maybe sharded, without an optimizer."""

    model: nn.Module
    device: torch.device
    data_parallel: DataParallel

    def forward_no_grad(self, fn: ForwardFn[T], batch: Mapping[str, Tensor]) -> T: ...

    def join_model_parallel_rows(self, batch: Mapping[str, Any]) -> tuple[dict[str, Any], slice]: ...

    def full_state_dict(self) -> dict[str, Tensor]: ...


class TrainStrategy(ForwardStrategy, Protocol):
    def train_step(self, micro_batches: list[dict[str, Tensor]], loss_fn: LossFn) -> dict[str, float]: ...

    def save_checkpoint(self, path: Path) -> None: ...

    def load_checkpoint(self, path: Path) -> None: ...

    def full_weights(self, *, device: torch.device | str, dtype: torch.dtype,
                     bucket_bytes: int) -> Iterator[dict[str, Tensor]]: ...

    def export_model(self) -> PreTrainedModel: ...

    def progress(self) -> dict[str, int | None]:
        """{"optimizer_step": updates applied, "scheduler_step": the LR schedule's position} (None where
        the strategy keeps no such count): what a resume report says the load restored."""
        ...


@dataclass(frozen=True)
class DataParallel:
    """This rank's place in data parallelism: what the update uses to cut and count the rows.
    `group` None is the default process group (every rank a replica); Megatron's model-parallel
    ranks share one data-parallel rank and have a group of their own."""

    rank: int
    size: int
    group: Any = None


class StrategyBase:
    """The skeleton every strategy shares: where its inputs go, under which precision it computes,
    and which rows it answers for.

    A subclass sets `model` and `device` (and `data_parallel` when it trains over several ranks); it
    overrides `forward_model` when the module a forward function should call is not `model`
    (DeepSpeed's engine, Megatron's pipeline), `compute_context` when it computes under autocast
    (torch_train's mixed precision), and `join_model_parallel_rows` when ranks compute on rows
    together (Megatron's tensor/pipeline groups).
    """

    model: nn.Module
    device: torch.device
    data_parallel: DataParallel = DataParallel(0, 1)

    def join_model_parallel_rows(self, batch: Mapping[str, Any]) -> tuple[dict[str, Any], slice]:
        """(the rows this rank computes on, the slice of them it answers for): its own, by default."""
        return dict(batch), slice(None)

    def forward_model(self) -> nn.Module:
        return self.model

    def export_model(self) -> PreTrainedModel:
        """The Hugging Face module whose `save_pretrained` writes the full weights it is handed (Megatron
        keeps a weight-less HF skeleton beside its own model)."""
        return cast("PreTrainedModel", self.model)

    def compute_context(self) -> AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def forward_no_grad(self, fn: ForwardFn[T], batch: Mapping[str, Tensor]) -> T:
        """fn(model, batch) without gradients and in eval mode, every tensor of `batch` on this
        strategy's device. The one place forward passes get their inputs placed."""
        model = self.forward_model()
        with eval_mode(model), torch.no_grad(), self.compute_context():
            return fn(model, to_device(batch, self.device))

    def full_weights(self, *, device: torch.device | str, dtype: torch.dtype,
                     bucket_bytes: int) -> Iterator[dict[str, Tensor]]:
        """The whole model's weights (state-dict names) as `dtype` tensors on `device`, in buckets
        of about `bucket_bytes`, for an engine in this process: a sharded parameter (FSDP2's
        DTensor) is gathered one at a time (a collective: every rank iterates), and a tensor
        already in that dtype on that device is handed over without a copy."""
        state = self.model.state_dict()
        full = ((name, value.full_tensor() if isinstance(value, DTensor) else value) for name, value in state.items())
        return weight_buckets(full, device=torch.device(device), dtype=dtype, bucket_bytes=bucket_bytes)


class TrainStrategyBase(StrategyBase):
    """The training step torch_train and fsdp2_train share: zero_grad → accumulate → (unscale) → clip
    → step. A subclass builds `model`, then calls `init_optimizer`; it may set `scaler` (fp16)."""

    name: str
    optim: OptimConfig
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler | None = None

    def init_optimizer(self, optim: OptimConfig) -> None:
        self.optim = optim
        self.optimizer = build_optimizer(trainable_parameters(self.model), optim)
        self.scheduler = build_scheduler(self.optimizer, optim)

    def train_step(self, micro_batches: list[dict[str, Tensor]], loss_fn: LossFn) -> dict[str, float]:
        """One optimizer step over this rank's micro-batches. Returns the global `grad_norm`, `lr`,
        `update_skipped`, `loss` summed over this rank's micro-batches (summed over ranks it is the
        global objective) and the loss_fn metrics averaged over them. Gradients stay on the
        parameters until the next step."""
        require_same_micro_batch_count(self.name, len(micro_batches))
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum, metrics = accumulate_gradients(self.model, micro_batches, loss_fn, self.device,
                                                 backward=self.backward, compute_context=self.compute_context)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)  # true gradients for the norm, the clip and the step
        grad_norm = clip_grad_norm(list(self.model.parameters()), self.optim.max_grad_norm)
        stepped = optimizer_step(self.optimizer, self.scheduler, grad_norm, self.optim)
        if self.scaler is not None:
            self.scaler.update()  # halves the scale after an inf/NaN gradient, grows it after a run of finite ones
        return {**metrics, **stepped, "loss": loss_sum.item()}

    def backward(self, loss: Tensor, last: bool) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def progress(self) -> dict[str, int | None]:
        steps = [int(state["step"]) for state in self.optimizer.state.values() if state.get("step") is not None]
        return {"optimizer_step": max(steps, default=0), "scheduler_step": int(self.scheduler.last_epoch)}


def require_same_micro_batch_count(name: str, count: int) -> None:
    """Every rank of the process group must bring the same number of micro-batches to a step: checked
    first, since a mismatch would otherwise hang in a collective."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    counts: list[int] = [0] * dist.get_world_size()
    dist.all_gather_object(counts, count)
    if len(set(counts)) != 1:
        raise ValueError(f"{name}: ranks got different numbers of micro-batches {counts}; they must match")


def max_over_ranks(count: int, group: Any = None) -> int:
    """max(count) over the ranks of `group` (the default process group when None), so that micro-batches
    cut by tokens come in the same number on every rank (a collective: every rank calls it); `count`
    itself without a process group of several ranks."""
    if not dist.is_initialized() or dist.get_world_size(group) == 1:
        return count
    value = torch.tensor([count], dtype=torch.long)  # a CPU tensor: gloo (the groups are cpu:gloo,cuda:nccl)
    dist.all_reduce(value, op=dist.ReduceOp.MAX, group=group)
    return int(value.item())


class PlainForward(StrategyBase):
    """`hf_infer` / `torch_train` as a forward-only role: the whole frozen model on this rank's device.
    `autocast_dtype` (torch_train's param_dtype): weights in fp32, forward under autocast in that dtype."""

    def __init__(self, model: nn.Module, *, device: str = "cpu", autocast_dtype: torch.dtype | None = None) -> None:
        self.device = torch.device(device)
        self.autocast_dtype = autocast_dtype
        model = model.to(self.device) if autocast_dtype is None else model.to(self.device, torch.float32)
        self.model = model.eval()
        self.model.requires_grad_(False)

    def compute_context(self) -> AbstractContextManager[Any]:
        if self.autocast_dtype in (None, torch.float32):
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def full_state_dict(self) -> dict[str, Tensor]:
        return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}


def weight_buckets(named: Iterable[tuple[str, Tensor]], *, device: torch.device, dtype: torch.dtype,
                   bucket_bytes: int) -> Iterator[dict[str, Tensor]]:
    """Group (name, tensor) pairs into dicts of at most `bucket_bytes` (a larger tensor goes alone),
    floating tensors cast to `dtype`, all moved to `device`: the peak memory of a weight transfer is
    one bucket, not a second copy of the model."""
    bucket: dict[str, Tensor] = {}
    size = 0
    for name, tensor in named:
        value = tensor.detach().to(device=device, dtype=dtype if tensor.is_floating_point() else tensor.dtype)
        nbytes = value.numel() * value.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = {}, 0
        bucket[name] = value
        size += nbytes
    if bucket:
        yield bucket


def lr_multiplier(step: int, cfg: OptimConfig) -> float:
    """LR factor at optimizer step `step` (0-based), the Hugging Face schedules:

    warmup (s < W):   s / W
    constant:         1
    linear:           m + (1 - m) · max(0, 1 - p)
    cosine:           m + (1 - m) · max(0, ½ (1 + cos(π p)))
    with p = (s - W) / (T - W) and m = min_lr_ratio (0 by default).
    """
    warmup, total = cfg.warmup_steps, cfg.num_training_steps
    if step < warmup:
        return step / max(1, warmup)
    if cfg.lr_scheduler_type == "constant":
        return 1.0
    progress = (step - warmup) / max(1, total - warmup)
    if cfg.lr_scheduler_type == "linear":
        decay = max(0.0, 1.0 - progress)
    else:
        decay = max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * decay


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    """The parameters the optimizer steps: all of them, or a LoRA model's adapters (its frozen base
    weights then hold no optimizer state)."""
    return [p for p in model.parameters() if p.requires_grad]


def build_optimizer(params: Any, cfg: OptimConfig) -> torch.optim.Optimizer:
    """AdamW (decoupled weight decay), Adam (L2 decay added to the gradient) or plain SGD, as the
    Hugging Face `optim` names them. On CUDA the fused kernels (one launch for all parameters);
    elsewhere torch's default implementation, so CPU results stay as they were."""
    params = list(params)
    kernel = {"fused": True} if fused_kernels_apply(params) else {}
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, weight_decay=cfg.weight_decay, **kernel)
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay,
                                **kernel)
    return torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay,
                             **kernel)


def fused_kernels_apply(params: list[Any]) -> bool:
    """Whether every parameter (plain tensors, DTensor shards or param-group dicts) is a floating
    CUDA tensor: torch's fused optimizers need that."""
    tensors = [t for p in params for t in (p["params"] if isinstance(p, dict) else [p])]
    return bool(tensors) and all(t.is_cuda and t.is_floating_point() for t in tensors)


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: OptimConfig) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_multiplier(step, cfg))


def clip_grad_norm(params: list[nn.Parameter], max_norm: float | None) -> Tensor:
    """Total L2 norm of all gradients, clipped to `max_norm` when given.

    With FSDP2 the gradients are DTensor shards: their norm is a partial (per-shard) DTensor, and
    `full_tensor()` all-reduces the squared sums so every rank clips with the same global norm.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    total_norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
    full_tensor = getattr(total_norm, "full_tensor", None)
    if full_tensor is not None:
        total_norm = full_tensor()
    if max_norm is not None:
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total_norm)
    return total_norm


def require_process_group(name: str, rank: int, world_size: int) -> None:
    """Sharded strategies join the default process group the caller set up; its rank and size must match."""
    if not dist.is_initialized():
        raise RuntimeError(
            f"{name} needs torch.distributed initialised by the caller (e.g. WorkerGroup(..., distributed=True)); it is not"
        )
    if (rank, world_size) != (dist.get_rank(), dist.get_world_size()):
        raise ValueError(
            f"{name} got rank={rank}, world_size={world_size} but the process group has "
            f"rank={dist.get_rank()}, world_size={dist.get_world_size()}"
        )


def to_device(batch: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    return {k: v.to(device, non_blocking=True) if isinstance(v, Tensor) else v for k, v in batch.items()}


def check_loss_metrics(metrics: Mapping[str, float]) -> None:
    clash = sorted(set(metrics) & set(RESERVED_METRICS))
    if clash:
        raise ValueError(
            f"loss_fn returned metric(s) {clash} that the strategy itself reports "
            f"({', '.join(RESERVED_METRICS)}); rename them (e.g. 'pg_loss')"
        )


def plain_backward(loss: Tensor, last: bool) -> None:
    loss.backward()


def accumulate_gradients(
    model: nn.Module,
    micro_batches: list[dict[str, Tensor]],
    loss_fn: LossFn,
    device: torch.device,
    backward: Callable[[Tensor, bool], None] = plain_backward,
    compute_context: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
) -> tuple[Tensor, dict[str, float]]:
    """Backward on every micro-batch; returns (Σ losses, metrics averaged over micro-batches).

    The losses are already divided by the global normaliser, so their sum is the step's objective
    and the accumulated gradients are its gradient — no rescaling by the micro-batch count.
    Each micro-batch is moved to `device` here; the loss is computed under `compute_context()`
    (autocast for mixed precision) and `backward(loss, last)` runs outside it (`last`: the final
    micro-batch of the step).
    """
    if not micro_batches:
        raise ValueError("train_step got no micro-batches")
    loss_sum = torch.zeros((), device=device)
    metric_sums: dict[str, float] = {}
    for index, micro_batch in enumerate(micro_batches):
        with compute_context():
            loss, metrics = loss_fn(model, to_device(micro_batch, device))
        check_loss_metrics(metrics)
        backward(loss, index == len(micro_batches) - 1)
        loss_sum += loss.detach().float()
        for key, value in metrics.items():
            metric_sums[key] = metric_sums.get(key, 0.0) + float(value)
    return loss_sum, {k: v / len(micro_batches) for k, v in metric_sums.items()}


def write_lr(optimizer: Any, optim: OptimConfig, step: int) -> float:
    """The LR of optimizer step `step` (0-based; lr × lr_multiplier) written into every parameter group of
    `optimizer`; returns it. Every strategy calls this before its update (torch/fsdp2, deepspeed, megatron):
    the schedule advances on every step, skipped ones included."""
    lr = optim.lr * lr_multiplier(step, optim)
    for group in optimizer.param_groups:
        group["lr"] = lr
    return lr


def step_unless_non_finite(grad_norm: float | Tensor, lr: float, *, apply: Callable[[], Any],
                           discard: Callable[[], Any]) -> dict[str, float]:
    """Apply the update unless the global gradient norm is inf/NaN (then `discard` the gradients and skip
    that update, as verl does). Returns the step's reserved metrics: grad_norm, lr, update_skipped. The
    one skip rule of torch/fsdp2, megatron and deepspeed's stage 0 (ZeRO skips inside its engine)."""
    norm = float(grad_norm)
    finite = math.isfinite(norm)
    (apply if finite else discard)()
    return {"grad_norm": norm, "lr": float(lr), "update_skipped": float(not finite)}


def optimizer_step(optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler,
                   grad_norm: Tensor, optim: OptimConfig) -> dict[str, float]:
    """torch/fsdp2: this step's LR (write_lr at the scheduler's position), the update unless the gradient
    norm is inf/NaN (step_unless_non_finite); the LambdaLR scheduler only counts the steps (its position is
    in the checkpoints)."""
    lr = write_lr(optimizer, optim, int(scheduler.last_epoch))
    stepped = step_unless_non_finite(grad_norm, lr, apply=optimizer.step, discard=lambda: None)
    with warnings.catch_warnings():  # after a skipped update torch warns "scheduler before optimizer"
        warnings.simplefilter("ignore", UserWarning)
        scheduler.step()
    return stepped


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) for a no-grad pass, restoring the previous mode afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)
