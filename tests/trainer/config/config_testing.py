"""Shared helpers of the config tests: a small valid base config and dotted-path editing."""

from __future__ import annotations

import copy
import functools
from typing import Any

from trainer.config import PipelineConfig, config_json_schema, validate_config

DELETE = object()

# A small valid config: 8 prompts x 4 samples = 32 samples = 4 optimizer steps of 2 x 4 x 1.
BASE: dict[str, Any] = {
    "exp_name": "base",
    "adv_estimator": "grpo",
    "max_steps": 100,
    "save_steps": 10,
    "eval_steps": 10,
    "rollout_batch_size": 8,
    "num_return_sequences_in_group": 4,
    "prompt_length": 64,
    "response_length": 64,
    "num_gpus_per_node": 8,
    "actor_train": {
        "model_args": {"model_name_or_path": "/models/tiny"},
        "training_args": {"learning_rate": 1e-6, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 4},
        "data_args": {"file_name": "examples/data/train.jsonl", "prompt": "prompt"},
        "strategy_args": {"strategy_name": "fsdp2_train"},
        "device_mapping": [0],
    },
    "actor_infer": {
        "generating_args": {"max_new_tokens": 64, "temperature": 1.0},
        "strategy_args": {"strategy_name": "hf_infer"},
        "device_mapping": [0],
    },
    "reference": {"strategy_args": {"strategy_name": "hf_infer"}, "device_mapping": [0]},
    "rewards": {"math": {"reward_type": "math_rule"}},
}


def base() -> dict[str, Any]:
    return copy.deepcopy(BASE)


def set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    if value is DELETE:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = copy.deepcopy(value)  # a shared dict of a test table must not be edited


def changed(changes: dict[str, Any]) -> dict[str, Any]:
    data = base()
    for dotted, value in changes.items():
        set_path(data, dotted, value)
    return data


def get_attr_path(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    return obj


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref:
        return schema["$defs"][ref.rsplit("/", 1)[-1]]
    return node


def _branches(schema: dict[str, Any], node: dict[str, Any]) -> list[dict[str, Any]]:
    node = _resolve(schema, node)
    out = [node]
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in node.get(key, []):
            out.extend(_branches(schema, sub))
    return out


@functools.cache
def _schema() -> dict[str, Any]:
    return config_json_schema()


def schema_property(dotted: str) -> dict[str, Any]:
    """The JSON Schema property at a dotted config path, searching every union branch
    (`rewards.<any>.x` goes through additionalProperties)."""
    schema = _schema()
    nodes: list[dict[str, Any]] = [schema]
    for part in dotted.split("."):
        found = []
        for node in nodes:
            for branch in _branches(schema, node):
                if part in branch.get("properties", {}):
                    found.append(branch["properties"][part])
                extra = branch.get("additionalProperties")
                if isinstance(extra, dict) and extra:
                    found.append(extra)
        if not found:
            raise KeyError(f"{dotted}: no schema property {part!r}")
        nodes = found
    return nodes[0]


def coherent_config(source: Any, overrides: tuple[str, ...] = ()) -> PipelineConfig:
    """The PipelineConfig `source` describes, asserting no rule error (a backend this build lacks is
    allowed: ValidationResult.rule_errors)."""
    result = validate_config(source, list(overrides))
    assert result.config is not None and result.rule_errors == [], [str(i) for i in result.errors]
    return result.config
