"""A 2-step CPU smoke of any valid config: its own pipeline, algorithm, roles and engines, shrunk to one machine.

`smoke_overrides(config, model=…, data_file=…)` returns native `key=value` overrides, applied to the config
written out as native YAML (a foreign file is translated first). Each is one general rule, never a per-file fix:

- **model**: every role that loads a model (and `pretrain` / `reward_pretrain`) gets the one tiny model, so the
  actor, the reference and the engine share shapes for weight sync. `smoke_model(config)` names it: the
  built-in `tiny://tiny32` when a role runs vLLM (vLLM's CPU attention needs head_dim ≥ 32), else `tiny://tiny`;
  a caller may pass a folder already built from it, to build it once for many runs.
- **data**: every role's `file_name` / `eval_file_name` reads `data_file`, a file the caller writes in the
  columns the config reads (`smoke_rows` turns question/answer rows into them; a file of several reward domains
  gets every row once per domain, with that domain's routing tag and what its reward reads: DOMAIN_ROWS);
  `dataset_dir` is unset.
- **environment data**: every dataset environment (roll_math, roll_qa) reads `data_file` too
  (`env_config.dataset_name`): `smoke_rows` also puts each row's question and answer in the columns it reads
  (its question_key / answer_key). A tool_wrapper's python_code tool gets a one-line instruction
  (SMOKE_TOOL_INSTRUCTION; ROLL's is ~1000 tokens, which no first prompt of the smoke's length holds). A file that
  plays roll_qa, which wraps every question in GEM's think/answer prompt, gets QA_PROMPT_TOKENS more prompt room
  (`smoke_prompt_tokens`).
- **one device**: every role's `device_mapping` is `[0]` on one node, with every parallel size of its
  strategy at 1 (Megatron's TP/PP/CP/EP, vLLM's TP/PP, FSDP2's shard and Ulysses sizes, DeepSpeed's hpZ); vLLM runs on
  CPU in float32 and eager, with a 64 MiB KV cache, its model length fitting the smoke's lengths and the whole
  batch's prompts in one scheduler step (a vLLM judge's, JUDGE_TOKENS long, past the tiny model's positions). A FlashAttention kernel whose package is not installed runs as `sdpa`
  (the same attention; preflight names the package for a real run).
- **sizes**: 2 prompts per step (for several reward domains the fewest that give every domain one at the file's
  shares: `smoke_prompts`), at most 4 samples per prompt (the file's group size, capped), one optimizer
  step per rollout per epoch, one PPO epoch, prompts of at most 256 tokens (longer ones cut on the left),
  8 response tokens.
- **agentic**: each env manager plays one group per tag of at most 4 environments (the batch is those
  trajectories), and every environment's episode ends after 2 replies of 8 tokens.
- **schedule**: `max_steps=2`, no evaluation, one checkpoint at the end, no tracker, no resume.

The engines are the file's own: a strategy this machine cannot run (Megatron or SGLang without CUDA, a package
not installed) is not swapped for another; preflight then says why the smoke cannot run here (`smoke_refusal`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from trainer.config.confinement import path_fields
from trainer.config.issues import ConfigIssue
from trainer.config.preflight import FLASH_PACKAGES, installed
from trainer.config.registries import ROLL_REWARD_WORKERS
from trainer.config.roll_tools import dataset_columns
from trainer.config.schema import DeepSpeedConfig, Fsdp2Config, MegatronConfig, PipelineConfig, VllmConfig
from trainer.config.topology import (
    TRAINING_ROLES,
    cluster_judges,
    domain_batch_sizes,
    roles,
    strategy_config,
    strategy_name,
)

SMOKE_STEPS = 2
PROMPTS_PER_STEP = 2
MAX_GROUP = 4
PROMPT_TOKENS = 256
QA_PROMPT_TOKENS = 128  # GEM's QaEnv prompt around each question (trainer.envs.gem_data.QA_PROMPT)
RESPONSE_TOKENS = 8
JUDGE_TOKENS = 2048  # a judge's prompt and reply (_judge_overrides)
VLLM_KV_BYTES = 64 * 1024**2
MEGATRON_SIZES = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                  "expert_model_parallel_size")
EPISODE_STEPS = 2  # replies per agentic episode
MAX_DOMAIN_BATCH = 64  # the most prompts a multi-domain step may take to give every domain one
SMOKE_TOOL_INSTRUCTION = "Python code in <code>...</code> runs in a sandbox; print what you need."
TINY = "tiny://tiny?seed=0"
TINY_VLLM = "tiny://tiny32?seed=0"  # vLLM's CPU attention needs head_dim >= 32 (engine_limits.VLLM_CPU_HEAD_SIZES)


def smoke_model(config: PipelineConfig) -> str:
    """The built-in tiny model every role of the smoke loads."""
    uses_vllm = any(strategy_name(role, worker) == "vllm" for role, worker in roles(config).items())
    return TINY_VLLM if uses_vllm else TINY


def domains(config: PipelineConfig) -> dict[str, float]:
    """The training data's reward domains and their shares (`domain_interleave_probs`; empty: one stream)."""
    data_args = config.actor_train.data_args
    return dict((data_args.domain_interleave_probs if data_args else None) or {})


