"""Tool calls in the Qwen/Hermes format, the tools an environment may offer, and the tool-use
environment (`tool_use`).

Call format: the Hermes function-calling format that Qwen2.5 / Qwen3 chat templates describe in their
system prompt when given `tools`, one block per call, several blocks allowed in one reply:

    <tool_call>
    {"name": "lookup", "arguments": {"item": "plum"}}
    </tool_call>

`parse_tool_calls` reads every <tool_call>...</tool_call> block of a reply, in order. A block is a
malformed call (ToolCallError: the reply breaks the format and no tool runs) when it is not closed,
is not a JSON object, lacks a string "name", names a tool the environment does not offer, or its
"arguments" is not an object that fits the tool's parameters (every parameter present, no other key,
each value of its JSON type). Missing "arguments" means {}.

`parse_tool_call_parameter_to_dict` (ROLL's pipeline flag): "arguments" written as a JSON *string*
that holds the object ("arguments": "{\"item\": \"plum\"}", the OpenAI protocol's encoding) is
decoded with json.loads into the object when it is set (ROLL decodes such strings into dicts before
the chat template renders the call); unset, the string is left as written and the call is malformed,
as ROLL's tool parsers take arguments only as an object. A string that does not decode to an object
is malformed either way.

Tools (TOOLS; a tool refusing a value is not a format error: the call ran, its result is the error):

    calculator(expression)   trainer.envs.calculator.evaluate: numbers, + - * / and parentheses, exact
    lookup(item)             the unit price of an item of the episode's shop catalogue

The tool-use environment (`tool_use`; env_config: tools, catalog_size, num_items, max_quantity,
max_price, max_tool_uses, tool_reward, tool_success_reward) asks what `num_items` items in quantities
1..max_quantity cost together, prices 1..max_price drawn per episode for a catalogue of
`catalog_size` items; with `lookup` offered the prices are known only through it, without it the
question lists them. Each reply, in the order of GEM's ToolEnvWrapper (which ROLL uses):

    tool calls     every call runs, in order; each result is one tool message of the next observation
                   (info["tool_results"]; the pipeline renders them with the chat template's tool role).
                   Reward per call: tool_reward, plus tool_success_reward when the tool did not refuse
                   (GEM's wrapper_args; default 0). Calls beyond max_tool_uses per episode (unset: no
                   limit) break the format and none of the reply's calls runs.
    <answer>N</answer>   without a call: reward 1 and success when N is the total, else 0; the episode ends
    anything else  breaks the format (format_ok False): a note says why, as a user message
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trainer.config.registries import ENV_CONFIG_BOUNDS, check_env_config
from trainer.envs.actions import ANSWER_TAG, tagged
from trainer.envs.base import Env, StepResult
from trainer.envs.calculator import CalculatorError, evaluate, format_number, parse_number

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
JSON_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float)}
ITEMS: tuple[str, ...] = ("apple", "plum", "kiwi", "pear", "fig", "lime", "mango", "peach", "grape", "melon",
                          "lemon", "cherry", "date", "guava", "papaya", "quince")
BOUNDS = ENV_CONFIG_BOUNDS["tool_use"]  # defaults and ranges, declared once


class ToolCallError(ValueError):
    """A malformed tool call; the message says why."""


class ToolError(ValueError):
    """A value a tool refuses; the message is the call's result."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, tuple[str, str]]  # argument -> (JSON type, description); all required
    run: Callable[[dict[str, Any], Mapping[str, int]], str]  # (arguments, the episode's catalogue) -> result

    def schema(self) -> dict[str, Any]:
        """The function schema chat templates render from `tools` (OpenAI's format)."""
        properties = {name: {"type": kind, "description": text} for name, (kind, text) in self.parameters.items()}
        return {"type": "function", "function": {
            "name": self.name, "description": self.description,
            "parameters": {"type": "object", "properties": properties, "required": list(self.parameters)}}}

    def signature(self) -> str:
        return f"{self.name}({', '.join(self.parameters)})"


def _calculator(arguments: dict[str, Any], catalog: Mapping[str, int]) -> str:
    try:
        return format_number(evaluate(arguments["expression"]))
    except CalculatorError as exc:
        raise ToolError(str(exc)) from None


