"""ROLL's `qwen3_coder` template name (its agentic SWE examples): the tokenizer's own chat template, as ROLL's env
managers render every turn with it (roll/pipeline/agentic/env_manager/*: tokenizer.apply_chat_template; the name is in
no ROLL registry). With Qwen3-Coder's tokenizer that is ChatML turns with no default system prompt and no <think>
handling when no tools are given."""

from __future__ import annotations

from typing import Any

import pytest

from trainer.config.registries import CHAT_TEMPLATES
from trainer.data.datasets import render_prompt

# Qwen3-Coder's chat template without tools, written out here: the system message (when first) in its own turn,
# every other message as `<|im_start|>ROLE\nCONTENT<|im_end|>\n`, then the generation prompt.
QWEN3_CODER_NO_TOOLS = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set loop_messages = messages %}{%- endif %}"
    "{%- for message in loop_messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
CHAT = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing test."},
    {"role": "assistant", "content": "<think>look first</think>Done: the off-by-one is fixed."},
]


@pytest.fixture
def coder_tokenizer() -> Any:
    from trainer.models.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    tokenizer.chat_template = QWEN3_CODER_NO_TOOLS
    return tokenizer


def test_qwen3_coder_renders_a_system_user_assistant_chat_with_the_tokenizer_s_template(
    coder_tokenizer: Any,
) -> None:
    assert "qwen3_coder" in CHAT_TEMPLATES
    text = render_prompt({"chat": CHAT}, coder_tokenizer, template="qwen3_coder", messages_key="chat")
    assert text == (
        "<|im_start|>system\nYou are a coding agent.<|im_end|>\n"
        "<|im_start|>user\nFix the failing test.<|im_end|>\n"
        "<|im_start|>assistant\n<think>look first</think>Done: the off-by-one is fixed.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert text == render_prompt({"chat": CHAT}, coder_tokenizer, template="native", messages_key="chat")
    # no default system prompt without tools (Qwen2.5's template adds one)
    assert render_prompt({"q": "hi"}, coder_tokenizer, template="qwen3_coder", prompt_key="q") == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_a_roll_file_naming_qwen3_coder_validates() -> None:
    from pydantic import ValidationError

    from trainer.config.schema import DataArgs

    assert DataArgs.model_validate({"template": "qwen3_coder"}).template == "qwen3_coder"
    with pytest.raises(ValidationError, match="unknown template 'qwen3_codr'"):
        DataArgs.model_validate({"template": "qwen3_codr"})