def smoke_prompts(config: PipelineConfig, manager: str = "train_env_manager") -> int:
    """Prompts of one smoke step: PROMPTS_PER_STEP; for a file of several domains the fewest that give every
    domain at least one at the file's shares (ROLL's rounding, topology.domain_batch_sizes), so every domain's
    reward scores; for an agentic file the trajectories of one group of at most MAX_GROUP environments per tag."""
    env_manager = getattr(config, manager)
    if env_manager is not None:
        return len(env_manager.tags) * min(env_manager.group_size, MAX_GROUP)
    probs = domains(config)
    if len(probs) > 1:
        return next((n for n in range(PROMPTS_PER_STEP, MAX_DOMAIN_BATCH + 1)
                     if min(domain_batch_sizes(probs, n).values()) >= 1), MAX_DOMAIN_BATCH)
    return PROMPTS_PER_STEP


def smoke_prompt_tokens(config: PipelineConfig) -> int:
    """The smoke's prompt_length: PROMPT_TOKENS, plus QA_PROMPT_TOKENS when a roll_qa environment is defined."""
    qa = any(env.env_type == "roll_qa" for env in config.custom_envs.values())
    return PROMPT_TOKENS + (QA_PROMPT_TOKENS if qa else 0)


def smoke_overrides(config: PipelineConfig, *, model: str, data_file: str, output_dir: str) -> list[str]:
    """The native overrides that shrink `config` to a 2-step run on this machine (see the module docstring)."""
    group = min(config.num_return_sequences_in_group, MAX_GROUP)
    prompts = smoke_prompts(config)
    samples = prompts * group
    prompt_tokens = smoke_prompt_tokens(config)
    out = [
        f"max_steps={SMOKE_STEPS}", f"save_steps={SMOKE_STEPS}", "eval_steps=0", "val_before_train=false",
        "logging_steps=1", "track_with=none", "resume_from_checkpoint=false", f"output_dir={output_dir}",
        f"logging_dir={output_dir}/logs", "num_nodes=1", "num_gpus_per_node=1",
        f"rollout_batch_size={prompts}", f"val_batch_size={smoke_prompts(config, 'val_env_manager')}",
        f"num_return_sequences_in_group={group}", f"prompt_length={prompt_tokens}",
        f"response_length={RESPONSE_TOKENS}", "ppo_epochs=1", "sequence_length=null",
    ]
    out += _agentic_overrides(config, data_file)
    if config.pretrain is not None:
        out.append(f"pretrain={model}")
    if config.reward_pretrain is not None:
        out.append(f"reward_pretrain={model}")
    judges = judge_roles(config)
    for role, worker in roles(config).items():
        out += _role_overrides(role, worker, model=model, data_file=data_file, samples=samples,
                               prompt_tokens=prompt_tokens)
        if role in judges:
            out += _judge_overrides(role, worker, samples)
    return out + _writes_inside(config, output_dir)


