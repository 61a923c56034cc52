"""Plain-data registries of names a config may use (torch-free).

Nothing named in a config is ever imported as code: class paths written in ROLL configs are looked
up here and translated into our own names. The engineers building rewards and data add names to
REWARD_TYPES / SYNTHETIC_TASKS; a test keeps these sets equal to the implementations.
"""

from __future__ import annotations

# Reward functions built into the trainer (trainer.rewards.registry.REWARDS has the same keys).
REWARD_TYPES: tuple[str, ...] = ("math_rule", "synthetic", "format", "reward_model", "code_sandbox", "llm_judge",
                                 "ifeval_rule", "crossthinkqa_rule")

# Judge prompts of the llm_judge reward by name (trainer.rewards.llm_judge.JUDGE_PROMPTS has the same keys):
# ROLL's prompt_maps name for its reference-match prompt, and the 0-10 scoring prompt ROLL uses when
# judge_prompt is unset.
JUDGE_PROMPTS: tuple[str, ...] = ("score-0-10", "Qwen2.5-7B-Instruct-RLVR-prompt")

# Prompt templates (trainer.data.datasets.render_prompt): the tokenizer's own chat template under
# ROLL's names for it, or the raw prompt text.
CHAT_TEMPLATES: tuple[str, ...] = ("native", "chatml", "qwen2", "qwen2_5", "qwen3")
RAW_TEMPLATES: tuple[str, ...] = ("none", "raw")

# Code-generated verifiable tasks (trainer.data.synthetic.TASKS has the same keys).
SYNTHETIC_TASKS: tuple[str, ...] = ("reverse", "add", "copy")

# Environments built into the trainer (trainer.envs.registry.ENVS has the same keys); ROLL's
# `custom_envs.<tag>.env_type` names them.
# GEM's (the gem-llm package, trainer.envs.gem) under the names ROLL gives them.
ENV_TYPES: tuple[str, ...] = ("frozen_lake", "sokoban", "calculator", "tool_use", "game:GuessTheNumber-v0",
                              "rg:letter_counting")
# Each environment's env_config keys (its constructor's parameters; tests/trainer/envs/test_envs.py keeps them
# equal), so validation names a key an environment would refuse without building one.
ENV_CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "frozen_lake": ("size", "p", "is_slippery", "action_format"),
    "sokoban": ("dim_x", "dim_y", "num_boxes", "search_depth", "action_format", "grid_lookup", "grid_vocab"),
    "calculator": ("num_operands", "max_operand", "operators"),
    "tool_use": ("tools", "catalog_size", "num_items", "max_quantity", "max_price", "max_tool_uses", "tool_reward",
                 "tool_success_reward"),
    "game:GuessTheNumber-v0": ("min_number", "max_number", "max_turns"),
    "rg:letter_counting": ("size", "seed"),
}
# ROLL's GEM environments that read a dataset (roll/pipeline/agentic/env/gem/): refused by name, naming the dataset.
ROLL_DATASET_ENVS: dict[str, str] = {
    "roll_math": "ROLL's GEM math environment, roll/pipeline/agentic/env/gem/math_env.py",
    "roll_qa": "ROLL's GEM question-answering environment, roll/pipeline/agentic/env/gem/qa_env.py",
    "roll_code": "ROLL's GEM code environment, roll/pipeline/agentic/env/gem/code_env.py",
}
# The action format every environment parses by default and ROLL's default `action_pattern`.
ANSWER_TAG_PATTERN = r"<answer>(.*?)</answer>"
# Environments that take Qwen/Hermes tool calls (trainer.envs.tools): parse_tool_call_parameter_to_dict acts
# on them.
TOOL_CALL_ENV_TYPES: tuple[str, ...] = ("tool_use",)

