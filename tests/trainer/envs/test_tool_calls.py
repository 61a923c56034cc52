"""Tool calls in the Qwen/Hermes format (trainer.envs.tools): parsing, malformed calls, arguments written
as a JSON string with parse_tool_call_parameter_to_dict on and off, the registered tools, and the
tool_use environment's episodes (rewards, tool budget, answer); the flag reaches the environments
through the env manager."""

from __future__ import annotations

import json

import pytest

from trainer.config.schema import CustomEnvConfig, EnvManagerConfig
from trainer.envs.manager import EnvManager
from trainer.envs.registry import env_config_keys, make_env
from trainer.envs.tools import TOOLS, ToolCall, ToolCallError, ToolUse, parse_tool_calls


def call(name: str, arguments: object) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


# -- parsing ------------------------------------------------------------------------------------


def test_valid_calls_in_order_and_text_around_them() -> None:
    reply = ("I need both prices.\n" + call("lookup", {"item": "plum"}) + "\n"
             + call("calculator", {"expression": "3*7"}) + " then I answer")
    for flag in (False, True):
        assert parse_tool_calls(reply, TOOLS, arguments_to_dict=flag) == [
            ToolCall("lookup", {"item": "plum"}), ToolCall("calculator", {"expression": "3*7"})]
    assert parse_tool_calls("<answer>12</answer>", TOOLS, arguments_to_dict=False) == []


