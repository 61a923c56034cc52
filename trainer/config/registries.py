"""Plain-data registries of names a config may use (torch-free).

Nothing named in a config is ever imported as code: class paths written in ROLL configs are looked
up here and translated into our own names. The engineers building rewards and data add names to
REWARD_TYPES / SYNTHETIC_TASKS; a test keeps these sets equal to the implementations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# Reward functions built into the trainer (trainer.rewards.registry.REWARDS has the same keys).
REWARD_TYPES: tuple[str, ...] = ("math_rule", "synthetic", "format", "reward_model", "code_sandbox", "llm_judge",
                                 "ifeval_rule", "crossthinkqa_rule")

# Hugging Face model_types megatron_train / megatron_infer convert (trainer.models.megatron_convert builds exactly
# these); preflight names any other before a worker starts.
MEGATRON_MODEL_TYPES: tuple[str, ...] = ("qwen2", "qwen3", "qwen3_moe", "llama")

# Judge prompts of the llm_judge reward by name (trainer.rewards.llm_judge.JUDGE_PROMPTS has the same keys):
# ROLL's prompt_maps name for its reference-match prompt, and the 0-10 scoring prompt ROLL uses when
# judge_prompt is unset.
JUDGE_PROMPTS: tuple[str, ...] = ("score-0-10", "Qwen2.5-7B-Instruct-RLVR-prompt")

# Prompt templates (trainer.data.datasets.render_prompt): the tokenizer's own chat template under
# ROLL's names for it, or the raw prompt text. qwen3_coder (ROLL's agentic SWE examples, with Qwen3-Coder or
# Qwen3.5 models): ROLL's env managers render every turn with the tokenizer's own chat template and never look the
# name up, so it names the tokenizer's template here too (Qwen3-Coder's: ChatML turns, no default system prompt
# without tools, no <think> handling, tool calls as <tool_call><function=NAME><parameter=KEY>… XML).
CHAT_TEMPLATES: tuple[str, ...] = ("native", "chatml", "qwen2", "qwen2_5", "qwen3", "qwen3_coder")
RAW_TEMPLATES: tuple[str, ...] = ("none", "raw")

# Code-generated verifiable tasks (trainer.data.synthetic.TASKS has the same keys).
SYNTHETIC_TASKS: tuple[str, ...] = ("reverse", "add", "copy")

# Environments built into the trainer (trainer.envs.registry.ENVS has the same keys); ROLL's
# `custom_envs.<tag>.env_type` names them.
# GEM's (the gem-llm package, trainer.envs.gem) under the names ROLL gives them.
ENV_TYPES: tuple[str, ...] = ("frozen_lake", "sokoban", "calculator", "tool_use", "game:GuessTheNumber-v0",
                              "rg:letter_counting", "roll_math", "roll_qa", "sokoban_native_env")
# Each environment's env_config keys (its constructor's parameters; tests/trainer/envs/test_envs.py keeps them
# equal), so validation names a key an environment would refuse without building one.
ENV_CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "frozen_lake": ("size", "p", "is_slippery", "action_format"),
    "sokoban": ("dim_x", "dim_y", "num_boxes", "search_depth", "action_format", "grid_lookup", "grid_vocab"),
    "sokoban_native_env": ("dim_x", "dim_y", "num_boxes", "search_depth", "action_format", "system_template",
                           "observation_suffix"),
    "calculator": ("num_operands", "max_operand", "operators"),
    "tool_use": ("tools", "catalog_size", "num_items", "max_quantity", "max_price", "max_tool_uses", "tool_reward",
                 "tool_success_reward"),
    "game:GuessTheNumber-v0": ("min_number", "max_number", "max_turns"),
    "rg:letter_counting": ("size", "seed"),
    # ROLL's GEM dataset environments (trainer.envs.gem_data): a local dataset's rows
    "roll_math": ("dataset_name", "split", "question_key", "answer_key", "seed"),
    "roll_qa": ("dataset_name", "split", "question_key", "answer_key", "seed", "extract_boxed"),
}
# ROLL's GEM environments that read a dataset (roll/pipeline/agentic/env/gem/) and are not built: refused by name,
# naming the dataset (roll_math and roll_qa are built: ENV_TYPES, trainer.envs.gem_data).
ROLL_DATASET_ENVS: dict[str, str] = {
    "roll_code": "ROLL's GEM code environment, roll/pipeline/agentic/env/gem/code_env.py",
}
# The action format every environment parses by default and ROLL's default `action_pattern`.
ANSWER_TAG_PATTERN = r"<answer>(.*?)</answer>"
# Environments that take Qwen/Hermes tool calls (trainer.envs.tools): parse_tool_call_parameter_to_dict acts
# on them.
TOOL_CALL_ENV_TYPES: tuple[str, ...] = ("tool_use",)

# The type, default and range of each numeric env_config key (issue 43): validation checks a file's values against
# it (trainer.config.roll_env_config.env_config_range_errors) and each environment reads its defaults and bounds
# from it, so a value out of range is refused before the run starts, with the message the environment would give.
# ROLL's `max_steps` (trainer.config.roll_env_config.ROLL_KEYS) has no default: the environment never takes it.


@dataclass(frozen=True)
class EnvBound:
    """lo <= value <= hi (None: unbounded on that side; lo_open: lo itself excluded). `kind` int takes an int,
    float an int or a float, never a bool; `optional` also takes None. `hi_of` is an upper bound that depends on
    the other keys (the environment's options, defaults filled in), shown as `hi_text`."""

    kind: type
    default: Any = None
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    optional: bool = False
    hi_of: Callable[[Mapping[str, Any]], float] | None = None
    hi_text: str = ""

    def upper(self, options: Mapping[str, Any]) -> float | None:
        return self.hi_of(options) if self.hi_of is not None else self.hi

    def range_text(self, options: Mapping[str, Any]) -> str:
        hi = self.upper(options)
        top = "" if hi is None else f"{self.hi_text} ({_num(hi)})" if self.hi_of is not None else _num(hi)
        if self.lo is None:
            text = f"<= {top}" if hi is not None else f"any {'integer' if self.kind is int else 'number'}"
        elif self.lo_open:
            text = f"({_num(self.lo)}, {top}]" if hi is not None else f"> {_num(self.lo)}"
        else:
            text = f"{_num(self.lo)}..{top}" if hi is not None else f">= {_num(self.lo)}"
        return f"{text}, or unset" if self.optional else text

    def refusal(self, value: Any, options: Mapping[str, Any]) -> str | None:
        """None when `value` is of the right type and in range, else why ("VALUE; valid: RANGE")."""
        if value is None and self.optional:
            return None
        kinds = (int,) if self.kind is int else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            return f"{value!r} is not {'an integer' if self.kind is int else 'a number'}; valid: " \
                   f"{self.range_text(options)}"
        hi = self.upper(options)
        low = self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo)
        if low or (hi is not None and value > hi):
            return f"{value!r}; valid: {self.range_text(options)}"
        return None

    def nearest(self, value: float, options: Mapping[str, Any]) -> Any:
        """The valid value closest to an out-of-range number; None past an open bound or for an empty range."""
        hi = self.upper(options)
        if hi is not None and self.lo is not None and (hi < self.lo or (hi == self.lo and self.lo_open)):
            return None
        if self.lo is not None and not self.lo_open and value < self.lo:
            return self.kind(self.lo)
        return self.kind(hi) if hi is not None and value > hi else None


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _sokoban_boxes(options: Mapping[str, Any]) -> float:
    """Reverse play (envs.grid.sokoban_layout) pulls a box only along three cells in a line, with a free cell
    beside the player: interior cells less two, and none when neither interior side is 3 cells long."""
    rows, cols = options["dim_x"] - 2, options["dim_y"] - 2
    return rows * cols - 2 if max(rows, cols) >= 3 else 0