def _lookup(arguments: dict[str, Any], catalog: Mapping[str, int]) -> str:
    item = arguments["item"].strip().lower()
    if item not in catalog:
        raise ToolError(f"no item {arguments['item']!r} in the catalogue")
    return str(catalog[item])


TOOLS: dict[str, Tool] = {
    "calculator": Tool("calculator",
                       "Evaluate an arithmetic expression exactly (numbers, + - * / and parentheses).",
                       {"expression": ("string", "e.g. 3*17+2")}, _calculator),
    "lookup": Tool("lookup", "The unit price of an item in the shop's catalogue.",
                   {"item": ("string", "the item's name")}, _lookup),
}


def parse_tool_calls(reply: str, tools: Mapping[str, Tool], *, arguments_to_dict: bool) -> list[ToolCall]:
    """Every tool call of `reply`, in order ([] without a <tool_call> tag); ToolCallError for a malformed
    one (module docstring). `arguments_to_dict` is parse_tool_call_parameter_to_dict."""
    calls = [_call(block, tools, arguments_to_dict) for block in TOOL_CALL.findall(reply)]
    if reply.count(TOOL_CALL_OPEN) != len(calls):
        raise ToolCallError(f"a {TOOL_CALL_OPEN} without its {TOOL_CALL_CLOSE}")
    return calls