@pytest.mark.parametrize(("reply", "why"), [
    ('<tool_call>{"name": "lookup", "arguments": {"item": "fig"}}', "without its </tool_call>"),
    ('<tool_call>{"name": "lookup", "arguments": {"item": "fig"}</tool_call>', "not JSON"),
    ('<tool_call>["lookup", {"item": "fig"}]</tool_call>', "a JSON object, not list"),
    ('<tool_call>{"arguments": {"item": "fig"}}</tool_call>', 'no "name" string'),
    ('<tool_call>{"name": "search", "arguments": {"q": "fig"}}</tool_call>', "no tool 'search'; tools: calculator, lookup"),
    ('<tool_call>{"name": "lookup", "arguments": ["fig"]}</tool_call>', '"arguments" is a JSON object, not list'),
    ('<tool_call>{"name": "lookup", "arguments": {}}</tool_call>', "lookup(item): missing item"),
    ('<tool_call>{"name": "lookup"}</tool_call>', "lookup(item): missing item"),
    ('<tool_call>{"name": "lookup", "arguments": {"item": "fig", "n": 2}}</tool_call>', "unknown n"),
    ('<tool_call>{"name": "lookup", "arguments": {"item": 7}}</tool_call>', "item is a string, not int"),
    (call("lookup", {"item": "fig"}) + call("lookup", {"item": 1}), "item is a string"),  # one bad call: none runs
])
def test_malformed_calls_say_why(reply: str, why: str) -> None:
    for flag in (False, True):
        with pytest.raises(ToolCallError, match=why.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
            parse_tool_calls(reply, TOOLS, arguments_to_dict=flag)


def test_string_arguments_are_decoded_only_with_the_flag() -> None:
    """ROLL's parse_tool_call_parameter_to_dict: json.loads an arguments string into the object. Off,
    the call is malformed (the disconnect check: a flag that changed nothing would fail the first raise)."""
    as_string = call("calculator", json.dumps({"expression": "6*7"}))
    assert '"arguments": "{\\"expression\\": \\"6*7\\"}"' in as_string
    assert parse_tool_calls(as_string, TOOLS, arguments_to_dict=True) == [ToolCall("calculator", {"expression": "6*7"})]
    with pytest.raises(ToolCallError, match='"arguments" is a string; write it as a JSON object'):
        parse_tool_calls(as_string, TOOLS, arguments_to_dict=False)
    # decoded, it must still be an object that fits the tool
    with pytest.raises(ToolCallError, match='"arguments" is a string that is not JSON'):
        parse_tool_calls(call("calculator", "expression=6*7"), TOOLS, arguments_to_dict=True)
    with pytest.raises(ToolCallError, match='"arguments" is a JSON object, not list'):
        parse_tool_calls(call("calculator", "[1, 2]"), TOOLS, arguments_to_dict=True)
    with pytest.raises(ToolCallError, match="calculator\\(expression\\): missing expression"):
        parse_tool_calls(call("calculator", "{}"), TOOLS, arguments_to_dict=True)
    # an object is taken as it is either way
    as_object = call("calculator", {"expression": "6*7"})
    assert parse_tool_calls(as_object, TOOLS, arguments_to_dict=False) == parse_tool_calls(
        as_object, TOOLS, arguments_to_dict=True)


def test_tool_schemas_are_what_chat_templates_take() -> None:
    assert TOOLS["lookup"].schema() == {"type": "function", "function": {
        "name": "lookup", "description": "The unit price of an item in the shop's catalogue.",
        "parameters": {"type": "object", "properties": {"item": {"type": "string", "description": "the item's name"}},
                       "required": ["item"]}}}
    assert [s["function"]["name"] for s in make_env("tool_use").tool_schemas] == ["lookup", "calculator"]


# -- the tool_use environment -------------------------------------------------------------------


def test_episode_lookup_calculate_answer() -> None:
    env = ToolUse(tool_reward=0.05, tool_success_reward=0.25)
    question = env.reset(11)
    order, catalog = env.order, env.catalog
    assert question == f"Question: what do {' and '.join(f'{q} {i}' for i, q in order.items())} cost together?"
    assert len(catalog) == 8 and len(order) == 2 and all(1 <= p <= 20 for p in catalog.values())
    a, b = order
    # two calls in one reply: two results, one tool message each; GEM's rewards per call
    result = env.step(call("lookup", {"item": a}) + call("lookup", {"item": b.upper()}))
    assert result.observation == f"{catalog[a]}\n{catalog[b]}"
    assert result.info == {"format_ok": True, "success": False, "action": "lookup,lookup", "tool_error": False,
                           "tool_results": [str(catalog[a]), str(catalog[b])]}
    assert (result.reward, result.done) == (pytest.approx(2 * 0.30), False)
    # a refused value is the call's result, not a format error (tool_reward only)
    result = env.step(call("calculator", {"expression": "1/0"}))
    assert result.info["tool_results"] == ["error: division by zero"] and result.info["format_ok"]
    assert result.info["tool_error"] and result.reward == pytest.approx(0.05)
    expression = f"{order[a]}*{catalog[a]}+{order[b]}*{catalog[b]}"
    total = order[a] * catalog[a] + order[b] * catalog[b]  # by hand, not through the env
    assert env.step(call("calculator", {"expression": expression})).info["tool_results"] == [str(total)]
    assert env.step(call("lookup", {"item": "durian"})).info["tool_results"] == ["error: no item 'durian' in the catalogue"]
    done = env.step(f"<answer>{total}</answer>")
    assert (done.observation, done.reward, done.done, done.info["success"]) == ("correct", 1.0, True, True)
    assert "answer" in env.render() and f"-> {total}" in env.render()
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("<answer>1</answer>")


def test_wrong_answer_broken_replies_and_the_tool_budget() -> None:
    env = ToolUse(max_tool_uses=2)
    env.reset(5)
    broken = env.step("I think it is 12")
    assert broken.info == {"format_ok": False, "success": False, "action": None}
    assert broken.observation == "no <tool_call> and no <answer>" and not broken.done
    assert env.step("<answer>twelve</answer>").observation == "the answer is not a number"
    assert env.step(call("lookup", {"item": 3})).observation.startswith("malformed tool call: lookup(item): item is")
    assert env.step(call("lookup", {"item": "x"})).info["format_ok"]  # 1 of 2 uses
    over = env.step(call("lookup", {"item": "x"}) + call("lookup", {"item": "y"}))
    assert (over.info["format_ok"], over.observation) == (False, "2 tool call(s), but 1 of 2 remain; give the final answer")
    assert env.step(call("lookup", {"item": "x"})).info["format_ok"]  # the last use
    # a call takes precedence over an answer in the same reply (GEM's wrapper tries the tools first)
    assert not env.step(call("lookup", {"item": "x"}) + "<answer>1</answer>").info["format_ok"]
    wrong = env.step(f"<answer>{env.total + 1}</answer>")
    assert (wrong.reward, wrong.done, wrong.observation) == (0.0, True, f"wrong: the total is {env.total}")


def test_without_lookup_the_question_lists_the_prices() -> None:
    env = ToolUse(tools=["calculator"], num_items=3)
    question = env.reset(2)
    assert question.endswith(" Prices: " + ", ".join(f"{i} {env.catalog[i]}" for i in env.order) + ".")
    assert "lookup" not in env.instruction
    assert env.step(call("lookup", {"item": "x"})).observation == "malformed tool call: no tool 'lookup'; tools: calculator"


@pytest.mark.parametrize(("config", "error"), [
    ({"tools": ["lookup", "search"]}, r"env_config.tools: \['lookup', 'search'\]; valid: a list of distinct names from calculator, lookup"),
    ({"tools": []}, r"env_config.tools: \[\]"),
    ({"tools": ["lookup", "lookup"]}, r"env_config.tools"),
    ({"tools": "lookup"}, r"env_config.tools: 'lookup'"),
    ({"catalog_size": 17}, r"env_config.catalog_size: 17; valid: 1..16"),
    ({"num_items": 9}, r"env_config.num_items: 9; valid: 1..catalog_size \(8\)"),
    ({"max_price": 0}, r"env_config.max_price: 0; valid: 1..1000000"),
    ({"max_tool_uses": 0}, r"env_config.max_tool_uses: 0; valid: >= 1, or unset"),
    ({"parse_tool_call_parameter_to_dict": True},
     r"env_config: unknown key\(s\) \['parse_tool_call_parameter_to_dict'\] for tool_use; valid: tools, .*"
     r"\(parse_tool_call_parameter_to_dict is set at the top level of the config\)"),
])
def test_bad_env_config_names_the_field(config: dict, error: str) -> None:
    with pytest.raises(ValueError, match=r"custom_envs.Shop." + error):
        make_env("tool_use", config, where="custom_envs.Shop.env_type")


def test_the_pipeline_flag_reaches_tool_envs_through_the_env_manager() -> None:
    assert "parse_tool_call_parameter_to_dict" not in env_config_keys("tool_use")
    custom = {"Shop": CustomEnvConfig(env_type="tool_use"), "Lake": CustomEnvConfig(env_type="frozen_lake")}
    config = EnvManagerConfig(env_groups=2, group_size=1, tags=["Shop", "Lake"])
    reply = call("calculator", json.dumps({"expression": "2+2"}))
    for flag, ok in ((True, True), (False, False)):
        manager = EnvManager("train_env_manager", config, custom, batch_size=2, seed=0,
                             parse_tool_call_parameter_to_dict=flag)
        env = manager.make_env("Shop")
        env.reset(1)
        assert env.step(reply).info["format_ok"] is ok
        manager.make_env("Lake")  # environments without tool calls do not take the key