ROLL_MAX_STEPS = EnvBound(int, lo=1)
ENV_CONFIG_BOUNDS: dict[str, dict[str, EnvBound]] = {
    "frozen_lake": {"size": EnvBound(int, 4, 2, 16), "p": EnvBound(float, 0.8, 0, 1, lo_open=True),
                    "max_steps": ROLL_MAX_STEPS},
    "sokoban": {"dim_x": EnvBound(int, 6, 3, 16), "dim_y": EnvBound(int, 6, 3, 16),
                "num_boxes": EnvBound(int, 1, 1, hi_of=_sokoban_boxes, hi_text="(dim_x - 2) * (dim_y - 2) - 2, 0 with no interior side of 3"),
                "search_depth": EnvBound(int, 30, 1), "max_steps": ROLL_MAX_STEPS},
    "calculator": {"num_operands": EnvBound(int, 3, 2, 8), "max_operand": EnvBound(int, 99, 1, 10**6)},
    "tool_use": {"catalog_size": EnvBound(int, 8, 1, 16),
                 "num_items": EnvBound(int, 2, 1, hi_of=lambda o: o["catalog_size"], hi_text="catalog_size"),
                 "max_quantity": EnvBound(int, 5, 1, 10**6), "max_price": EnvBound(int, 20, 1, 10**6),
                 "max_tool_uses": EnvBound(int, None, 1, optional=True), "tool_reward": EnvBound(float, 0.0),
                 "tool_success_reward": EnvBound(float, 0.0)},
    # GEM's registration defaults (trainer.envs.gem)
    "game:GuessTheNumber-v0": {
        "min_number": EnvBound(int, 1, 1, hi_of=lambda o: o["max_number"] - 1, hi_text="max_number - 1"),
        "max_number": EnvBound(int, 20, 2), "max_turns": EnvBound(int, 10, 1)},
    "rg:letter_counting": {"size": EnvBound(int, 500, 1), "seed": EnvBound(int, 42)},
}

