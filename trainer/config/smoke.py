"""A 2-step CPU smoke of any valid config: its own pipeline, algorithm, roles and engines, shrunk to one machine.

`smoke_overrides(config, model=…, data_file=…)` returns native `key=value` overrides, applied to the config
written out as native YAML (a foreign file is translated first). Each is one general rule, never a per-file fix:

- **model**: every role that loads a model (and `pretrain` / `reward_pretrain`) gets the one tiny model, so the
  actor, the reference and the engine share shapes for weight sync. `smoke_model(config)` names it: the
  built-in `tiny://tiny32` when a role runs vLLM (vLLM's CPU attention needs head_dim ≥ 32), else `tiny://tiny`;
  a caller may pass a folder already built from it, to build it once for many runs.
- **data**: every role's `file_name` / `eval_file_name` reads `data_file`, a file the caller writes in the
  columns the config reads (`smoke_rows` turns question/answer rows into them); `dataset_dir` is unset.
- **one device**: every role's `device_mapping` is `[0]` on one node, with every parallel size of its
  strategy at 1 (Megatron's TP/PP/CP/EP, vLLM's TP/PP, FSDP2's shard and Ulysses sizes, DeepSpeed's hpZ); vLLM runs on
  CPU in float32 and eager, with a 64 MiB KV cache and its model length fitting the smoke's lengths.
- **sizes**: 2 prompts per step, at most 4 samples per prompt (the file's group size, capped), one optimizer
  step per rollout per epoch, one PPO epoch, prompts of at most 256 tokens (longer ones cut on the left),
  8 response tokens.
- **schedule**: `max_steps=2`, no evaluation, one checkpoint at the end, no tracker, no resume.

The engines are the file's own: a strategy this machine cannot run (Megatron or SGLang without CUDA, a package
not installed) is not swapped for another; preflight then says why the smoke cannot run here (`smoke_refusal`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from trainer.config.confinement import path_fields
from trainer.config.issues import ConfigIssue
from trainer.config.schema import DeepSpeedConfig, Fsdp2Config, MegatronConfig, PipelineConfig, VllmConfig
from trainer.config.topology import roles, strategy_config, strategy_name

SMOKE_STEPS = 2
PROMPTS_PER_STEP = 2
MAX_GROUP = 4
PROMPT_TOKENS = 256
RESPONSE_TOKENS = 8
VLLM_KV_BYTES = 64 * 1024**2
MEGATRON_SIZES = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                  "expert_model_parallel_size")
TINY = "tiny://tiny?seed=0"
TINY_VLLM = "tiny://tiny32?seed=0"  # vLLM's CPU attention needs head_dim >= 32 (engine_limits.VLLM_CPU_HEAD_SIZES)


def smoke_model(config: PipelineConfig) -> str:
    """The built-in tiny model every role of the smoke loads."""
    uses_vllm = any(strategy_name(role, worker) == "vllm" for role, worker in roles(config).items())
    return TINY_VLLM if uses_vllm else TINY


def smoke_overrides(config: PipelineConfig, *, model: str, data_file: str, output_dir: str) -> list[str]:
    """The native overrides that shrink `config` to a 2-step run on this machine (see the module docstring)."""
    group = min(config.num_return_sequences_in_group, MAX_GROUP)
    samples = PROMPTS_PER_STEP * group
    out = [
        f"max_steps={SMOKE_STEPS}", f"save_steps={SMOKE_STEPS}", "eval_steps=0", "val_before_train=false",
        "logging_steps=1", "track_with=none", "resume_from_checkpoint=false", f"output_dir={output_dir}",
        f"logging_dir={output_dir}/logs", "num_nodes=1", "num_gpus_per_node=1",
        f"rollout_batch_size={PROMPTS_PER_STEP}", f"val_batch_size={PROMPTS_PER_STEP}",
        f"num_return_sequences_in_group={group}", f"prompt_length={PROMPT_TOKENS}",
        f"response_length={RESPONSE_TOKENS}", "ppo_epochs=1", "sequence_length=null",
    ]
    if config.pretrain is not None:
        out.append(f"pretrain={model}")
    if config.reward_pretrain is not None:
        out.append(f"reward_pretrain={model}")
    for role, worker in roles(config).items():
        out += _role_overrides(role, worker, model=model, data_file=data_file, samples=samples)
    return out + _writes_inside(config, output_dir)


def _writes_inside(config: PipelineConfig, output_dir: str) -> list[str]:
    """Every other place the file writes to (checkpoints, traces, caches), moved under `output_dir`: a
    verl file's `trainer.default_local_dir: checkpoints/…` wrote into the directory the smoke ran from."""
    moved = []
    for field, _value, access in path_fields(config):
        if access == "write" and field not in ("output_dir", "logging_dir"):
            moved.append(f"{field}={output_dir}/{field.replace('.', '_')}")
    return moved


