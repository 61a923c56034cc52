"""ROLL's ProxyEnvManager with its GEMRunner (decision 0060): the runner's messages, ROLL's MessageTracker tokens,
the trained / masked tokens, rewards and the failed episode.

The expected texts and token layouts are written out by hand from ROLL's code
(roll/pipeline/agentic/agent_runner/gem_runner.py: run_job, _render_observation;
roll/pipeline/agentic/env_manager/message_tracker.py: tokenize_single_message, build_sample_from_path;
proxy_env_manager.py: _process_request_dict, formulate_rollouts), with the templates of ROLL's traj_envs.yaml; a
scripted engine plays Sokoban so that observations and rewards are known. A 2-step run trains through the pipeline.

How it fails on the old code: validation refuses the manager, and the trajectory manager writes one user message
"instruction\\nobservation" with no system message and no agent_template, closes a cut reply with <|im_end|>, and
keeps the score of an episode that ran out of room.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.pipeline.conftest import events, metrics_by_step, run_local
from tests.trainer.pipeline.test_agentic_trajectory import TOKENIZER, ScriptedEngine
from trainer.config.schema import CustomEnvConfig, EnvManagerConfig
from trainer.envs.manager import EnvManager
from trainer.pipeline.trajectory import PlaySetup, chat_format, play, trajectory_batch
from trainer.rollout.base import SamplingParams

PROXY = "roll.pipeline.agentic.env_manager.proxy_env_manager.ProxyEnvManager"
GEM_RUNNER = "roll.pipeline.agentic.agent_runner.gem_runner.GEMRunner"
TOOL_RUNNER = "roll.pipeline.agentic.agent_runner.gem_runner.ToolCallRunner"
AGENTIC = Path(__file__).resolve().parents[3] / "examples" / "agentic_grid_cpu.yaml"
# ROLL's examples/config/traj_envs.yaml
SYSTEM = (
    "You're a helpful assistant. You are a good game player. You are aiming to get high reward in the game."
)
TEMPLATE = (
    "Turn {turn_idx}:\nObservation:\n{observation}\nStrictly follow this format:\n"
    "1. output format is '<answer> [your answer] </answer>' with no extra text. \n"
    "2. You have {actions_left} actions left. \n3. Max response length: {max_response_length} words (tokens).\n"
    "Decide the next action:\n"
)


def proxy_manager(
    *,
    cls: str | None = PROXY,
    runner: str | None = GEM_RUNNER,
    penalty: float = -0.15,
    manager_penalty: float = -0.5,
) -> EnvManager:
    env = CustomEnvConfig(
        env_type="sokoban",
        max_steps=3,
        max_tokens_per_step=24,
        env_instruction="Push.",
        env_manager_cls=cls,
        agent_runner_cls=runner,
        agent_system_template=SYSTEM,
        agent_template=TEMPLATE,
        env_config={
            "action_pattern": "<answer>(.*?)</answer>",
            "max_steps": 3,
            "format_penalty": penalty,
            "dim_room": [5, 5],
            "num_boxes": 1,
        },
    )
    config = EnvManagerConfig(env_groups=1, group_size=1, tags=["Box"], format_penalty=manager_penalty)
    return EnvManager("train_env_manager", config, {"Box": env}, batch_size=1, seed=0)


def play_script(
    envs: EnvManager,
    script: list[list[tuple[str, bool]]],
    *,
    cap: int | None = None,
    max_new_tokens: int = 32,
) -> tuple[list, ScriptedEngine]:
    engine = ScriptedEngine(script)
    setup = PlaySetup(
        engine,
        TOKENIZER,
        chat_format(TOKENIZER),
        prompt_length=1024,
        response_length=1024,
        sequence_length=cap,
    )
    return play(
        setup,
        envs,
        envs.episodes(1),
        SamplingParams(max_new_tokens=max_new_tokens),
        lambda turn, budget: turn,
    ), engine


def observations(envs: EnvManager, replies: list[str]) -> list[str]:
    """The observations the replies see, from a fresh environment with the episode's seed."""
    env = envs.make_env("Box")
    seen = [env.reset(envs.episodes(1)[0].seed)]
    for reply in replies:
        seen.append(env.step(reply).observation)
    return seen


