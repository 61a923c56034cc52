"""ROLL's StepEnvManager (`custom_envs.<tag>.env_manager_cls`) and its `history_length` (decision 0044): each turn
is a fresh prompt holding the last history_length − 1 turns as text, and every reply is one training row.

The expected prompts are written out by hand from ROLL's format_messages (its step_envs.yaml template); a
scripted engine plays FrozenLake so that the observations and rewards are known. A 2-step run trains on step
rows through the real pipeline.

How it fails: ignore history_length (the third prompt then shows no history, or all of it), continue the
conversation instead of starting a fresh prompt (the engine's inputs grow by the earlier replies), or train
one row per trajectory (env/step_rows and the row count differ).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.pipeline.conftest import metrics_by_step, run_local
from tests.trainer.pipeline.test_agentic_trajectory import TOKENIZER, ScriptedEngine
from trainer.config.schema import CustomEnvConfig, EnvManagerConfig
from trainer.envs.manager import EnvManager
from trainer.pipeline.trajectory import PlaySetup, chat_format, first_prompt, play, step_batch, step_rows
from trainer.rollout.base import SamplingParams

STEP_CLS = "roll.pipeline.agentic.env_manager.step_env_manager.StepEnvManager"
AGENTIC = Path(__file__).resolve().parents[3] / "examples" / "agentic_grid_cpu.yaml"


def step_manager(history_length: int | None, *, episodes: int = 1, cls: str | None = STEP_CLS) -> EnvManager:
    env = CustomEnvConfig(env_type="frozen_lake", max_steps=4, max_tokens_per_step=6, env_instruction="Walk.",
                          env_manager_cls=cls, history_length=history_length,
                          env_config={"size": 3, "action_format": "plain"})
    config = EnvManagerConfig(env_groups=episodes, group_size=1, tags=["Lake"], format_penalty=-0.2)
    return EnvManager("train_env_manager", config, {"Lake": env}, batch_size=episodes, seed=0)


def play_script(envs: EnvManager, script: list[list[tuple[str, bool]]]) -> tuple[list, ScriptedEngine]:
    engine = ScriptedEngine(script)
    setup = PlaySetup(engine, TOKENIZER, chat_format(TOKENIZER), prompt_length=1024, response_length=64)
    return play(setup, envs, envs.episodes(1), SamplingParams(max_new_tokens=8), lambda turn, budget: turn), engine


def user_text(prompt_ids: list[int]) -> str:
    text = TOKENIZER.decode(prompt_ids)
    return text.split("<|im_start|>user\n", 1)[1].split("<|im_end|>", 1)[0]


def prompt(step_count: int, history: str, shown: int, observation: str) -> str:
    """ROLL's step_envs.yaml agent_template, filled in by hand."""
    return ("## Env Instruction: Walk.\n\n## State Description:\n"
            f"Prior to this step, you have completed {step_count} steps.\n"
            f"Recent History: Below are the most recent {shown} observations, and your responses:\n[{history}]\n\n"
            f"Current State:\nYou are currently at step {step_count + 1}. Your current observation is: "
            f"[{observation}]\nDecide the next action:")


SCRIPT = [[("R", True)], [("xy", True)], [("R", True)], [("D", True)]]


def test_each_turn_is_a_fresh_prompt_with_the_last_turns_as_history() -> None:
    (t,), engine = play_script(step_manager(3), SCRIPT)
    assert t.replies == 4 and len(t.steps) == 4 and t.response_ids == []
    observations = t.observations
    tip = ("(IMPORTANT TIPS: this action is not valid, your new response *must* strictly adhere to the format "
           "according to env instructions.)")
    reward = [turn["reward"] for turn in t.turns if turn["role"] == "assistant"]
    expected = [
        prompt(0, "", 0, observations[0]),
        prompt(1, f"(step: 1, observation: {observations[0]}, action: R, reward: {reward[0]})", 1, observations[1]),
        # history_length 3: the two turns before the current one; the broken reply carries ROLL's tip
        prompt(2, f"(step: 1, observation: {observations[0]}, action: R, reward: {reward[0]}), "
                  f"(step: 2, observation: {observations[1]}, action: xy{tip}, reward: {reward[1]})", 2,
               observations[2]),
        prompt(3, f"(step: 2, observation: {observations[1]}, action: xy{tip}, reward: {reward[1]}), "
                  f"(step: 3, observation: {observations[2]}, action: R, reward: {reward[2]})", 2, observations[3]),
    ]
    assert [user_text(s.prompt_ids) for s in t.steps] == expected
    # the engine got exactly each turn's own prompt: the chat template's rendering of one user message
    assert [calls[0] for calls in engine.prompts] == [s.prompt_ids for s in t.steps]
    assert all(s.prompt_ids == TOKENIZER.encode(first_prompt(TOKENIZER, text), add_special_tokens=False)
               for s, text in zip(t.steps, expected, strict=True))
    # the score is the trajectory's, as in trajectory play (one broken reply: one format penalty)
    assert t.score == pytest.approx(sum(reward) - 0.2)