def _call(block: str, tools: Mapping[str, Tool], arguments_to_dict: bool) -> ToolCall:
    try:
        data = json.loads(block)
    except json.JSONDecodeError as exc:
        raise ToolCallError(f"not JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(data, dict):
        raise ToolCallError(f"a tool call is a JSON object, not {type(data).__name__}")
    name = data.get("name")
    if not isinstance(name, str):
        raise ToolCallError('no "name" string')
    if name not in tools:
        raise ToolCallError(f"no tool {name!r}; tools: {', '.join(tools)}")
    arguments = data.get("arguments", {})
    if isinstance(arguments, str):
        if not arguments_to_dict:
            raise ToolCallError('"arguments" is a string; write it as a JSON object')
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ToolCallError(f'"arguments" is a string that is not JSON ({exc.msg})') from None
    if not isinstance(arguments, dict):
        raise ToolCallError(f'"arguments" is a JSON object, not {type(arguments).__name__}')
    tool = tools[name]
    missing = [key for key in tool.parameters if key not in arguments]
    unknown = sorted(set(arguments) - set(tool.parameters))
    if missing or unknown:
        why = [f"{what} {', '.join(keys)}" for what, keys in (("missing", missing), ("unknown", unknown)) if keys]
        raise ToolCallError(f"{tool.signature()}: {'; '.join(why)}")
    for key, (kind, _) in tool.parameters.items():
        value = arguments[key]
        if not isinstance(value, JSON_TYPES[kind]) or isinstance(value, bool):
            raise ToolCallError(f"{tool.signature()}: {key} is a {kind}, not {type(value).__name__}")
    return ToolCall(name, arguments)


def tool_choice(names: Sequence[str], *, where: str = "env_config.tools") -> dict[str, Tool]:
    """The registered tools `names` names, in order; ValueError for an empty list, a duplicate or an
    unknown name."""
    if isinstance(names, str) or not names or len(set(names)) != len(names) or set(names) - set(TOOLS):
        raise ValueError(f"{where}: {list(names) if not isinstance(names, str) else names!r}; valid: a list of "
                         f"distinct names from {', '.join(TOOLS)}")
    return {name: TOOLS[name] for name in names}


class ToolUse(Env):
    """Module docstring."""

    def __init__(self, tools: Sequence[str] = ("lookup", "calculator"),
                 catalog_size: int = BOUNDS["catalog_size"].default, num_items: int = BOUNDS["num_items"].default,
                 max_quantity: int = BOUNDS["max_quantity"].default, max_price: int = BOUNDS["max_price"].default,
                 max_tool_uses: int | None = BOUNDS["max_tool_uses"].default,
                 tool_reward: float = BOUNDS["tool_reward"].default,
                 tool_success_reward: float = BOUNDS["tool_success_reward"].default, *,
                 parse_tool_call_parameter_to_dict: bool = False) -> None:
        self.tools = tool_choice(tools)
        # max_tool_uses unset: no limit
        check_env_config("tool_use", catalog_size=catalog_size, num_items=num_items, max_quantity=max_quantity,
                         max_price=max_price, max_tool_uses=max_tool_uses, tool_reward=tool_reward,
                         tool_success_reward=tool_success_reward)
        self.catalog_size, self.num_items, self.max_quantity, self.max_price = (catalog_size, num_items,
                                                                                max_quantity, max_price)
        self.max_tool_uses, self.tool_reward, self.tool_success_reward = (max_tool_uses, float(tool_reward),
                                                                          float(tool_success_reward))
        self.arguments_to_dict = parse_tool_call_parameter_to_dict
        self.tool_schemas = tuple(tool.schema() for tool in self.tools.values())
        self.instruction = ("Answer the question. Call a tool with <tool_call>{\"name\": NAME, \"arguments\": "
                            "{...}}</tool_call>; its result comes back. Tools: "
                            + "; ".join(tool.signature() for tool in self.tools.values())
                            + ". Finish with <answer>NUMBER</answer>.")
        self.done = True

    def reset(self, seed: int) -> str:
        rng = random.Random(f"tool_use:{seed}")
        self.catalog = {item: rng.randint(1, self.max_price) for item in rng.sample(ITEMS, self.catalog_size)}
        self.order = {item: rng.randint(1, self.max_quantity) for item in rng.sample(list(self.catalog),
                                                                                     self.num_items)}
        self.total = sum(quantity * self.catalog[item] for item, quantity in self.order.items())
        self.uses = 0
        self.transcript: list[str] = []
        self.done = False
        items = " and ".join(f"{quantity} {item}" for item, quantity in self.order.items())
        question = f"Question: what do {items} cost together?"
        if "lookup" not in self.tools:
            question += " Prices: " + ", ".join(f"{item} {self.catalog[item]}" for item in self.order) + "."
        return question

    def step(self, reply: str) -> StepResult:
        if self.done:
            raise RuntimeError("ToolUse.step after the episode ended; call reset(seed) first")
        try:
            calls = parse_tool_calls(reply, self.tools, arguments_to_dict=self.arguments_to_dict)
        except ToolCallError as exc:
            return self._broken(f"malformed tool call: {exc}")
        if calls:
            if self.max_tool_uses is not None and self.uses + len(calls) > self.max_tool_uses:
                return self._broken(f"{len(calls)} tool call(s), but {self.max_tool_uses - self.uses} of "
                                    f"{self.max_tool_uses} remain; give the final answer")
            return self._run(calls)
        answer = tagged(reply, ANSWER_TAG)
        number = parse_number(answer) if answer is not None else None
        if number is None:
            return self._broken("the answer is not a number" if answer is not None
                                else "no <tool_call> and no <answer>")
        success = number == Fraction(self.total)
        self.transcript.append(f"answer {answer} ({'correct' if success else 'wrong'})")
        self.done = True
        observation = "correct" if success else f"wrong: the total is {self.total}"
        return StepResult(observation, 1.0 if success else 0.0, True,
                          {"format_ok": True, "success": success, "action": "answer"})

    def _run(self, calls: list[ToolCall]) -> StepResult:
        results, reward, errors = [], 0.0, 0
        for call in calls:
            try:
                result = self.tools[call.name].run(call.arguments, self.catalog)
                reward += self.tool_reward + self.tool_success_reward
            except ToolError as exc:
                result, errors = f"error: {exc}", errors + 1
                reward += self.tool_reward
            results.append(result)
            self.transcript.append(f"{call.name}({json.dumps(call.arguments)}) -> {result}")
        self.uses += len(calls)
        info = {"format_ok": True, "success": False, "action": ",".join(call.name for call in calls),
                "tool_error": errors > 0, "tool_results": results}
        return StepResult("\n".join(results), reward, False, info)

    def _broken(self, why: str) -> StepResult:
        self.transcript.append(why)
        return StepResult(why, 0.0, False, {"format_ok": False, "success": False, "action": None})

    def render(self) -> str:
        return "\n".join([f"Catalogue: {self.catalog}", f"Order: {self.order} (total {self.total})",
                          *self.transcript])
