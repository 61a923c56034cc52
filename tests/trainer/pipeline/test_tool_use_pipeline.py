"""The tool_use environment in the agentic pipeline on the tiny model (examples/agentic_tool_calls_cpu.yaml).

A random tiny model never writes a tool call, so the fixture first teaches one (a short supervised fit):
the call `CALL`, whose "arguments" is a JSON string, as the OpenAI protocol encodes it. With
parse_tool_call_parameter_to_dict the pipeline decodes it, the calculator runs, and its result reaches
the model as the chat template's tool message; without it the same replies are malformed calls (the
disconnect check). Either way the run trains, and its rows are token for token the template's
rendering of the conversations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.pipeline.conftest import REPO_ROOT, events, metrics_by_step, run_local

EXAMPLE = REPO_ROOT / "examples" / "agentic_tool_calls_cpu.yaml"
INSTRUCTION = "Use the tools."
CALL = '<tool_call>{"name": "calculator", "arguments": "{\\"expression\\": \\"6*7\\"}"}</tool_call>'


def config(out: Path, pretrain: str, flag: bool) -> Any:
    from trainer.config import load_config

    return load_config(EXAMPLE, [
        f"output_dir={out}", f"logging_dir={out}/logs", "track_with=none", f"pretrain={pretrain}",
        "max_steps=2", "eval_steps=0", "save_steps=1000", "adv_estimator=reinforce",
        "custom_envs.Shop.env_config.tool_reward=0.1", f"parse_tool_call_parameter_to_dict={str(flag).lower()}",
        "rollout_batch_size=4", "train_env_manager.env_groups=1", "actor_train.training_args.per_device_train_batch_size=4",
        "prompt_length=96", "response_length=208", "custom_envs.Shop.max_steps=2", "custom_envs.Shop.max_tokens_per_step=96",
        "actor_infer.generating_args.max_new_tokens=96", "actor_infer.generating_args.temperature=0.3",
        f"custom_envs.Shop.env_instruction={INSTRUCTION!r}",
    ])


@pytest.fixture(scope="module")
def caller(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model (seed 0) fitted to answer CALL to the run's two questions (one group a step) and to a
    tool result: a few seconds (the tiny model does not generalise CALL to unseen prompts, so it sees these)."""
    import torch
    from transformers import AutoModelForCausalLM

    from trainer.models.tiny import build_tiny_model, build_tokenizer, save_model_files
    from trainer.pipeline.agentic import build_env_managers

    out = build_tiny_model(tmp_path_factory.mktemp("caller"), seed=0)
    tok, (envs, _) = build_tokenizer(), build_env_managers(config(out, str(out), True))
    rows = []
    for step in (1, 2):
        env, (episode, *_) = envs.make_env("Shop"), envs.episodes(step)
        user = [{"role": "user", "content": f"{INSTRUCTION}\n{env.reset(episode.seed)}"}]
        prompt = tok.apply_chat_template(user, add_generation_prompt=True, tokenize=False)
        two_turns = tok.apply_chat_template([*user, {"role": "assistant", "content": CALL},
                                             {"role": "tool", "content": "42"}], add_generation_prompt=True,
                                            tokenize=False) + CALL + tok.eos_token
        ids, start = tok.encode(two_turns), len(tok.encode(prompt))
        rows.append((ids, [-100] * start + ids[start:]))  # the loss on both replies and the tool turn
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.tensor([ids + [tok.pad_token_id] * (width - len(ids)) for ids, _ in rows])
    labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in rows])
    mask = (torch.arange(width)[None] < torch.tensor([len(ids) for ids, _ in rows])[:, None]).long()
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as conftest's one_torch_thread, which module fixtures run before
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(300):
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        if loss.item() < 0.003:
            break
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.set_num_threads(threads)
    assert loss.item() < 0.003
    save_model_files(model, out)
    return out


def run(out: Path, caller: Path, flag: bool) -> tuple[dict[int, dict[str, float]], list[dict[str, Any]]]:
    from trainer.telemetry.events import parse_event

    assert run_local(config(out, str(caller), flag)) == 0
    rollouts = events(out, "rollouts")
    for event in rollouts:
        parse_event(event)  # the contract takes tool turns
    samples = [s for e in rollouts for s in e["data"]["samples"]]
    return metrics_by_step(out), samples


@pytest.mark.parametrize("flag", [True, False])
def test_tool_calls_run_and_train_and_tokens_are_the_templates(tmp_path: Path, caller: Path, flag: bool) -> None:
    from trainer.envs.tools import ToolUse
    from trainer.models.tiny import build_tokenizer

    metrics, samples = run(tmp_path, caller, flag)
    assert sorted(metrics) == [1, 2] and len(samples) == 8
    assert all(metrics[s]["actor/grad_norm"] > 0 for s in (1, 2))  # it trains (reinforce: the scores are the advantages)
    tok, schemas = build_tokenizer(), list(ToolUse().tool_schemas)
    replies = [t for s in samples for t in s["turns"] if t["role"] == "assistant"]
    calls = [t for t in replies if t["text"] == CALL]
    assert len(calls) >= 0.75 * len(replies)  # the fitted model writes CALL, its arguments a JSON string
    for s in samples:
        turns = s["turns"]
        for reply, observation in zip(turns[1::2], turns[2::2], strict=True):
            if reply["text"] != CALL:
                continue
            if flag:  # decoded: the calculator ran, its result is a tool message
                assert (reply["format_ok"], reply["action"]) == (True, "calculator")
                assert (observation["role"], observation["text"]) == ("tool", "42")
            else:  # left a string: a malformed call, answered as a user message
                assert (reply["format_ok"], reply["action"]) == (False, None)
                assert observation == {**observation, "role": "user",
                                       "text": 'malformed tool call: "arguments" is a string; write it as a JSON object'}
        # the row is the template's rendering of the conversation (tool role included), token for token
        messages = [{"role": "user", "content": turns[0]["text"]}]
        for reply, observation in zip(turns[1::2], turns[2::2], strict=True):
            messages.append({"role": "assistant", "content": reply["text"]})
            if observation["tokens"]:
                messages.append({"role": observation["role"], "content": observation["text"]})
        rendered = tok.apply_chat_template(messages, tools=schemas, tokenize=False)
        closing = "\n" if s["response"].endswith(tok.eos_token) else tok.eos_token + "\n"
        assert rendered == s["prompt"] + s["response"] + closing
        assert json.dumps(schemas) not in rendered  # the tiny template does not render tools
    error_rate = [metrics[s]["env/format_error_rate"] for s in (1, 2)]
    assert max(error_rate) <= 0.25 if flag else min(error_rate) >= 0.75