def _role_overrides(role: str, worker: Any, *, model: str, data_file: str, samples: int) -> list[str]:
    out = [f"{role}.device_mapping=[0]", f"{role}.infer_batch_size={samples}", f"{role}.world_size=null"]
    # every model a role loads is the tiny one; a policy role whose file leaves it to `pretrain` gets it too
    if worker.model_args.model_name_or_path is not None or role in ("actor_train", "actor_infer"):
        out.append(f"{role}.model_args.model_name_or_path={model}")
    if worker.data_args is not None:
        out += _data_overrides(role, worker.data_args, data_file)
    if role.split(".")[0] in ("actor_train", "critic"):
        out += [f"{role}.training_args.per_device_train_batch_size={samples}",
                f"{role}.training_args.gradient_accumulation_steps=1"]
    if worker.generating_args is not None:
        out += [f"{role}.generating_args.max_new_tokens={RESPONSE_TOKENS}", f"{role}.generating_args.max_length=null"]
    return out + _strategy_overrides(role, strategy_config(worker))


def _data_overrides(role: str, data_args: Any, data_file: str) -> list[str]:
    out = [f"{role}.data_args.dataset_dir=null", f"{role}.data_args.truncation_side=left",
           f"{role}.data_args.max_samples=null"]
    if data_args.synthetic is None:
        out.append(f"{role}.data_args.file_name={data_file}")
    if data_args.eval_file_name is not None:
        out.append(f"{role}.data_args.eval_file_name={data_file}")
    return out


def _strategy_overrides(role: str, options: Any) -> list[str]:
    prefix = f"{role}.strategy_args.strategy_config"
    if isinstance(options, VllmConfig):
        return [f"{prefix}.tensor_parallel_size=1", f"{prefix}.pipeline_parallel_size=1",
                f"{prefix}.enforce_eager=true", f"{prefix}.kv_cache_memory_bytes={VLLM_KV_BYTES}",
                f"{prefix}.max_model_len={PROMPT_TOKENS + RESPONSE_TOKENS}", f"{prefix}.block_size=null",
                f"{prefix}.max_num_batched_tokens=null", f"{role}.model_args.dtype=fp32"]
    if isinstance(options, Fsdp2Config):
        return [f"{prefix}.fsdp_size=1", f"{prefix}.ulysses_sequence_parallel_size=1"]
    if isinstance(options, MegatronConfig):
        return [f"{prefix}.{size}=1" for size in MEGATRON_SIZES] + [
            f"{prefix}.virtual_pipeline_model_parallel_size=null", f"{prefix}.expert_tensor_parallel_size=null",
            f"{prefix}.sequence_parallel=false"]
    if isinstance(options, DeepSpeedConfig):
        return [f"{prefix}.zero_optimization.zero_hpz_partition_size=null"]
    return []


def smoke_rows(config: PipelineConfig, rows: Iterable[Mapping[str, str]]) -> list[dict[str, Any]]:
    """Question/answer rows laid out in the columns `config`'s training data reads: the prompt as text
    (`data_args.prompt`) or as one user message (`data_args.messages`), the answer under `data_args.response`
    (a dotted name nests, as verl's `reward_model.ground_truth`), the first reward's tag under `data_args.tag`."""
    data_args = config.actor_train.data_args
    prompt = (data_args.prompt if data_args else None) or "prompt"
    messages = data_args.messages if data_args else None
    answer = (data_args.response if data_args else None) or "answer"
    tag_column = (data_args.tag if data_args else None) or "tag"  # ROLL reads the column `tag` unless told
    tag = next((t for reward in config.rewards.values() for t in reward.tag_included), None)
    domains = list((data_args.domain_interleave_probs if data_args else None) or {})
    out = []
    for row in rows:
        laid: dict[str, Any] = {}
        if messages:
            laid[messages] = [{"role": "user", "content": row["question"]}]
        else:
            laid[prompt] = row["question"]
        _put(laid, answer, row["answer"])
        if tag_column and tag:
            laid[tag_column] = tag
        if len(domains) == 1:  # ROLL's one-domain files name their domain; its rows must carry it
            laid["domain"] = domains[0]
        out.append(laid)
    return out


def _put(row: dict[str, Any], dotted: str, value: str) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        row = row.setdefault(key, {})
    row[leaf] = value


def smoke_refusal(findings: list[ConfigIssue]) -> str:
    """Why the smoke cannot run here, in one line: preflight's findings (a strategy without CUDA, a package)."""
    return "; ".join(str(issue) for issue in findings)
