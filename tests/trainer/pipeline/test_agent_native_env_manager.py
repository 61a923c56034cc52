"""ROLL's AgentNativeStepEnvManager with its sokoban_native_env (decision 0061): the environment keeps the
conversation, each turn's prompt is the whole message list through the chat template, each reply is one row.

The expected messages are written out from ROLL's code: SokobanNativeEnv.reset / step
(roll/pipeline/agentic/env/sokoban/native_env.py) and the manager's step / format_messages
(roll/pipeline/agentic/env_manager/agent_native_env_manager.py, which steps the reply decoded with
skip_special_tokens=False and renders `apply_chat_template(messages, add_generation_prompt=True)`). A scripted
engine plays, so the replies are known; a 2-step run trains on the rows through the real pipeline.

How it fails: render each turn from a step template instead of the messages (prompts differ), strip the reply's
end-of-turn token before it enters the conversation (ROLL keeps it), continue one conversation per row instead
of one row per reply, or leave out gym-sokoban's −0.1 no-op step on a broken reply.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.pipeline.conftest import metrics_by_step, run_local
from tests.trainer.pipeline.test_agentic_trajectory import EOS, TOKENIZER, ScriptedEngine
from trainer.config.registries import NATIVE_ENV_TYPES
from trainer.config.schema import CustomEnvConfig, EnvManagerConfig
from trainer.envs.manager import EnvManager
from trainer.envs.native import SokobanNative, native_env_types
from trainer.envs.registry import ENVS
from trainer.pipeline.trajectory import PlaySetup, chat_format, play, step_batch, step_rows
from trainer.rollout.base import SamplingParams

NATIVE = "roll.pipeline.agentic.env_manager.agent_native_env_manager.AgentNativeStepEnvManager"
AGENTIC = Path(__file__).resolve().parents[3] / "examples" / "agentic_grid_cpu.yaml"
# ROLL's SokobanNativeEnv defaults, copied from its source
ROLL_SYSTEM = "You're a helpful assistant. You are a good game player. You are aiming to get high reward in the game."
ROLL_SUFFIX = ("\n\n<system-reminder>\nIMPORTANT: Ensure that your response is the format of '<answer> [your answer] "
               "</answer>',  with no extra text, eg. <answer>Right</answer>.\nYour available actions are:\nUp, Down, "
               "Left, Right\n. </system-reminder>\n\nDecide the next action:\n")


def native_manager(*, episodes: int = 1, max_steps: int = 3) -> EnvManager:
    env = CustomEnvConfig(env_type="sokoban_native_env", max_steps=max_steps, max_tokens_per_step=40,
                          env_manager_cls=NATIVE,
                          env_config={"dim_room": [5, 5], "num_boxes": 1, "max_steps": max_steps,
                                      "format_penalty": -0.15})
    config = EnvManagerConfig(env_groups=episodes, group_size=1, tags=["Box"])
    return EnvManager("train_env_manager", config, {"Box": env}, batch_size=episodes, seed=0)


def test_the_native_env_writes_rolls_messages_over_the_built_game() -> None:
    env = SokobanNative(dim_x=5, dim_y=5)
    grid = env.reset(7)
    assert grid == env.game.render()  # the built game, not a copy of it
    assert env.messages == [
        {"role": "system", "content": f"{ROLL_SYSTEM}\n\n{env.game.instruction}"},
        {"role": "user", "content": f"Here is the current state:\n{grid}\n\n{ROLL_SUFFIX}"},
    ]
    moved = env.step("<answer>Up</answer><|im_end|>")
    broken = env.step("no tags<|im_end|>")
    assert env.messages[2:] == [
        {"role": "assistant", "content": "<answer>Up</answer><|im_end|>"},  # the reply as stepped, special tokens kept
        {"role": "user", "content": f"Current state:\n{moved.observation}\n\n{ROLL_SUFFIX}"},
        {"role": "assistant", "content": "no tags<|im_end|>"},  # ROLL's invalid-action reminder never fires
        {"role": "user", "content": f"Current state:\n{broken.observation}\n\n{ROLL_SUFFIX}"},
    ]
    assert moved.info["format_ok"] and moved.reward in (-0.1, 0.9, 9.9, -1.1)  # the game's reward for the move
    # a broken reply: gym-sokoban's no-op step (−0.1); the manager adds the format penalty on top
    assert not broken.info["format_ok"] and broken.reward == pytest.approx(-0.1) and broken.observation == moved.observation


def test_native_env_types_are_the_registered_native_classes() -> None:
    assert native_env_types(ENVS) == NATIVE_ENV_TYPES == ("sokoban_native_env",)


def play_native(script: list[list[tuple[str, bool]]], **kwargs: int) -> tuple[list, ScriptedEngine, EnvManager]:
    envs, engine = native_manager(**kwargs), ScriptedEngine(script)
    setup = PlaySetup(engine, TOKENIZER, chat_format(TOKENIZER), prompt_length=4096, response_length=64)
    return play(setup, envs, envs.episodes(1), SamplingParams(max_new_tokens=40), lambda turn, b: turn), engine, envs


def test_each_turn_renders_the_whole_conversation_and_each_reply_is_a_row() -> None:
    script = [[("<answer>Up</answer>", True)], [("oops", True)], [("<answer>Left</answer>", False)]]
    (t,), engine, envs = play_native(script)
    assert t.replies == 3 and t.done_reason == "max_steps" and t.response_ids == []
    # ROLL's messages, built by hand: the replies decoded with skip_special_tokens=False (EOS -> "<|im_end|>")
    game = envs.make_env("Box")
    grids = [game.reset(envs.episodes(1)[0].seed)]
    replies = ["<answer>Up</answer><|im_end|>", "oops<|im_end|>", "<answer>Left</answer>"]
    for reply in replies:
        grids.append(game.step(reply).observation)
    messages = [{"role": "system", "content": f"{ROLL_SYSTEM}\n\n{game.instruction}"},
                {"role": "user", "content": f"Here is the current state:\n{grids[0]}\n\n{ROLL_SUFFIX}"}]
    expected_prompts = []
    for k, reply in enumerate(replies):
        expected_prompts.append(TOKENIZER.apply_chat_template(messages, tokenize=True, add_generation_prompt=True,
                                                             return_dict=False))
        messages += [{"role": "assistant", "content": reply},
                     {"role": "user", "content": f"Current state:\n{grids[k + 1]}\n\n{ROLL_SUFFIX}"}]
    assert [s.prompt_ids for s in t.steps] == expected_prompts
    assert [calls[0] for calls in engine.prompts] == expected_prompts  # the engine read exactly these
    # the earlier reply's end-of-turn token is in the conversation as ROLL renders it: twice, then the newline
    assert "<answer>Up</answer><|im_end|><|im_end|>\n<|im_start|>user" in TOKENIZER.decode(t.steps[1].prompt_ids)
    # one row per reply: the prompt masked, the reply (its EOS included) trained
    assert step_rows([t]) == [(0, 0), (0, 1), (0, 2)]
    batch = step_batch([t], TOKENIZER.pad_token_id)
    lengths = [len(TOKENIZER.encode(text, add_special_tokens=False)) for text, _ in (s[0] for s in script)]
    assert batch["response_mask"].sum(-1).tolist() == [lengths[0] + 1, lengths[1] + 1, lengths[2]]
    assert t.steps[0].response_ids[-1] == EOS
    # step scores: the game's rewards, the broken reply −0.1 (no-op) − 0.15 (env_config.format_penalty)
    assert t.step_scores[1] == pytest.approx(-0.25)
    assert t.score == pytest.approx(sum(t.step_scores))


def test_the_turn_budget_is_the_smaller_of_max_tokens_per_step_and_max_new_tokens() -> None:
    envs, engine = native_manager(max_steps=1), ScriptedEngine([[("<answer>Up</answer>", True)]])
    setup = PlaySetup(engine, TOKENIZER, chat_format(TOKENIZER), prompt_length=4096, response_length=64)
    budgets: list[int] = []
    play(setup, envs, envs.episodes(1), SamplingParams(max_new_tokens=30), lambda turn, b: budgets.append(b) or 0)
    assert budgets == [30]  # max_tokens_per_step 40, the role's 30: ROLL's make_decision takes the minimum


def test_validation_pairs_the_native_manager_with_native_environments() -> None:
    from trainer.config import load_raw, validate_config

    def errors(*overrides: str) -> list[str]:
        return [str(i) for i in validate_config(load_raw(AGENTIC, list(overrides))).errors]

    native_box = ["custom_envs.FrozenLake.env_type=sokoban_native_env", "custom_envs.FrozenLake.env_config={}",
                  "custom_envs.FrozenLake.max_tokens_per_step=4", "prompt_length=1024"]
    assert errors(*native_box, f"+custom_envs.FrozenLake.env_manager_cls={NATIVE}") == []
    [refused] = errors(*native_box)  # the trajectory manager (the env managers' worker_cls) cannot play it
    assert refused == ("custom_envs.FrozenLake.env_manager_cls: 'sokoban_native_env' keeps its own conversation "
                       "(ROLL's agent-native protocol), which only the agent-native step env manager plays: override "
                       f"custom_envs.FrozenLake.env_manager_cls={NATIVE}")
    # an unregistered environment under the (built) native manager: the error names the environment as missing
    [unknown] = errors("custom_envs.FrozenLake.env_type=openreward_env", f"+custom_envs.FrozenLake.env_manager_cls={NATIVE}")
    assert unknown.startswith("custom_envs.FrozenLake.env_type: 'openreward_env' is not a registered environment")
    assert "the agent-native step env manager it names is built and plays sokoban_native_env" in unknown


def test_a_native_run_trains_on_reply_rows_with_group_mean_and_batch_std(tmp_path: Path) -> None:
    """The corpus file's settings on the tiny model: step_reinforce, grouping traj_group_id, group mean, batch std."""
    from trainer.config import load_config

    cfg = load_config(AGENTIC, [
        f"output_dir={tmp_path}", "track_with=none", "render_save_dir=null", "max_steps=2", "eval_steps=0",
        "save_steps=100", "rollout_batch_size=8", "train_env_manager.env_groups=2", "train_env_manager.n_groups=[2]",
        "actor_train.training_args.per_device_train_batch_size=4", "prompt_length=2048", "adv_estimator=step_reinforce",
        "reward_normalization={grouping: traj_group_id, norm_mean_type: group, norm_std_type: batch}",
        f"+custom_envs.FrozenLake.env_manager_cls={NATIVE}", "custom_envs.FrozenLake.env_type=sokoban_native_env",
        "custom_envs.FrozenLake.max_steps=2", "custom_envs.FrozenLake.max_tokens_per_step=4",
        "custom_envs.FrozenLake.env_config={dim_room: [5, 5], num_boxes: 1, max_steps: 2, format_penalty: -0.15}",
    ])
    assert cfg.reward_normalization.norm_mean_type == "group" and cfg.reward_normalization.norm_std_type == "batch"
    assert run_local(cfg) == 0
    metrics = metrics_by_step(tmp_path)
    assert sorted(metrics) == [1, 2]
    for m in metrics.values():
        assert m["env/num_turns"] == 2  # the random tiny model never solves it in two moves
        rows = m["env/step_rows"]
        assert rows % 4 == 0 and 16 <= rows < 20  # every reply a row, padded to whole optimizer steps
