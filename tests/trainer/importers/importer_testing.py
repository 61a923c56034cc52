"""Minimal valid configs of each foreign framework, the starting point of the per-key tests."""

from __future__ import annotations

import copy
from typing import Any

from trainer.config.importers.common import SGLANG_NAMES

BASES: dict[str, dict[str, Any]] = {
    "verl": {
        "data": {"train_files": "train.parquet", "train_batch_size": 64, "max_prompt_length": 512,
                 "max_response_length": 512},
        "actor_rollout_ref": {
            "model": {"path": "/models/policy"},
            "actor": {"ppo_mini_batch_size": 32, "ppo_micro_batch_size_per_gpu": 2},
            "rollout": {"n": 4, "tensor_model_parallel_size": 1},
        },
        "algorithm": {"adv_estimator": "grpo"},
        "trainer": {"nnodes": 1, "n_gpus_per_node": 4, "total_training_steps": 10},
    },
    "skyrl": {
        "data": {"train_data": ["train.parquet"]},
        "trainer": {
            "placement": {"colocate_all": True, "policy_num_nodes": 1, "policy_num_gpus_per_node": 4},
            "policy": {"model": {"path": "/models/policy"}},
            "train_batch_size": 64, "policy_mini_batch_size": 32, "micro_train_batch_size_per_gpu": 2,
        },
        "generator": {"num_inference_engines": 4, "inference_engine_tensor_parallel_size": 1,
                      "n_samples_per_prompt": 4},
    },
    "rlinf": {
        "cluster": {"num_nodes": 1, "component_placement": {"actor,rollout": "0-3"}},
        "runner": {"seq_length": 2048, "max_steps": 10},
        "algorithm": {"group_size": 4, "n_minibatches": 2, "training_batch_size_per_gpu": 1},
        "data": {"max_prompt_length": 512, "rollout_batch_size": 16, "train_data_paths": ["train.jsonl"]},
        "actor": {"training_backend": "megatron", "model": {"tensor_model_parallel_size": 1}},
        "rollout": {"model_dir": "/models/policy", "rollout_backend": "sglang"},
    },
}

# Engine settings under their SGLang names, as common.settle_strategies renames them (enforce_eager apart).
SGLANG_RENAMES = {**SGLANG_NAMES, "enforce_eager": "disable_cuda_graph"}


def base(fmt: str) -> dict[str, Any]:
    return copy.deepcopy(BASES[fmt])


def with_key(fmt: str, path: str, value: Any) -> dict[str, Any]:
    return set_key(base(fmt), path, value)


def set_key(raw: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """`raw` with the dotted `path` set to a copy of `value` (sections created as needed)."""
    node = raw
    *parents, last = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = copy.deepcopy(value)
    return raw