def user(observation: str, turn: int, left: int) -> str:
    """ROLL's _render_observation of traj_envs.yaml's agent_template, filled in by hand (max_tokens_per_step 24)."""
    return (
        f"Turn {turn}:\nObservation:\n{observation}\nStrictly follow this format:\n"
        "1. output format is '<answer> [your answer] </answer>' with no extra text. \n"
        f"2. You have {left} actions left. \n3. Max response length: 24 words (tokens).\nDecide the next action:\n"
    )


def ids(text: str) -> list[int]:
    return TOKENIZER.encode(text, add_special_tokens=False)


SCRIPT = [[("<answer>Right</answer>", True)], [("go", False)], [("<answer>Left</answer>", True)]]


def test_gem_runner_messages_tokens_and_masks_are_rolls() -> None:
    envs = proxy_manager()
    (t,), engine = play_script(envs, SCRIPT)
    obs = observations(envs, ["<answer>Right</answer>", "go"])
    assert (t.replies, t.done_reason, t.proxy) == (3, "max_steps", True)
    # the action is parsed from the decoded reply (special tokens skipped) by the environment itself
    assert [turn.get("action") for turn in t.turns if turn["role"] == "assistant"] == ["right", None, "left"]
    # ROLL's MessageTracker: system and user messages tokenized alone; after each reply one "\n" token and the next
    # user message with the generation prompt, whatever the reply generated ("go" was cut: no <|im_end|> added)
    system = f"<|im_start|>system\n{SYSTEM}\n\nPush.<|im_end|>\n"
    expected_prompt = system + f"<|im_start|>user\n{user(obs[0], 1, 3)}<|im_end|>\n<|im_start|>assistant\n"
    assert t.prompt_ids == ids(expected_prompt)
    gap = "\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
    expected = (
        ids("<answer>Right</answer><|im_end|>")
        + ids(gap.format(user(obs[1], 2, 2)))
        + ids("go")
        + ids(gap.format(user(obs[2], 3, 1)))
        + ids("<answer>Left</answer><|im_end|>")
    )
    assert t.response_ids == expected
    # trained: exactly the sampled tokens (ROLL's response_masks: 1 on assistant items with logprobs)
    sampled = [len(ids("<answer>Right</answer>")) + 1, len(ids("go")), len(ids("<answer>Left</answer>")) + 1]
    between = [len(ids(gap.format(user(obs[k], k + 1, 3 - k)))) for k in (1, 2)]
    assert (
        t.loss_mask
        == [1] * sampled[0] + [0] * between[0] + [1] * sampled[1] + [0] * between[1] + [1] * sampled[2]
    )
    # the engine continued exactly ROLL's input ids (build_input_ids) each turn
    assert engine.prompts[1] == [t.prompt_ids + t.response_ids[: sampled[0] + between[0]]]
    batch = trajectory_batch([t], TOKENIZER.pad_token_id)
    assert batch["response_mask"][0].sum().item() == sum(sampled)
    # rewards: the environment's, plus its format_penalty on the broken reply; the env manager's (-0.5) is never read
    assistant = [turn for turn in t.turns if turn["role"] == "assistant"]
    assert [turn["penalty"] for turn in assistant] == [0.0, -0.15, 0.0]
    assert t.score == pytest.approx(sum(turn["reward"] + turn["penalty"] for turn in assistant))


def test_without_an_env_format_penalty_the_proxy_adds_none() -> None:
    envs = proxy_manager(penalty=0.0)
    envs.format_penalties.pop("Box", None)  # as a config without env_config.format_penalty
    (t,), _ = play_script(envs, SCRIPT)
    assert [turn["penalty"] for turn in t.turns if turn["role"] == "assistant"] == [0.0, 0.0, 0.0]


def test_an_episode_that_runs_out_of_room_fails_with_score_0() -> None:
    envs = proxy_manager()
    (full,), _ = play_script(envs, [[("<answer>Right</answer>", True)]] * 3)
    # room for the first prompt and reply, not for the next user message: ROLL's proxy refuses the request
    (t,), _ = play_script(envs, [[("<answer>Right</answer>", True)]] * 3, cap=len(full.prompt_ids) + 40)
    assert (t.done_reason, t.replies, t.failed, t.score) == ("max_length", 1, True, 0.0)
    assert t.rewards == full.rewards[:1] and t.rewards[0] != 0.0  # the move's reward, scored 0 ("Failed")
    assert not full.failed and full.score == pytest.approx(sum(full.rewards))


