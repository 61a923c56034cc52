"""Tool-call trajectories with a scripted engine (no model): tool results reach the model as the chat
template's tool messages (its tool role; a user message of <tool_response> blocks when it has none), the
first prompt carries the tool schemas, and the tokens are exactly the template's rendering of the whole
conversation, rendered here independently of the loop (token in, token out)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trainer.config.schema import CustomEnvConfig, EnvManagerConfig
from trainer.envs.manager import EnvManager
from trainer.models.tiny import build_tokenizer
from trainer.pipeline.trajectory import PlaySetup, ToolFormat, Trajectory, chat_format, play
from trainer.rollout.base import Generation, SamplingParams

# Qwen2.5's layout of tools, in our words: the tools' JSON in a system turn, each tool result in
# <tool_response> tags, consecutive tool messages inside one user turn.
QWEN_LIKE = (
    "{% if tools %}{{ '<|im_start|>system\\n<tools>' }}{% for tool in tools %}{{ '\\n' + (tool | tojson) }}"
    "{% endfor %}{{ '\\n</tools><|im_end|>\\n' }}{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{ '<|im_start|>user' }}{% endif %}"
    "{{ '\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>' }}"
    "{% if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{ '<|im_end|>\\n' }}{% endif %}"
    "{% else %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_PLAIN = "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
REFUSES_TOOLS = (  # user and assistant only (like templates that raise on any other role)
    "{% for message in messages %}{% if message['role'] not in ['user', 'assistant'] %}"
    "{{ raise_exception('roles: user, assistant') }}{% endif %}" + _PLAIN + "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
DROPS_TOOLS = (
    "{% for message in messages %}{% if message['role'] in ['user', 'assistant'] %}" + _PLAIN + "{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
NUMBERS_TOOLS = (  # renders the k-th message's index: consecutive tool messages cannot be appended alike
    "{% for message in messages %}{% if message['role'] == 'tool' %}"
    "{{ '<|im_start|>tool ' + loop.index|string + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% else %}" + _PLAIN + "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def tokenizer(template: str | None = None) -> Any:
    tok = build_tokenizer()
    if template is not None:
        tok.chat_template = template
    return tok


def call(name: str, arguments: dict[str, str]) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


class ScriptedEngine:
    """Call k answers with script[k] (text, ends with EOS?); log-prob -0.5 on every sampled token."""

    def __init__(self, tok: Any, script: list[tuple[str, bool]]) -> None:
        self.tok, self.script, self.prompts = tok, script, []

    def __call__(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        text, eos = self.script[len(self.prompts)]
        self.prompts.append(prompts[0])
        ids = self.tok.encode(text, add_special_tokens=False) + ([self.tok.eos_token_id] if eos else [])
        assert len(ids) <= params.max_new_tokens
        return [Generation(0, 0, ids, [-0.5] * len(ids), "eos" if eos else "length")]


def shop(max_steps: int = 6) -> EnvManager:
    env = CustomEnvConfig(env_type="tool_use", max_steps=max_steps, max_tokens_per_step=200, env_instruction="Shop.")
    config = EnvManagerConfig(env_groups=1, group_size=1, tags=["Shop"])
    return EnvManager("train_env_manager", config, {"Shop": env}, batch_size=1, seed=0)


def play_script(tok: Any, script: list[tuple[str, bool]], envs: EnvManager | None = None) -> tuple[Trajectory, ScriptedEngine]:
    envs = envs or shop()
    engine = ScriptedEngine(tok, script)
    setup = PlaySetup(engine, tok, chat_format(tok), prompt_length=1024, response_length=2048)
    (t,) = play(setup, envs, envs.episodes(1), SamplingParams(max_new_tokens=200), lambda turn, budget: turn)
    return t, engine


def episode_script(envs: EnvManager) -> tuple[list[tuple[str, bool]], int]:
    """Two lookups in one reply, a calculator call, the answer; and the total (worked out here)."""
    env = envs.make_env("Shop")
    env.reset(envs.episodes(1)[0].seed)
    (a, qa), (b, qb) = env.order.items()
    total = qa * env.catalog[a] + qb * env.catalog[b]
    script = [
        ("Prices first. " + call("lookup", {"item": a}) + "\n" + call("lookup", {"item": b}), True),
        (call("calculator", {"expression": f"{qa}*{env.catalog[a]}+{qb}*{env.catalog[b]}"}), False),  # cut: no EOS
        (f"<answer>{total}</answer>", True),
    ]
    return script, total


def rendered_conversation(tok: Any, t: Trajectory, tools: list[dict[str, Any]]) -> str:
    """The trajectory's turns as chat messages, through the template (the last observation is not in the row)."""
    messages = [{"role": "user", "content": t.turns[0]["text"]}]
    for reply, observation in zip(t.turns[1::2], t.turns[2::2], strict=True):
        messages.append({"role": "assistant", "content": reply["text"]})
        if observation["tokens"]:
            if observation["role"] == "tool":
                messages += [{"role": "tool", "content": r} for r in observation["text"].split("\n")]
            else:
                messages.append({"role": "user", "content": observation["text"]})
    return tok.apply_chat_template(messages, tools=tools or None, tokenize=False)