def judge_roles(config: PipelineConfig) -> list[str]:
    """The roles whose engine generates LLM judgments: an inference judge's own section, and the reward_model group
    when a cluster judge asks it."""
    out = ["reward_model"] if config.reward_model is not None and cluster_judges(config) else []
    for name, reward in config.rewards.items():
        if reward_kind(config, name) == "llm_judge" and reward.judge_model_type == "inference":
            out.append(f"rewards.{name}")
    return out


def _judge_overrides(role: str, worker: Any, samples: int) -> list[str]:
    """A judge's prompt holds the question, the response and the reference inside the judge template (~850 tokens
    of the tiny tokenizer): a vLLM judge's model length fits JUDGE_TOKENS, past the tiny model's 512 positions
    (its config's max_position_embeddings raised with it; vLLM refuses a longer length otherwise)."""
    if not isinstance(strategy_config(worker), VllmConfig):
        return []
    prefix = f"{role}.strategy_args.strategy_config"
    return [f"{prefix}.max_model_len={JUDGE_TOKENS}", f"{prefix}.max_num_batched_tokens={max(samples, 8) * JUDGE_TOKENS}",
            f"{role}.model_args.model_config_kwargs.max_position_embeddings={JUDGE_TOKENS}"]


def _agentic_overrides(config: PipelineConfig, data_file: str) -> list[str]:
    """Each env manager plays one group per tag of at most MAX_GROUP environments, as many trajectories as the
    batch needs; every environment's episode ends after EPISODE_STEPS replies of RESPONSE_TOKENS tokens; a dataset
    environment reads its questions from `data_file`."""
    out = []
    for name in ("train_env_manager", "val_env_manager"):
        manager = getattr(config, name)
        if manager is None:
            continue
        tags = len(manager.tags)
        out += [f"{name}.env_groups={tags}", f"{name}.n_groups=[{','.join(['1'] * tags)}]",
                f"{name}.group_size={min(manager.group_size, MAX_GROUP)}", f"{name}.max_traj_per_env=-1",
                f"{name}.num_env_groups=null", f"{name}.num_groups_partition=null"]
    for tag, env in config.custom_envs.items():
        out += [f"custom_envs.{tag}.max_steps={EPISODE_STEPS}", f"custom_envs.{tag}.max_tokens_per_step={RESPONSE_TOKENS}"]
        if env.max_actions_per_traj is not None:
            out.append(f"custom_envs.{tag}.max_actions_per_traj={EPISODE_STEPS}")
        if dataset_columns(env.env_type, env.env_config) is not None:
            out.append(f"custom_envs.{tag}.env_config.dataset_name={data_file}")
        if env.tool_wrapper is not None:
            out.append(f"custom_envs.{tag}.tool_wrapper={json.dumps(short_tool_instructions(env.tool_wrapper))}")
    return out


def short_tool_instructions(tool_wrapper: Mapping[str, Any]) -> dict[str, Any]:
    """`tool_wrapper` with every python_code tool's instruction SMOKE_TOOL_INSTRUCTION (JSON is the override's YAML)."""
    configs = [{**c, "tool_args": {**(c.get("tool_args") or {}), "tool_instruction": SMOKE_TOOL_INSTRUCTION}}
               if isinstance(c, Mapping) and c.get("tool_id") == "python_code" else c
               for c in tool_wrapper.get("tool_configs") or []]
    return {**tool_wrapper, "tool_configs": configs}