@pytest.mark.parametrize(("history_length", "shown"), [(None, [0, 0, 0, 0]), (1, [0, 0, 0, 0]), (2, [0, 1, 1, 1]),
                                                       (10, [0, 1, 2, 3])])
def test_history_length_bounds_the_history(history_length: int | None, shown: list[int]) -> None:
    (t,), _ = play_script(step_manager(history_length), SCRIPT)
    counts = [int(user_text(s.prompt_ids).split("the most recent ", 1)[1].split(" ", 1)[0]) for s in t.steps]
    assert counts == shown
    assert [user_text(s.prompt_ids).count("(step: ") for s in t.steps] == shown


def test_step_rows_are_one_per_reply() -> None:
    trajectories, _ = play_script(step_manager(2, episodes=2), [[("R", True), ("xy", True)]] * 4)
    assert step_rows(trajectories) == [(i, k) for i in range(2) for k in range(4)]
    batch = step_batch(trajectories, TOKENIZER.pad_token_id)
    assert batch["input_ids"].shape[0] == 8
    assert batch["response_mask"].sum(-1).tolist() == [2.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0]  # reply + EOS


def test_trajectory_managers_keep_one_conversation() -> None:
    (t,), engine = play_script(step_manager(3, cls=None), SCRIPT)
    assert t.steps == [] and t.history_length is None
    assert engine.prompts[1][0][: len(engine.prompts[0][0])] == engine.prompts[0][0]  # a continuation


def test_mixed_managers_in_one_batch_are_refused() -> None:
    lake = CustomEnvConfig(env_type="frozen_lake", env_manager_cls=STEP_CLS)
    other = CustomEnvConfig(env_type="frozen_lake")
    config = EnvManagerConfig(env_groups=2, group_size=1, tags=["A", "B"])
    with pytest.raises(ValueError, match="mix step-wise and trajectory env managers"):
        EnvManager("train_env_manager", config, {"A": lake, "B": other}, batch_size=2, seed=0)


@pytest.mark.parametrize("estimator", ["grpo", "gigpo"])
def test_a_step_wise_run_trains_on_step_rows(tmp_path: Path, estimator: str) -> None:
    from trainer.config import load_config

    cfg = load_config(AGENTIC, [f"adv_estimator={estimator}",
        f"output_dir={tmp_path}", "track_with=none", "render_save_dir=null", "max_steps=2", "eval_steps=0",
        "save_steps=100", "rollout_batch_size=8", "train_env_manager.env_groups=2", "train_env_manager.n_groups=[2]",
        "actor_train.training_args.per_device_train_batch_size=4", "prompt_length=512",
        f"+custom_envs.FrozenLake.env_manager_cls={STEP_CLS}", "+custom_envs.FrozenLake.history_length=3",
    ])
    assert run_local(cfg) == 0
    metrics = metrics_by_step(tmp_path)
    for m in metrics.values():
        # every reply is a row, padded by copies to whole optimizer steps of 4 rows
        rows = m["env/step_rows"]
        assert rows % 4 == 0 and 8 * m["env/num_turns"] <= rows < 8 * m["env/num_turns"] + 4
        assert ("system/state_batch_size/mean" in m) == (estimator == "gigpo")  # step values per row


def test_validation_takes_step_managers_and_refuses_unbuilt_ones() -> None:
    from trainer.config import load_raw, validate_config

    def errors(cls: str) -> list[str]:
        raw = load_raw(AGENTIC, ["+custom_envs.FrozenLake.history_length=3",
                                 f"+custom_envs.FrozenLake.env_manager_cls={cls}"])
        return [str(i) for i in validate_config(raw).errors]

    assert errors(STEP_CLS) == []
    native = "roll.pipeline.agentic.env_manager.agent_native_env_manager.AgentNativeStepEnvManager"
    assert errors(native) == [f"custom_envs.FrozenLake.env_type: 'frozen_lake' does not keep its own conversation, "
                              f"which the agent-native step env manager ({native}) renders each turn; its "
                              "environments: sokoban_native_env; the trajectory manager plays frozen_lake: override "
                              "~custom_envs.FrozenLake.env_manager_cls"]


def test_rolls_tool_wrapper_is_checked_and_names_the_override_that_removes_it() -> None:
    from trainer.config import load_raw, validate_config

    where = "custom_envs.FrozenLake.tool_wrapper"
    raw = load_raw(AGENTIC, [f"+{where}={{wrapper_args: {{max_tool_uses: 5}}}}"])
    [error] = [str(i) for i in validate_config(raw).errors]
    assert error.startswith(f"{where}.tool_configs: None;") and error.endswith(f"override ~{where}")
    code = "{wrapper_args: {max_tool_uses: 5}, tool_configs: [{tool_id: python_code, tool_args: {timeout: 5}}]}"
    assert validate_config(load_raw(AGENTIC, [f"+{where}={code}"])).errors == []
