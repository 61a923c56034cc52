"""Multi-turn trajectories with a scripted engine (no model): the token layout equals the chat template's
rendering of the whole conversation, the loss mask covers exactly the sampled tokens, format penalties
and the turn/action/length limits end episodes as documented."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest
import torch

from trainer.config.schema import CustomEnvConfig, EnvManagerConfig
from trainer.envs.grid import MOVES
from trainer.envs.manager import EnvManager
from trainer.models.tiny import build_tokenizer
from trainer.pipeline.trajectory import (
    PlaySetup,
    Trajectory,
    chat_format,
    env_metrics,
    play,
    trajectory_batch,
)
from trainer.rollout.base import Generation, SamplingParams

TOKENIZER = build_tokenizer()
EOS = TOKENIZER.convert_tokens_to_ids("<|im_end|>")


class ScriptedEngine:
    """Replies from a script: call k (one per turn here) answers row i with script[k][i] = (text, ends
    with EOS?). Every sampled token gets log-prob −0.5 − 0.01·k so that the layout can be checked."""

    def __init__(self, script: list[list[tuple[str, bool]]]) -> None:
        self.script, self.calls, self.prompts = script, 0, []

    def __call__(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        replies = self.script[self.calls]
        self.prompts.append(prompts)
        gens = []
        for i, (text, eos) in enumerate(replies[: len(prompts)]):
            ids = TOKENIZER.encode(text, add_special_tokens=False) + ([EOS] if eos else [])
            assert len(ids) <= params.max_new_tokens
            gens.append(
                Generation(i, 0, ids, [-0.5 - 0.01 * self.calls] * len(ids), "eos" if eos else "length")
            )
        self.calls += 1
        return gens


def manager(
    *,
    max_steps: int = 6,
    max_actions: int | None = None,
    penalty: float = -0.2,
    size: int = 3,
    episodes: int = 1,
    instruction: str | None = "",
) -> EnvManager:
    env = CustomEnvConfig(
        env_type="frozen_lake",
        max_steps=max_steps,
        max_actions_per_traj=max_actions,
        max_tokens_per_step=6,
        env_instruction=instruction,
        env_config={"size": size, "action_format": "plain"},
    )
    config = EnvManagerConfig(env_groups=episodes, group_size=1, tags=["Lake"], format_penalty=penalty)
    return EnvManager("train_env_manager", config, {"Lake": env}, batch_size=episodes, seed=0)


def run(
    script: list[list[tuple[str, bool]]], envs: EnvManager, *, response_length: int = 512, seed_step: int = 1
) -> tuple[list[Trajectory], ScriptedEngine]:
    engine = ScriptedEngine(script)
    setup = PlaySetup(
        engine, TOKENIZER, chat_format(TOKENIZER), prompt_length=128, response_length=response_length
    )
    params = SamplingParams(max_new_tokens=8, temperature=1.0)
    return play(setup, envs, envs.episodes(seed_step), params, lambda turn, budget: turn), engine


def test_chat_format_of_the_tiny_template() -> None:
    fmt = chat_format(TOKENIZER)
    assert (fmt.assistant_close, fmt.user_open, fmt.user_close) == (
        "<|im_end|>\n",
        "<|im_start|>user\n",
        "<|im_end|>\n<|im_start|>assistant\n",
    )
    assert (
        fmt.between_replies("obs", "<|im_end|>")
        == "\n<|im_start|>user\nobs<|im_end|>\n<|im_start|>assistant\n"
    )
    assert (
        fmt.between_replies("obs") == "<|im_end|>\n<|im_start|>user\nobs<|im_end|>\n<|im_start|>assistant\n"
    )


def test_tokens_are_the_chat_templates_rendering_and_the_loss_mask_is_exactly_the_replies() -> None:
    # the lake P__ / OO_ / __G: right, a broken reply, right, left, up (a wall), up: six replies, no hole
    script = [[("R", True)], [("xy", False)], [("R", True)], [("left", False)], [("Up", True)], [("U", True)]]
    (t,), engine = run(script, manager())
    assert (t.replies, t.done_reason, t.actions) == (6, "max_steps", 5)
    # the conversation as messages, rendered by the template independently of the loop
    turns = t.turns
    assert [turn["role"] for turn in turns] == ["user", "assistant"] * t.replies + ["user"]
    messages = [{"role": turn["role"], "content": turn["text"]} for turn in turns[:-1]]
    rendered = TOKENIZER.apply_chat_template(messages, tokenize=False)
    assert rendered.endswith("<|im_end|>\n")
    ids = t.prompt_ids + t.response_ids
    closing = "\n" if script[t.replies - 1][0][1] else "<|im_end|>\n"  # what the last reply did not generate
    assert TOKENIZER.encode(rendered, add_special_tokens=False) == ids + TOKENIZER.encode(
        closing, add_special_tokens=False
    )

    batch = trajectory_batch([t], TOKENIZER.pad_token_id)
    mask = batch["response_mask"][0]
    width_p = len(t.prompt_ids)
    response = batch["input_ids"][0, width_p:]
    expected = torch.zeros(len(t.response_ids))
    position = 0
    for k, ((text, eos),) in enumerate(script[: t.replies]):
        sampled = len(TOKENIZER.encode(text, add_special_tokens=False)) + int(eos)
        start = _find(t.response_ids, TOKENIZER.encode(text, add_special_tokens=False), position)
        assert k > 0 or start == 0
        # the engine was given exactly the tokens before this reply
        assert engine.prompts[k] == [t.prompt_ids + t.response_ids[:start]]
        expected[start : start + sampled] = 1
        position = start + sampled
    assert mask.tolist() == expected.tolist()
    # the sampled tokens are the replies; everything else decodes to the observation turns between them
    assert response[mask > 0].tolist() == [tok for gen in _replies(script[: t.replies]) for tok in gen]
    observations = [turn["text"] for turn in turns[2:-1:2]]
    gaps = TOKENIZER.decode(response[mask == 0].tolist())
    assert gaps == "".join(
        ("\n" if eos else "<|im_end|>\n") + f"<|im_start|>user\n{obs}<|im_end|>\n<|im_start|>assistant\n"
        for ((_, eos),), obs in zip(script, observations, strict=False)
    )
    # the engine's log-probs sit on the sampled tokens, 0 on observation tokens
    logprobs = torch.tensor(t.logprobs)
    assert bool((logprobs[expected == 0] == 0).all()) and bool((logprobs[expected == 1] < 0).all())


def test_format_penalty_and_the_turn_limit() -> None:
    script = [[("jump", True)], [("R", True)], [("??", False)]]  # the lake: P__ / OO_ / __G
    (t,), _ = run(script, manager(max_steps=3, penalty=-0.25))
    assert t.turns[0]["text"] == "P__\nOO_\n__G"
    assert t.done_reason == "max_steps" and t.replies == 3 and t.actions == 1
    assert t.score == pytest.approx(-0.5)  # two broken replies, no env reward
    assistant = [turn for turn in t.turns if turn["role"] == "assistant"]
    assert [(a["format_ok"], a["penalty"], a["action"]) for a in assistant] == [
        (False, -0.25, None),
        (True, 0.0, "right"),
        (False, -0.25, None),
    ]
    assert t.turns[-1] == {"role": "user", "text": t.turns[-1]["text"], "tokens": 0, "loss": False}


def test_action_limit_counts_only_valid_actions() -> None:
    script = [[("L", True)], [("nope", True)], [("U", True)], [("U", True)]]
    (t,), _ = run(script, manager(max_steps=6, max_actions=2))
    assert (t.done_reason, t.replies, t.actions) == ("max_actions", 3, 2)


def test_length_budget_ends_the_episode_before_an_observation_that_does_not_fit() -> None:
    # each turn adds a reply (2 tokens: letter + EOS) and an observation turn; a turn may sample 6 tokens
    between = len(
        TOKENIZER.encode(
            chat_format(TOKENIZER).between_replies("P__\nOO_\n__G", "<|im_end|>"), add_special_tokens=False
        )
    )
    script = [[("L", True)]] * 6
    (t,), _ = run(script, manager(), response_length=2 + between + 2 + between + 5)
    assert (t.done_reason, t.replies) == ("max_length", 2)  # the third reply's 6-token budget would not fit
    assert len(t.response_ids) == 2 + between + 2


def test_success_and_failure_end_the_episode_with_the_environments_reward() -> None:
    envs = manager(size=4)
    episode = envs.episodes(1)[0]
    grid = envs.make_env("Lake").reset(episode.seed).split("\n")
    moves = _path_moves(grid)
    (t,), _ = run([[(move[0].upper(), True)] for move in moves], envs)
    assert (t.done_reason, t.success, t.score, t.replies) == ("success", True, 1.0, len(moves))
    metrics = env_metrics([t], "env")
    assert (
        metrics["env/success"] == 1.0
        and metrics["env/Lake/success"] == 1.0
        and metrics["env/done/success"] == 1.0
    )


def test_episodes_play_in_lockstep_and_finished_ones_leave_the_batch() -> None:
    envs = manager(episodes=2, max_steps=3)
    script = [[("jump", True), ("D", True)], [("R", True), ("D", True)], [("R", True), ("R", True)]]
    trajectories, engine = run(script, envs)
    assert [len(p) for p in engine.prompts] == [2, 2, 2]
    assert all(t.done_reason in ("max_steps", "success", "failure") for t in trajectories)
    batch = trajectory_batch(trajectories, TOKENIZER.pad_token_id)
    assert batch["response_mask"].sum(-1).tolist() == [sum(t.loss_mask) for t in trajectories]
    assert batch["attention_mask"][:, batch["input_ids"].size(1) - batch["response_mask"].size(1) :].sum(
        -1
    ).tolist() == [
        len(t.response_ids) for t in trajectories
    ]  # observation tokens are attended, only not trained


def test_a_first_prompt_longer_than_prompt_length_is_refused() -> None:
    envs = manager(instruction="x" * 200)
    engine = ScriptedEngine([])
    setup = PlaySetup(engine, TOKENIZER, chat_format(TOKENIZER), prompt_length=64, response_length=64)
    with pytest.raises(
        ValueError, match=r"prompt_length: the first prompt of Lake has \d+ tokens, more than 64"
    ):
        play(setup, envs, envs.episodes(1), SamplingParams(max_new_tokens=2), lambda turn, budget: 0)


def _replies(script: list[list[tuple[str, bool]]]) -> list[list[int]]:
    return [
        TOKENIZER.encode(text, add_special_tokens=False) + ([EOS] if eos else []) for ((text, eos),) in script
    ]


def _find(haystack: list[int], needle: list[int], start: int) -> int:
    for i in range(start, len(haystack) - len(needle) + 1):
        if haystack[i : i + len(needle)] == needle:
            return i
    raise AssertionError(f"{needle} not found after {start}")


def _path_moves(grid: list[str]) -> list[str]:
    size = len(grid)
    holes = {(r, c) for r in range(size) for c in range(size) if grid[r][c] == "O"}
    todo: deque[Any] = deque([((0, 0), [])])
    seen = {(0, 0)}
    while todo:
        cell, path = todo.popleft()
        if cell == (size - 1, size - 1):
            return path
        for name, (dr, dc) in MOVES.items():
            nxt = (cell[0] + dr, cell[1] + dc)
            if 0 <= nxt[0] < size and 0 <= nxt[1] < size and nxt not in holes and nxt not in seen:
                seen.add(nxt)
                todo.append((nxt, [*path, name]))
    raise AssertionError("no path")