@pytest.mark.parametrize("template", ["tiny", "qwen_like", "refuses_tools", "drops_tools"])
def test_tool_results_are_the_templates_tool_messages_token_for_token(template: str) -> None:
    tok = tokenizer({"tiny": None, "qwen_like": QWEN_LIKE, "refuses_tools": REFUSES_TOOLS,
                     "drops_tools": DROPS_TOOLS}[template])
    envs = shop()
    script, total = episode_script(envs)
    t, engine = play_script(tok, script, envs)
    assert (t.done_reason, t.success, t.replies, t.score) == ("success", True, 3, 1.0)
    has_tool_role = template in ("tiny", "qwen_like")
    roles = [turn["role"] for turn in t.turns]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant", "user"] if has_tool_role \
        else ["user", "assistant"] * 3 + ["user"]
    prices = t.turns[2]["text"]
    if not has_tool_role:  # ROLL's tool wrapper: <tool_response> blocks in a user message
        assert prices.startswith("<tool_response>\n") and prices.count("</tool_response>") == 2
    assert t.turns[4]["text"].endswith(f"{total}" if has_tool_role else f"\n{total}\n</tool_response>")

    schemas = list(envs.make_env("Shop").tool_schemas)
    rendered = rendered_conversation(tok, t, schemas)
    if template == "qwen_like":  # the first prompt carries the tools; two results, one user turn
        assert rendered.startswith("<|im_start|>system\n<tools>\n" + json.dumps(schemas[0]))
        assert "<|im_start|>user\n<tool_response>\n" in rendered and "</tool_response>\n<tool_response>" in rendered
    # the engine was given, and the row holds, exactly the template's rendering of the conversation
    ids = t.prompt_ids + t.response_ids
    assert tok.encode(rendered, add_special_tokens=False) == ids + tok.encode("\n", add_special_tokens=False)
    assert engine.prompts[1] == ids[: len(engine.prompts[1])] and len(engine.prompts) == 3
    assert engine.prompts[0] == t.prompt_ids
    replies = [tok.encode(text, add_special_tokens=False) + ([tok.eos_token_id] if eos else []) for text, eos in script]
    assert [i for i, m in zip(t.response_ids, t.loss_mask, strict=True) if m] == [i for r in replies for i in r]


def test_tool_formats_read_off_the_templates() -> None:
    assert chat_format(tokenizer()).tool == ToolFormat(
        "<|im_start|>tool\n", "<|im_end|>\n<|im_start|>tool\n", "<|im_end|>\n<|im_start|>assistant\n")
    qwen = chat_format(tokenizer(QWEN_LIKE))
    assert qwen.tool == ToolFormat("<|im_start|>user\n<tool_response>\n", "\n</tool_response>\n<tool_response>\n",
                                   "\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert qwen.between_tool_results(["7", "3"], "<|im_end|>") == (
        "\n<|im_start|>user\n<tool_response>\n7\n</tool_response>\n<tool_response>\n3\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n")
    for template in (REFUSES_TOOLS, DROPS_TOOLS):
        fmt = chat_format(tokenizer(template))
        assert fmt.tool is None
        assert fmt.between_tool_results(["7", "3"]) == (
            "<|im_end|>\n<|im_start|>user\n<tool_response>\n7\n</tool_response>\n<tool_response>\n3\n"
            "</tool_response><|im_end|>\n<|im_start|>assistant\n")
    with pytest.raises(ValueError, match="renders consecutive tool messages inconsistently"):
        chat_format(tokenizer(NUMBERS_TOOLS))


def test_a_malformed_call_is_a_format_error_answered_as_a_user_message() -> None:
    tok = tokenizer(QWEN_LIKE)
    bad = '<tool_call>\n{"name": "lookup", "arguments": {"item": 3}}\n</tool_call>'
    t, _ = play_script(tok, [(bad, True), ("<answer>0</answer>", True)], shop())
    assert [turn["role"] for turn in t.turns] == ["user", "assistant", "user", "assistant", "user"]
    assert t.turns[1]["format_ok"] is False and t.turns[1]["action"] is None
    assert t.turns[2]["text"] == "malformed tool call: lookup(item): item is a string, not int"
    assert t.penalty == 0.0 and t.actions == 1  # the manager's format_penalty is 0 here; the answer counts
    rendered = rendered_conversation(tok, t, list(shop().make_env("Shop").tool_schemas))
    assert tok.encode(rendered, add_special_tokens=False) == t.prompt_ids + t.response_ids + tok.encode("\n")