def _writes_inside(config: PipelineConfig, output_dir: str) -> list[str]:
    """Every other place the file writes to (checkpoints, traces, caches), moved under `output_dir`: a
    verl file's `trainer.default_local_dir: checkpoints/…` wrote into the directory the smoke ran from."""
    moved = []
    for field, _value, access in path_fields(config):
        if access == "write" and field not in ("output_dir", "logging_dir"):
            moved.append(f"{field}={output_dir}/{field.replace('.', '_')}")
    return moved


def _role_overrides(role: str, worker: Any, *, model: str, data_file: str, samples: int,
                    prompt_tokens: int) -> list[str]:
    out = [f"{role}.device_mapping=[0]", f"{role}.infer_batch_size={samples}", f"{role}.world_size=null"]
    # every model a role loads is the tiny one; a policy role whose file leaves it to `pretrain` gets it too
    if worker.model_args.model_name_or_path is not None or role in ("actor_train", "actor_infer"):
        out.append(f"{role}.model_args.model_name_or_path={model}")
    if worker.data_args is not None:
        out += _data_overrides(role, worker.data_args, data_file)
    if role.split(".")[0] in TRAINING_ROLES:
        out += [f"{role}.training_args.per_device_train_batch_size={samples}",
                f"{role}.training_args.gradient_accumulation_steps=1"]
    if worker.generating_args is not None:
        out += [f"{role}.generating_args.max_new_tokens={RESPONSE_TOKENS}", f"{role}.generating_args.max_length=null"]
    if worker.model_args.attn_implementation in FLASH_PACKAGES and not installed(
            FLASH_PACKAGES[worker.model_args.attn_implementation]):
        out.append(f"{role}.model_args.attn_implementation=sdpa")  # the same attention, without flash_attn / CUDA
    return out + _strategy_overrides(role, strategy_config(worker), samples, prompt_tokens)


def _data_overrides(role: str, data_args: Any, data_file: str) -> list[str]:
    out = [f"{role}.data_args.dataset_dir=null", f"{role}.data_args.truncation_side=left",
           f"{role}.data_args.max_samples=null"]
    if data_args.synthetic is None:
        out.append(f"{role}.data_args.file_name={data_file}")
    if data_args.eval_file_name is not None:
        out.append(f"{role}.data_args.eval_file_name={data_file}")
    return out


def _strategy_overrides(role: str, options: Any, samples: int, prompt_tokens: int) -> list[str]:
    prefix = f"{role}.strategy_args.strategy_config"
    if isinstance(options, VllmConfig):
        # the whole batch's prompts in one scheduler step: vLLM-CPU fails a seeded request whose prefill is
        # chunked ("CPU Generator does not use offset"), as a multi-domain batch of 10 prompts x 4 would be
        return [f"{prefix}.tensor_parallel_size=1", f"{prefix}.pipeline_parallel_size=1",
                f"{prefix}.enforce_eager=true", f"{prefix}.kv_cache_memory_bytes={VLLM_KV_BYTES}",
                f"{prefix}.max_model_len={prompt_tokens + RESPONSE_TOKENS}", f"{prefix}.block_size=null",
                f"{prefix}.max_num_batched_tokens={max(samples, 8) * (prompt_tokens + RESPONSE_TOKENS)}",
                f"{role}.model_args.dtype=fp32"]
    if isinstance(options, Fsdp2Config):
        return [f"{prefix}.fsdp_size=1", f"{prefix}.ulysses_sequence_parallel_size=1"]
    if isinstance(options, MegatronConfig):
        return [f"{prefix}.{size}=1" for size in MEGATRON_SIZES] + [
            f"{prefix}.virtual_pipeline_model_parallel_size=null", f"{prefix}.expert_tensor_parallel_size=null",
            f"{prefix}.sequence_parallel=false"]
    if isinstance(options, DeepSpeedConfig):
        return [f"{prefix}.zero_optimization.zero_hpz_partition_size=null"]
    return []


