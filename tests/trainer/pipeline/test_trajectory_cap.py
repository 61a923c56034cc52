"""ROLL's agentic trajectory cap (decision 0055): a ROLL agentic file that sets sequence_length alone caps each
trajectory at sequence_length tokens the way ROLL's TrajEnvManager / StepEnvManager do: each turn samples at most
min(budget, sequence_length - input), the reply that reaches the cap is cut there, and no turn is played once the
input reaches it. Scripted engine, no model."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.config import load_config, validate_config
from trainer.config.schema import CustomEnvConfig, EnvManagerConfig, PipelineConfig
from trainer.config.topology import Lengths, lengths
from trainer.envs.manager import EnvManager
from trainer.models.tiny import build_tokenizer
from trainer.pipeline.trajectory import PlaySetup, Trajectory, chat_format, play
from trainer.rollout.base import Generation, SamplingParams

TOKENIZER = build_tokenizer()
EOS = TOKENIZER.convert_tokens_to_ids("<|im_end|>")
STEP_CLS = "roll.pipeline.agentic.env_manager.step_env_manager.StepEnvManager"
ROLL = Path(__file__).parents[2] / "fixtures" / "foreign_corpus" / "roll"
GIGPO = (
    "qwen2.5-0.5B-agentic/agent_val_frozen_lake_gigpo.yaml",
    "qwen2.5-0.5B-agentic/agentic_val_sokoban_gigpo.yaml",
)


class BudgetEngine:
    """Answers every row "L" + EOS, cut to the call's max_new_tokens (as an engine stops at its budget);
    records each call's budget."""

    def __init__(self) -> None:
        self.budgets: list[int] = []

    def __call__(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        self.budgets.append(params.max_new_tokens)
        ids = [*TOKENIZER.encode("L", add_special_tokens=False), EOS][: params.max_new_tokens]
        stop = "eos" if ids[-1] == EOS else "length"
        return [Generation(i, 0, ids, [-0.5] * len(ids), stop) for i in range(len(prompts))]


def envs(*, step_wise: bool = False, instruction: str = "", history_length: int | None = None) -> EnvManager:
    env = CustomEnvConfig(
        env_type="frozen_lake",
        max_steps=6,
        max_tokens_per_step=6,
        env_instruction=instruction,
        history_length=history_length,
        env_config={"size": 3, "action_format": "plain"},
        env_manager_cls=STEP_CLS if step_wise else None,
    )
    config = EnvManagerConfig(env_groups=1, group_size=1, tags=["Lake"])
    return EnvManager("train_env_manager", config, {"Lake": env}, batch_size=1, seed=0)


def play_capped(manager: EnvManager, cap: int) -> tuple[Trajectory, BudgetEngine]:
    engine = BudgetEngine()
    setup = PlaySetup(engine, TOKENIZER, chat_format(TOKENIZER), cap - 1, cap - 1, sequence_length=cap)
    (t,) = play(
        setup, manager, manager.episodes(1), SamplingParams(max_new_tokens=8), lambda turn, budget: turn
    )
    return t, engine


def uncapped(manager: EnvManager) -> Trajectory:
    """The same episode under a cap it never reaches: its first prompt and observation turns' token counts."""
    setup = PlaySetup(BudgetEngine(), TOKENIZER, chat_format(TOKENIZER), 4096, 4096, sequence_length=4096)
    (t,) = play(
        setup, manager, manager.episodes(1), SamplingParams(max_new_tokens=8), lambda turn, budget: turn
    )
    return t


def first_prompt_tokens(manager: EnvManager) -> int:
    t = uncapped(manager)
    return len(t.steps[0].prompt_ids) if t.steps else len(t.prompt_ids)


def test_a_conversation_is_cut_at_sequence_length_as_roll_cuts_it() -> None:
    manager = envs()
    free = uncapped(manager)
    prompt, between = len(free.prompt_ids), free.turns[2]["tokens"]  # first prompt; observation after reply 1
    cap = prompt + 2 + between + 1  # room for one full reply (2 tokens), its observation and one more token
    t, engine = play_capped(manager, cap)
    # turn 1: the whole 6-token budget; turn 2: the one token left, cut there (no EOS) and still stepped
    assert engine.budgets == [6, 1]
    assert [turn["tokens"] for turn in t.turns if turn["role"] == "assistant"] == [2, 1]
    assert (t.done_reason, t.replies) == ("max_length", 2)
    assert (
        len(t.prompt_ids) + len(t.response_ids) == cap
    )  # the row fills the cap exactly, the last observation out
    assert sum(t.loss_mask) == 3


def test_a_step_row_is_capped_alone_and_the_episode_ends_once_a_step_prompt_reaches_the_cap() -> None:
    # no history shown: every step prompt is as long as the first, each step samples the one token the cap leaves
    # (its reply cut there, stepped anyway) and all max_steps steps are played: the cap bounds a row, not the sum
    manager = envs(step_wise=True)
    prompt = first_prompt_tokens(manager)
    t, engine = play_capped(manager, prompt + 1)
    assert engine.budgets == [1] * 6 and t.done_reason == "max_steps"
    assert [len(s.prompt_ids) + len(s.response_ids) for s in t.steps] == [prompt + 1] * 6
    # with history the second step prompt outgrows the cap: ROLL's make_decision returns MAX_LENGTH, one step kept
    t, engine = play_capped(envs(step_wise=True, history_length=3), prompt + 4)
    assert engine.budgets == [4] and (t.done_reason, len(t.steps)) == ("max_length", 1)
    assert len(t.steps[0].response_ids) == 2  # "L" + EOS fit in the 4 tokens left


def test_a_first_prompt_at_the_cap_names_sequence_length_and_its_override() -> None:
    manager = envs()
    prompt = first_prompt_tokens(manager)
    with pytest.raises(
        ValueError,
        match=rf"^sequence_length: the first prompt of Lake has {prompt} tokens.*"
        rf"override sequence_length={prompt + 6} ",
    ):
        play_capped(manager, prompt)


@pytest.mark.parametrize("name", GIGPO)
def test_a_roll_agentic_file_with_sequence_length_alone_caps_trajectories(name: str) -> None:
    result = validate_config(ROLL / name)
    assert result.ok, [str(i) for i in result.errors]
    assert lengths(result.config) == Lengths(prompt=1023, response=1023, total=1024, trajectory_cap=1024)
    assert not [w for w in result.warnings if w.path == "sequence_length"]  # the knob acts


def test_the_cap_needs_the_agentic_pipeline_and_both_lengths_unset() -> None:
    split = load_config(ROLL / GIGPO[0], ["prompt_length=1024", "sequence_length=4096"])
    assert lengths(split) == Lengths(prompt=1024, response=1024, total=2048, trajectory_cap=None)
    split = validate_config(ROLL / GIGPO[0], ["prompt_length=1024"])
    assert [str(i) for i in split.errors] == [
        "sequence_length: 1024 is shorter than prompt_length + response_length"
        " = 1024 + 1024 = 2048; override sequence_length=2048"
    ]
    rlvr = PipelineConfig.model_validate({"sequence_length": 4096})  # no train_env_manager: the RLVR pipeline
    assert lengths(rlvr) == Lengths(prompt=1024, response=1024, total=2048, trajectory_cap=None)


def test_the_agentic_pipeline_on_the_tiny_model_caps_every_trajectory(tmp_path: Path) -> None:
    """examples/agentic_grid_cpu.yaml with its lengths removed and sequence_length=100: one real CPU step; every
    trajectory holds at most 100 tokens and those the cap ended stopped short of max_steps (6 replies)."""
    from tests.trainer.pipeline.conftest import REPO_ROOT, events, run_local

    overrides = [
        "~prompt_length",
        "~response_length",
        "sequence_length=100",
        f"output_dir={tmp_path}",
        f"logging_dir={tmp_path}/logs",
        "render_save_dir=null",
        "track_with=none",
        "max_steps=1",
        "eval_steps=0",
        "save_steps=1000",
        "rollout_batch_size=8",
        "train_env_manager.env_groups=2",
        "train_env_manager.n_groups=[2]",
        "actor_train.training_args.per_device_train_batch_size=8",
        "actor_train.training_args.gradient_accumulation_steps=1",
    ]
    cfg = load_config(REPO_ROOT / "examples" / "agentic_grid_cpu.yaml", overrides)
    assert lengths(cfg).trajectory_cap == 100
    assert run_local(cfg) == 0
    samples = [s for e in events(tmp_path, "rollouts") for s in e["data"]["samples"]]
    assert len(samples) == 8
    assert all(s["prompt_length"] + s["response_length"] <= 100 for s in samples)
    capped = [s for s in samples if s["done_reason"] == "max_length"]
    assert capped and all(s["num_turns"] < 6 for s in capped)