# the agent-native Sokoban plays the built game (trainer.envs.native)
ENV_CONFIG_BOUNDS["sokoban_native_env"] = ENV_CONFIG_BOUNDS["sokoban"]


def env_config_defaults(env_type: str) -> dict[str, Any]:
    """The declared defaults of an environment's bounded keys that it takes (not ROLL's max_steps)."""
    return {key: b.default for key, b in ENV_CONFIG_BOUNDS.get(env_type, {}).items() if b is not ROLL_MAX_STEPS}


def env_config_refusals(env_type: str, options: Mapping[str, Any]) -> dict[str, str]:
    """{key: why} for each bounded key of `options` out of its type or range (relative bounds read the other
    keys, their defaults filled in)."""
    bounds = ENV_CONFIG_BOUNDS.get(env_type, {})
    full = {**env_config_defaults(env_type), **options}

    def refused(relative: bool) -> dict[str, str]:
        whys = {key: bounds[key].refusal(options[key], full) for key in options
                if key in bounds and (bounds[key].hi_of is not None) == relative}
        return {key: why for key, why in whys.items() if why is not None}

    return refused(False) or refused(True)  # a relative bound reads the other keys: only once they are valid


def check_env_config(env_type: str, **options: Any) -> None:
    """ValueError `env_config.KEY: VALUE; valid: RANGE` for the first option out of its declared range (what
    each environment asserts when built)."""
    for key, why in env_config_refusals(env_type, options).items():
        raise ValueError(f"env_config.{key}: {why}")