# What each reward reads besides the prompt (trainer/rewards): the question's prefix, the reference answer the
# reward compares with (None: the math row's own) and the columns it reads from the row.
DOMAIN_ROWS: dict[str, tuple[str, str | None, dict[str, Any]]] = {
    "crossthinkqa_rule": ("Answer with the letter of the right choice, boxed. A) 4 B) 7 C) 9. Which is prime? ",
                          "B", {}),
    "ifeval_rule": ("Answer in lowercase letters only. ", '{"func_name": "validate_lowercase"}', {}),
    "code_sandbox": ("Write a Python function add(a, b) returning a + b in a ```python block. ", "",
                     {"case_type": "assert", "test_cases": '[{"assert_code": "assert add(1, 2) == 3"}]',
                      "test_case_function": ""}),
}


def reward_kind(config: PipelineConfig, name: str) -> str:
    """The built-in reward (trainer.rewards.registry name) the reward section `name` runs."""
    reward = config.rewards[name]
    return reward.reward_type or ROLL_REWARD_WORKERS.get(reward.worker_cls or "", "math_rule")


def smoke_rows(config: PipelineConfig, rows: Iterable[Mapping[str, str]]) -> list[dict[str, Any]]:
    """Question/answer rows laid out in the columns `config`'s training data reads: the prompt as text
    (`data_args.prompt`) or as one user message (`data_args.messages`), the answer under `data_args.response`
    (a dotted name nests, as verl's `reward_model.ground_truth`), the first reward's tag under `data_args.tag`.

    A file of several reward domains (`domain_interleave_probs`, ROLL's multi-domain RLVR) gets every row once per
    domain, in the domain's `domain` column and under the first tag its reward routes (`tag_included`), with what
    that reward reads (DOMAIN_ROWS): an answer letter for CrossThinkQA, an instruction constraint for IFEval, test
    cases for the code sandbox; math and the LLM judge compare with the row's own answer.

    Each dataset environment (roll_math, roll_qa) reads the rows too: the question and the answer also go in its
    question and answer columns (env_config's question_key / answer_key) when the layout has not filled them."""
    data_args = config.actor_train.data_args
    prompt = (data_args.prompt if data_args else None) or "prompt"
    messages = data_args.messages if data_args else None
    answer = (data_args.response if data_args else None) or "answer"
    tag_column = (data_args.tag if data_args else None) or "tag"  # ROLL reads the column `tag` unless told
    first_tag = next((t for reward in config.rewards.values() for t in reward.tag_included), None)
    probs = list(domains(config))
    # (domain, tag, reward) of each stream of rows: one per domain, or the one stream of a single-domain file
    streams: list[tuple[str | None, str | None, str]] = [(probs[0] if probs else None, first_tag, "math_rule")]
    if len(probs) > 1:
        streams = []
        for domain in probs:
            section = config.rewards.get(domain)
            tags = section.tag_included if section is not None else []
            streams.append((domain, tags[0] if tags else domain,
                            reward_kind(config, domain) if section is not None else "math_rule"))
    env_columns = [c for env in config.custom_envs.values() if (c := dataset_columns(env.env_type, env.env_config))]
    out = []
    for stream_domain, stream_tag, kind in streams:
        prefix, reference, columns = DOMAIN_ROWS.get(kind, ("", None, {}))
        for row in rows:
            laid: dict[str, Any] = {}
            question = prefix + row["question"]
            if messages:
                laid[messages] = [{"role": "user", "content": question}]
            else:
                laid[prompt] = question
            _put(laid, answer, row["answer"] if reference is None else reference)
            if tag_column and stream_tag:
                laid[tag_column] = stream_tag
            if stream_domain is not None:  # ROLL's files name their domains; its rows must carry them
                laid["domain"] = stream_domain
            laid.update(columns)
            for question_key, answer_key in env_columns:
                laid.setdefault(question_key, question)
                laid.setdefault(answer_key, row["answer"])
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