def test_the_turn_budget_is_the_smaller_of_max_tokens_per_step_and_max_new_tokens() -> None:
    with pytest.raises(AssertionError):  # the 22-token reply does not fit min(24, 16)
        play_script(proxy_manager(), [[("<answer>Right</answer>", False)]], max_new_tokens=16)
    (t,), _ = play_script(proxy_manager(), [[("<answer>Right</answer>", True)]] * 3)  # min(24, 32)
    assert t.replies == 3


def test_the_trajectory_manager_ignores_the_runner() -> None:
    (t,), _ = play_script(proxy_manager(cls=None), SCRIPT)
    assert not t.proxy and "<|im_start|>system" not in TOKENIZER.decode(t.prompt_ids)


def test_runners_that_are_not_built_are_refused_naming_the_built_one() -> None:
    with pytest.raises(
        ValueError,
        match=f"custom_envs.Box.agent_runner_cls: the tool-call runner .* is not built.*"
        f"override custom_envs.Box.agent_runner_cls={GEM_RUNNER}",
    ):
        proxy_manager(runner=TOOL_RUNNER)
    with pytest.raises(ValueError, match=r"custom_envs\.Box\.agent_runner_cls: unset"):
        proxy_manager(runner=None)


def proxy_overrides(
    runner: str = GEM_RUNNER, template: str = "T{turn_idx} {actions_left} {observation}"
) -> list[str]:
    return [
        f"+custom_envs.FrozenLake.env_manager_cls={PROXY}",
        f"+custom_envs.FrozenLake.agent_runner_cls={runner}",
        "+custom_envs.FrozenLake.agent_system_template=Play.",
        f"+custom_envs.FrozenLake.agent_template='{template}'",
    ]


def test_validation_takes_the_proxy_with_gem_runner_and_refuses_other_runners() -> None:
    from trainer.config import load_raw, validate_config

    def issues(overrides: list[str]) -> tuple[list[str], list[str]]:
        result = validate_config(load_raw(AGENTIC, overrides))
        return [str(i) for i in result.errors], [
            str(w) for w in result.warnings if "FrozenLake.agent" in w.path
        ]

    assert issues(proxy_overrides()) == ([], [])  # the runner's fields act: no "has no effect" warning
    errors, _ = issues(proxy_overrides(TOOL_RUNNER))
    assert errors == [
        f"custom_envs.FrozenLake.agent_runner_cls: the tool-call runner (OpenAI function calling) "
        f"({TOOL_RUNNER}) is not built in this version of PolicyLab; built: {GEM_RUNNER} (text "
        f"environments): override custom_envs.FrozenLake.agent_runner_cls={GEM_RUNNER}, or "
        "~custom_envs.FrozenLake.env_manager_cls to play FrozenLake with the trajectory manager"
    ]
    errors, _ = issues(proxy_overrides(template="{observation} {score}"))
    assert len(errors) == 1 and errors[0].startswith("custom_envs.FrozenLake.agent_template: names score")


def test_a_proxy_run_trains(tmp_path: Path) -> None:
    from trainer.config import load_config

    cfg = load_config(
        AGENTIC,
        [
            *proxy_overrides(),
            f"output_dir={tmp_path}",
            "track_with=none",
            "render_save_dir=null",
            "max_steps=2",
            "eval_steps=0",
            "save_steps=100",
            "rollout_batch_size=8",
            "train_env_manager.env_groups=2",
            "train_env_manager.n_groups=[2]",
            "actor_train.training_args.per_device_train_batch_size=8",
            "prompt_length=64",
        ],
    )
    assert run_local(cfg) == 0
    metrics = metrics_by_step(tmp_path)
    assert sorted(metrics) == [1, 2]
    assert all(m["env/num_turns"] >= 1 for m in metrics.values())
    # the logged trajectories were played by the runner: its system message and first user message
    samples = [sample for e in events(tmp_path, "rollouts") for sample in e["data"]["samples"]]
    # (the example's env_instruction is empty: the system message is agent_system_template alone; max_steps 6)
    assert samples and all(
        sample["prompt"].startswith("<|im_start|>system\nPlay.<|im_end|>\n<|im_start|>user\nT1 6 ")
        for sample in samples
    )