# ROLL env-manager classes (`*_env_manager.worker_cls`, `custom_envs.<tag>.env_manager_cls`) and what runs them
# here: the agentic loop (trainer.pipeline.agentic) plays trajectory managers one conversation per row, step
# managers one prompt (with a text history) per turn.
ROLL_ENV_MANAGERS: dict[str, str] = {
    "roll.pipeline.agentic.environment_worker.EnvironmentWorker": "trajectory",
    "roll.pipeline.agentic.env_manager.traj_env_manager.TrajEnvManager": "trajectory",
    "roll.pipeline.agentic.env_manager.step_env_manager.StepEnvManager": "step",
    # the step manager whose prompt is the last history_length − 1 observations and the current one, one per line
    "roll.pipeline.agentic.env_manager.step_concat_env_manager.StepConcatEnvManager": "step_concat",
    # one row per reply, each prompt the environment's own message list (trainer.envs.native, decision 0061)
    "roll.pipeline.agentic.env_manager.agent_native_env_manager.AgentNativeStepEnvManager": "native",
    # one conversation per row, its prompts written by the tag's agent runner (trainer.envs.agent_runner)
    "roll.pipeline.agentic.env_manager.proxy_env_manager.ProxyEnvManager": "proxy",
}
PROXY_ENV_MANAGER = "roll.pipeline.agentic.env_manager.proxy_env_manager.ProxyEnvManager"

# ROLL's agent runners (`custom_envs.<tag>.agent_runner_cls`, read by the proxy env manager): built, and not
GEM_RUNNER = "roll.pipeline.agentic.agent_runner.gem_runner.GEMRunner"
ROLL_AGENT_RUNNERS: dict[str, str] = {GEM_RUNNER: "GEMRunner (text environments; agent_system_template, agent_template)"}
ROLL_UNSUPPORTED_AGENT_RUNNERS: dict[str, str] = {
    "roll.pipeline.agentic.agent_runner.gem_runner.ToolCallRunner": "tool-call runner (OpenAI function calling)",
    "roll.pipeline.agentic.agent_runner.rock.push_runner.PushModeRunner": "ROCK sandbox runner (push mode)",
    "roll.pipeline.agentic.agent_runner.rock.pull_runner.PullModeRunner": "ROCK sandbox runner (pull mode)",
    "roll.pipeline.agentic.agent_runner.rock.rock_agent_runner.RockAgentRunner": "ROCK sandbox runner",
}

# ROLL env-manager classes that ROLL documents but we do not implement yet (clear error).
ROLL_UNSUPPORTED_ENV_MANAGERS: dict[str, str] = {
    "roll.pipeline.agentic.env_manager.vl_traj_env_manager.VLTrajEnvManager": "vision-language env manager",
}
NATIVE_ENV_MANAGER = "roll.pipeline.agentic.env_manager.agent_native_env_manager.AgentNativeStepEnvManager"
# The environments that keep their own conversation, which only the agent-native manager plays (trainer.envs.native;
# trainer.envs.registry keeps them equal to the NativeEnv classes).
NATIVE_ENV_TYPES: tuple[str, ...] = ("sokoban_native_env",)


def native_manager_refusal(tag: str, env_type: str, native_manager: bool) -> tuple[str, str] | None:
    """(field, message) when the agent-native manager would play an environment that does not keep its messages,
    or another manager one that does; None when they match (or env_type is not registered: reported as such)."""
    if env_type not in ENV_TYPES or native_manager == (env_type in NATIVE_ENV_TYPES):
        return None
    where = f"custom_envs.{tag}.env_manager_cls"
    if native_manager:
        return (f"custom_envs.{tag}.env_type", f"{env_type!r} does not keep its own conversation, which the "
                f"agent-native step env manager ({NATIVE_ENV_MANAGER}) renders each turn; its environments: "
                f"{', '.join(NATIVE_ENV_TYPES)}; the trajectory manager plays {env_type}: override ~{where}")
    return (where, f"{env_type!r} keeps its own conversation (ROLL's agent-native protocol), which only the "
            f"agent-native step env manager plays: override {where}={NATIVE_ENV_MANAGER}")


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
    "reward_model": INFER_STRATEGIES,
    "rewards": FORWARD_STRATEGIES + INFER_STRATEGIES,
}
