"""ROLL's `tool_wrapper` around an environment (roll/pipeline/agentic/tools/tool_env_wrapper.py over gem-llm 0.0.4's
ToolEnvWrapper), with ROLL's python_code tool run in our bubblewrap sandbox (trainer.rewards.sandbox).

A config gives `custom_envs.<tag>.tool_wrapper: {wrapper_args: {tool_reward, tool_success_reward, max_tool_uses},
tool_configs: [{tool_id, tool_args}]}` (read by trainer.config.roll_env_config.split_tool_wrapper). Built tools:
python_code. search and mcp call an outside service and are refused in validation, naming the override.

ToolWrapper, as GEM's ToolEnvWrapper:

    reset     the environment's observation, a newline, then the tools' instructions (several tools: after
              "Available tools:"); the episode's tool counters restart at 0.
    step      while fewer than max_tool_uses tools ran this episode (unset: 10, GEM's default), each tool in order
              tries the reply, stopping at the first that parsed it and ran without error. When the last one tried
              parsed it: the tool's observation is the next observation, reward = tool_reward (+ tool_success_reward
              when it ran without error), the episode goes on; at the max_tool_uses-th use the observation adds
              "Reached the maximum number of tool use. Please output final answer directly." Otherwise the reply
              goes to the environment.

PythonCodeTool, as ROLL's: the code is the first <code>...</code> or ```python ...``` block (of both patterns, the
one that ends first); none: not parsed. The code runs with `timeout` seconds in the sandbox (GEM's run_python:
run again with GEM's BASE_IMPORTS prepended when the error says a name "is not defined"); an error is a non-zero
exit, a timeout, output past the cap, or no output at all. The observation is "Code execution result: " + stdout
(+ newline + stderr, only its last line with keep_error_last_line), stripped of leading blanks, + newline.

ROLL's `sandbox_type: none` runs model code in a bare subprocess behind a list of forbidden words; here every value
runs in the sandbox, which has no network, no host files and hard limits. Without bubblewrap nothing runs: the
tool is refused when the environment is built (and in validation).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from trainer.envs.base import Env, StepResult

GEM_MAX_TOOL_USES = 10  # gem.tools.tool_env_wrapper.ToolEnvWrapper's default
MAX_USES_NOTE = "\n\nReached the maximum number of tool use. Please output final answer directly."
PYTHON_INSTRUCTION = (
    "Initially, when solving a question, you would need to think step by step, without the ability to use code for "
    "calculation. Now, you have the capability to write code to use the code interpreter for calculation. The code "
    "will be executed by a sandbox, and the result can be returned to enhance your reasoning process. your "
    "calculation while still maintaining the reasoning process.The thinking process can have multiple code snippets. "
    "Each code snippet is wrapped with: <code>...</code>, and should be executable.Details:1. Identify sections where "
    "code execution could speed up the reasoning process or make the calculation more accurate.2. Replace the manual "
    "calculation steps with code snippets and the corresponding interpreter's execution results.3. Keep the logical "
    "flow of the reasoning process intact, including any failed exploration attempts that were part of the initial "
    "process.4. The code snippets should be complete scripts, including necessary imports, and should not contain "
    "markdown symbols like <python>...‹/python>.5. Outputs in the code snippets must explicitly call the print "
    "function.6. Execution results should match the model's output exactly, with no extra or missing tokens."
)  # ROLL's PythonCodeTool.tool_instruction, verbatim
PYTHON_PATTERNS = (r"<code>(.*?)</code>", r"```\n?python(.*?)```")


class Tool(Protocol):
    tool_type: str

    def instruction_string(self) -> str: ...

    def execute_action(self, action: str) -> tuple[bool, bool, str, str]:
        """(parsed, error, observation, parsed_action) (GEM's BaseTool.execute_action)."""


def first_code(action: str, patterns: Sequence[str]) -> tuple[str | None, str, bool]:
    """ROLL's PythonCodeTool._parse_action: (code, the reply up to its end, found) for the first match of each
    pattern, keeping the one that ends first (a later pattern wins a tie)."""
    code, parsed, found, prev_end = None, action, False, len(action)
    for pattern in patterns:
        match = re.search(pattern, action, re.DOTALL)
        if match:
            found = True
            if match.end() <= prev_end:
                code, parsed, prev_end = match.group(1).strip(), action[: match.end()], match.end()
    return code, parsed, found


class PythonCodeTool:
    """ROLL's python_code tool (module docstring), executed by trainer.rewards.sandbox.run_python."""

    tool_type = "python_code"

    def __init__(
        self,
        timeout: float = 5,
        sandbox_type: str = "none",
        keep_error_last_line: bool = False,
        tool_instruction: str | None = None,
        patterns: Sequence[str] | None = None,
    ) -> None:
        from trainer.config.bubblewrap import bubblewrap_problem

        problem = bubblewrap_problem()
        if problem is not None:
            raise ValueError(
                f"the python_code tool runs model code only in the bubblewrap sandbox, and {problem}; "
                "install the Debian package bubblewrap (scripts/setup.sh does)"
            )
        self.timeout, self.sandbox_type, self.keep_error_last_line = (
            float(timeout),
            sandbox_type,
            keep_error_last_line,
        )
        self.instruction = tool_instruction or PYTHON_INSTRUCTION
        self.patterns = tuple(patterns or PYTHON_PATTERNS)

    def instruction_string(self) -> str:
        return self.instruction

    def run(self, code: str) -> tuple[bool, str, str]:
        """(success, stdout, stderr) of `code` in the sandbox, GEM's run_python retry included."""
        from gem.utils.constants import BASE_IMPORTS

        from trainer.rewards.sandbox import SandboxLimits, run_python

        limits = SandboxLimits(timeout_s=self.timeout)
        result = run_python(code, limits=limits)
        if not result.ok and "is not defined" in result.stderr:
            result = run_python(BASE_IMPORTS + "\n" + code, limits=limits)
        if result.timed_out:
            return False, "", f"\nExecution timed out after {self.timeout:g} seconds."
        return result.ok, result.stdout, result.stderr

    def execute_action(self, action: str) -> tuple[bool, bool, str, str]:
        code, parsed_action, found = first_code(action, self.patterns)
        if not found or code is None:
            return False, True, "", parsed_action
        success, stdout, stderr = self.run(code)
        if stderr and self.keep_error_last_line:
            stderr = stderr.split("\n")[-1]
        observation = (f"{stdout}\n{stderr}" if stderr else stdout).lstrip(" \n")
        error = not success or not observation
        return True, error, f"Code execution result: {observation}\n", parsed_action


TOOLS: dict[str, type] = {"python_code": PythonCodeTool}


class ToolWrapper(Env):
    """GEM's ToolEnvWrapper over one of our environments (module docstring)."""

    def __init__(
        self,
        env: Env,
        tools: Sequence[Tool],
        tool_reward: float = 0.0,
        tool_success_reward: float = 0.0,
        max_tool_uses: int | None = GEM_MAX_TOOL_USES,
    ) -> None:
        self.env, self.tools = env, list(tools)
        self.instruction, self.tool_schemas = env.instruction, env.tool_schemas
        self.tool_reward, self.tool_success_reward = float(tool_reward), float(tool_success_reward)
        self.max_tool_uses = float("inf") if max_tool_uses is None else max_tool_uses
        self.uses = self.successes = 0
        self.last = ""

    def reset(self, seed: int) -> str:
        self.uses = self.successes = 0
        text = "\n".join(tool.instruction_string() for tool in self.tools)
        if len(self.tools) > 1:
            text = f"Available tools:\n{text}"
        self.last = f"{self.env.reset(seed)}\n{text}"
        return self.last

    def step(self, reply: str) -> StepResult:
        parsed, error, observation, tool = False, True, "", None
        if self.uses < self.max_tool_uses:
            for tool in self.tools:
                parsed, error, observation, _ = tool.execute_action(reply)
                if parsed and not error:
                    break
        if not parsed or tool is None:
            result = self.env.step(reply)
            self.last = self.env.render()
            return result._replace(info={**result.info, **self.counters()})
        self.uses += 1
        if self.uses == self.max_tool_uses:
            observation += MAX_USES_NOTE
        reward = self.tool_reward
        if not error:
            self.successes += 1
            reward += self.tool_success_reward
        self.last = observation
        return StepResult(
            observation,
            reward,
            False,
            {"format_ok": True, "success": False, "action": f"tool:{tool.tool_type}", **self.counters()},
        )

    def counters(self) -> dict[str, int]:
        return {"tool_use_counter": self.uses, "tool_success_counter": self.successes}

    def render(self) -> str:
        return self.last


def wrap(env: Env, wrapper_args: Mapping[str, Any], tool_configs: Sequence[Mapping[str, Any]]) -> ToolWrapper:
    """ROLL's tool_wrapper(env, wrapper_args, tool_configs), from the checked split (roll_env_config)."""
    tools = [TOOLS[config["tool_id"]](**config.get("tool_args") or {}) for config in tool_configs]
    return ToolWrapper(env, tools, **wrapper_args)