# ROLL env-manager classes (`*_env_manager.worker_cls`, `custom_envs.<tag>.env_manager_cls`) and what runs them
# here: the agentic loop (trainer.pipeline.agentic) plays trajectory managers one conversation per row, step
# managers one prompt (with a text history) per turn.
ROLL_ENV_MANAGERS: dict[str, str] = {
    "roll.pipeline.agentic.environment_worker.EnvironmentWorker": "trajectory",
    "roll.pipeline.agentic.env_manager.traj_env_manager.TrajEnvManager": "trajectory",
    "roll.pipeline.agentic.env_manager.step_env_manager.StepEnvManager": "step",
    # the step manager whose prompt is the last history_length − 1 observations and the current one, one per line
    "roll.pipeline.agentic.env_manager.step_concat_env_manager.StepConcatEnvManager": "step_concat",
}

# ROLL env-manager classes that ROLL documents but we do not implement yet (clear error).
ROLL_UNSUPPORTED_ENV_MANAGERS: dict[str, str] = {
    "roll.pipeline.agentic.env_manager.vl_traj_env_manager.VLTrajEnvManager": "vision-language env manager",
    "roll.pipeline.agentic.env_manager.agent_native_env_manager.AgentNativeStepEnvManager": (
        "agent-native step env manager"
    ),
    "roll.pipeline.agentic.env_manager.proxy_env_manager.ProxyEnvManager": "proxy env manager (agent runners)",
}

# ROLL reward worker classes we accept, mapped to our reward_type.
ROLL_REWARD_WORKERS: dict[str, str] = {
    "roll.pipeline.rlvr.rewards.math_rule_reward_worker.MathRuleRewardWorker": "math_rule",
    "roll.pipeline.rlvr.rewards.code_sandbox_reward_worker.CodeSandboxRewardWorker": "code_sandbox",
    "roll.pipeline.rlvr.rewards.llm_judge_reward_worker.LLMJudgeRewardWorker": "llm_judge",
    "roll.pipeline.rlvr.rewards.ifeval_rule_reward_worker.GeneralRuleRewardWorker": "ifeval_rule",
    "roll.pipeline.rlvr.rewards.crossthinkqa_rule_reward_worker.CrossThinkQARuleRewardWorker": "crossthinkqa_rule",
}

# ROLL reward worker classes that ROLL documents but we do not implement yet (clear error).
ROLL_UNSUPPORTED_REWARD_WORKERS: dict[str, str] = {
    "roll.pipeline.rlvr.rewards.general_val_rule_reward_worker.GeneralValRuleRewardWorker": (
        "general rule reward"
    ),
    "roll.pipeline.rlvr.rewards.detection_reward_worker.DetectionRewardWorker": (
        "vision-language detection reward (ROLL's VLM RLVR pipeline)"
    ),
    "roll.pipeline.rlvr.rewards.video_r1_reward_worker.VideoR1RewardWorker": (
        "video reward (ROLL's VLM RLVR pipeline)"
    ),
}

# Strategy names by kind (the contract's list plus the single-process torch_train); the full list is
# the keys of trainer.config.schema.STRATEGY_CONFIG_MODELS.
TRAIN_STRATEGIES: tuple[str, ...] = ("megatron_train", "deepspeed_train", "fsdp2_train", "torch_train")
INFER_STRATEGIES: tuple[str, ...] = ("vllm", "sglang", "hf_infer")
FORWARD_STRATEGIES: tuple[str, ...] = (
    "megatron_infer",
    "deepspeed_infer",
    "fsdp2_infer",
    "hf_infer",
    "torch_train",
)

# Strategies this build runs; validation refuses the others by name, listing what each role may
# use instead. A backend joins here when its code lands (a test keeps trainer.train / trainer.rollout
# in step with this set).
BUILT_STRATEGIES: frozenset[str] = frozenset(
    {"torch_train", "fsdp2_train", "hf_infer", "vllm", "deepspeed_train", "deepspeed_infer", "fsdp2_infer",
     "megatron_train", "megatron_infer"}  # megatron: CUDA only (preflight's GPU_ONLY_STRATEGIES)
)

# Which strategy names each role may use.
ROLE_STRATEGIES: dict[str, tuple[str, ...]] = {
    "actor_train": TRAIN_STRATEGIES,
    "critic": TRAIN_STRATEGIES,
    "actor_infer": INFER_STRATEGIES,
    "reference": FORWARD_STRATEGIES,
    "validation": INFER_STRATEGIES,
    "rewards": FORWARD_STRATEGIES + INFER_STRATEGIES,
}
