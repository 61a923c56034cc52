"""ROLL's `custom_envs.<tag>.tool_wrapper`, read as what runs here (torch-free: validation and the env manager both
read it; the tools themselves are trainer.envs.gem_tools).

ROLL's form (roll/pipeline/agentic/env_manager/traj_env_manager.py wraps the environment with
roll/pipeline/agentic/tools/tool_env_wrapper.py): `{wrapper_args: {tool_reward, tool_success_reward, max_tool_uses},
tool_configs: [{tool_id, tool_args}]}`. split_tool_wrapper checks the wrapper_args against GEM's ToolEnvWrapper and
each tool's tool_args against the built tool's parameters. Built: python_code (run in the bubblewrap sandbox). ROLL's
search and mcp tools call an outside service (a retrieval server over msgpack, an MCP server) and are not built:
refused, naming the override that removes the wrapper.

ROLL's GEM dataset environments (roll_math, roll_qa: trainer.envs.gem_data) take any unknown key into `**_` and ignore
it; of those, ROLL's files set `max_steps` (both) and `load_from_cache_file` (roll_qa: GEM's cache of its prompt
map): dropped here as ROLL drops them (ROLL_IGNORED, applied by drop_ignored).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# the question and answer columns ROLL's GEM dataset environments read unless env_config's question_key / answer_key
# say otherwise (their constructors' defaults, trainer.envs.gem_data; a test keeps them equal)
DATASET_COLUMNS: dict[str, tuple[str, str]] = {
    "roll_math": ("problem", "answer"),
    "roll_qa": ("question", "answer"),
}
ROLL_IGNORED: dict[str, tuple[str, ...]] = {
    "roll_math": ("max_steps",),
    "roll_qa": ("max_steps", "load_from_cache_file"),
}

# tool_wrapper: GEM's ToolEnvWrapper's arguments, and the built tools' (trainer.envs.gem_tools.TOOLS) tool_args
WRAPPER_ARGS: tuple[str, ...] = ("tool_reward", "tool_success_reward", "max_tool_uses")
TOOL_ARGS: dict[str, tuple[str, ...]] = {
    "python_code": ("timeout", "sandbox_type", "keep_error_last_line", "tool_instruction", "patterns"),
}
SANDBOX_TYPES: tuple[str, ...] = (
    "none",
    "bwrap",
)  # GEM's; both run in our sandbox here (gem_tools docstring)
OUTSIDE_TOOLS: dict[str, str] = {
    "search": "ROLL's search tool posts each query to a retrieval server (tool_args.search_url)",
    "mcp": "ROLL's MCP tool calls an MCP server (tool_args.server_url)",
}


def split_tool_wrapper(tool_wrapper: Any, *, tag: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(wrapper_args, [{tool_id, tool_args}]) of ROLL's `custom_envs.<tag>.tool_wrapper`, checked (module docstring);
    ValueError naming the field and the override that removes the wrapper otherwise."""
    where = f"custom_envs.{tag}.tool_wrapper"
    drop = f"without it the environment plays without tools: override ~{where}"
    if not isinstance(tool_wrapper, Mapping) or set(tool_wrapper) - {"wrapper_args", "tool_configs"}:
        raise ValueError(
            f"{where}: {tool_wrapper!r}; ROLL's form is {{wrapper_args: {{...}}, tool_configs: "
            f"[{{tool_id, tool_args}}]}}; {drop}"
        )
    args = dict(tool_wrapper.get("wrapper_args") or {})
    unknown = sorted(set(args) - set(WRAPPER_ARGS))
    if unknown:
        raise ValueError(
            f"{where}.wrapper_args: unknown key(s) {unknown}; valid: {', '.join(WRAPPER_ARGS)}; {drop}"
        )
    for key in ("tool_reward", "tool_success_reward"):
        if key in args and (isinstance(args[key], bool) or not isinstance(args[key], (int, float))):
            raise ValueError(f"{where}.wrapper_args.{key}: {args[key]!r} is not a number; {drop}")
    uses = args.get("max_tool_uses")
    if uses is not None and (isinstance(uses, bool) or not isinstance(uses, int) or uses < 1):
        raise ValueError(
            f"{where}.wrapper_args.max_tool_uses: {uses!r}; valid: an integer >= 1, or unset (GEM's 10); {drop}"
        )
    configs = tool_wrapper.get("tool_configs")
    if not isinstance(configs, list) or not configs:
        raise ValueError(f"{where}.tool_configs: {configs!r}; give a list of {{tool_id, tool_args}}; {drop}")
    tools = []
    for i, config in enumerate(configs):
        at = f"{where}.tool_configs[{i}]"
        tool_id = config.get("tool_id") if isinstance(config, Mapping) else None
        if tool_id in OUTSIDE_TOOLS:
            raise ValueError(
                f"{at}.tool_id: {tool_id!r} is not built in this version of PolicyLab: "
                f"{OUTSIDE_TOOLS[tool_id]}, an outside service; built tools: {', '.join(TOOL_ARGS)}; {drop}"
            )
        if tool_id not in TOOL_ARGS:
            raise ValueError(
                f"{at}.tool_id: {tool_id!r} is not a tool; built: {', '.join(TOOL_ARGS)}; {drop}"
            )
        tool_args = dict(config.get("tool_args") or {})
        unknown = sorted(set(tool_args) - set(TOOL_ARGS[tool_id]))
        if unknown:
            raise ValueError(
                f"{at}.tool_args: unknown key(s) {unknown} for {tool_id}; valid: "
                f"{', '.join(TOOL_ARGS[tool_id])}; {drop}"
            )
        timeout = tool_args.get("timeout", 5)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"{at}.tool_args.timeout: {timeout!r}; valid: seconds > 0; {drop}")
        if tool_args.get("sandbox_type", "none") not in SANDBOX_TYPES:
            raise ValueError(
                f"{at}.tool_args.sandbox_type: {tool_args['sandbox_type']!r}; valid: "
                f"{', '.join(SANDBOX_TYPES)} (both run in the bubblewrap sandbox here); {drop}"
            )
        tools.append({"tool_id": tool_id, "tool_args": tool_args})
    return args, tools


def drop_ignored(env_type: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` without the keys ROLL's environment ignores (ROLL_IGNORED)."""
    return {key: value for key, value in options.items() if key not in ROLL_IGNORED.get(env_type, ())}


def dataset_columns(env_type: str, env_config: Mapping[str, Any]) -> tuple[str, str] | None:
    """(question column, answer column) a dataset environment reads, None for another environment."""
    if env_type not in DATASET_COLUMNS:
        return None
    question, answer = DATASET_COLUMNS[env_type]
    return str(env_config.get("question_key", question)), str(env_config.get("answer_key", answer))
