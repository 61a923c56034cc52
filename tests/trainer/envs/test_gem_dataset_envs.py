"""ROLL's GEM dataset environments (roll_math, roll_qa: trainer.envs.gem_data) on a tiny local dataset, ROLL's
tool_wrapper with its python_code tool run in the bubblewrap sandbox (trainer.envs.gem_tools), and the validation
of ROLL's four GEM math / QA files.

Expected values are ROLL's, worked out by hand from its code: the row a seed plays (random.seed(seed);
random.randint(0, n - 1), on the rows as loaded for math and on datasets' shuffle(seed=0) order for QA), reward
1.0 for a right answer and 0 for a wrong or missing one, every episode one reply long. How it fails: another row,
another reward or parse, a tool that runs code outside the sandbox, an unreachable dataset accepted at build time.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

pytest.importorskip("gem")

from tests.trainer.importers.test_corpus_smoke import CPU_SIZED, smoke, tiny_models  # noqa: F401 (a fixture)
from trainer.config import validate_config
from trainer.config.bubblewrap import bubblewrap_problem
from trainer.config.schema import CustomEnvConfig, EnvManagerConfig
from trainer.envs.manager import EnvManager

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "foreign_corpus" / "roll" / "qwen3_agentic_gem"
MATH = [
    {"prompt": "What is 1/2 + 1/4?", "solution": "\\frac{3}{4}"},
    {"prompt": "What is 6 * 7?", "solution": "42"},
    {"prompt": "Solve x + 1 = 3.", "solution": "2"},
]
QA = [
    {"problem": "Which city is the Eiffel Tower in?", "answer": "Paris"},
    {"problem": "Who wrote Hamlet?", "answer": ["William Shakespeare", "Shakespeare"]},
    {"problem": "What colour is the sky?", "answer": "blue"},
]
needs_bwrap = pytest.mark.skipif(
    bubblewrap_problem() is not None, reason=f"no bubblewrap: {bubblewrap_problem()}"
)


def write(tmp_path: Path, rows: list[dict]) -> str:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def manager(env_type: str, env_config: dict, tool_wrapper: dict | None = None) -> EnvManager:
    spec = CustomEnvConfig(
        env_type=env_type,
        max_steps=3,
        max_tokens_per_step=16,
        env_config=env_config,
        tool_wrapper=tool_wrapper,
    )
    return EnvManager(
        "train_env_manager",
        EnvManagerConfig(env_groups=1, group_size=1, tags=["G"]),
        {"G": spec},
        batch_size=1,
        seed=0,
    )


def math_env(tmp_path: Path, tool_wrapper: dict | None = None):
    config = {
        "dataset_name": write(tmp_path, MATH),
        "question_key": "prompt",
        "answer_key": "solution",
        "max_steps": 10,
    }  # ROLL's file sets max_steps, which its MathEnv ignores
    return manager("roll_math", config, tool_wrapper).make_env("G")


def test_roll_math_plays_the_seeds_row_and_scores_it_with_math_verify(tmp_path: Path) -> None:
    env = math_env(tmp_path)
    for seed in range(6):
        random.seed(seed)  # ROLL's GlobalDataset: all_seed(seed), then random.randint over the rows as loaded
        assert env.reset(seed) == MATH[random.randint(0, 2)]["prompt"]
    random.seed()
    env.reset(0)  # row 1 (seed 0 draws index 1): 6 * 7
    right = env.step("6 times 7 is \\boxed{42}")
    assert (right.reward, right.done, right.info["success"], right.info["format_ok"]) == (
        1.0,
        True,
        True,
        True,
    )
    env.reset(0)
    assert env.step("\\boxed{41}")[1:3] == (0.0, True)
    env.reset(0)
    missing = env.step("42")  # no \boxed{}: ROLL's action_is_valid False, reward 0
    assert (missing.reward, missing.done, missing.info["format_ok"]) == (0.0, True, False)
    env.reset(1)  # seed 1 draws index 0: 3/4, which math_verify equates with 0.75
    assert env.step("\\boxed{0.75}").reward == 1.0


def test_roll_qa_wraps_the_question_in_gems_prompt_and_scores_exact_match(tmp_path: Path) -> None:
    config = {
        "dataset_name": write(tmp_path, QA),
        "split": "train",
        "question_key": "problem",
        "answer_key": "answer",
        "max_steps": 10,
        "load_from_cache_file": True,
    }
    env = manager("roll_qa", config).make_env("G")
    # datasets' shuffle(seed=0) of 3 rows is numpy default_rng(0).permutation(3) = [2, 0, 1]; seed 0 draws 1: row 0
    question = env.reset(0)
    assert question.startswith("For any question, always reason through your thought process using:\n")
    assert question.endswith("Question: Which city is the Eiffel Tower in?\n")
    assert env.step("<think>France</think><answer> paris. </answer>").reward == 1.0  # SQuAD normalisation
    env.reset(0)
    assert env.step("<answer>Lyon</answer>").reward == 0.0
    env.reset(0)
    untagged = env.step("Paris")
    assert (untagged.reward, untagged.info["format_ok"]) == (0.0, False)
    assert env.reset(1).endswith("Question: What colour is the sky?\n")  # seed 1 draws position 0: row 2
    boxed = manager("roll_qa", {**config, "extract_boxed": True}).make_env("G")
    boxed.reset(0)
    assert boxed.step("\\boxed{Paris}").reward == 1.0


def test_an_unreachable_dataset_fails_when_built_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError,
        match=r"^custom_envs\.G\.env_config\.dataset_name: 'axon-rl/HotpotQA' is not a "
        r"local path.*set env_config\.dataset_name to a local \.jsonl",
    ):
        manager("roll_qa", {"dataset_name": "axon-rl/HotpotQA"})
    with pytest.raises(
        ValueError, match=r"^custom_envs\.G\.env_config\.question_key: 'problem' is not a column"
    ):
        manager("roll_math", {"dataset_name": write(tmp_path, MATH)})


@needs_bwrap
def test_python_code_tool_runs_in_the_sandbox_with_rolls_rewards(tmp_path: Path) -> None:
    wrapper = {
        "wrapper_args": {"tool_reward": 0.05, "tool_success_reward": 0.1, "max_tool_uses": 2},
        "tool_configs": [
            {
                "tool_id": "python_code",
                "tool_args": {"timeout": 5, "sandbox_type": "none", "keep_error_last_line": False},
            }
        ],
    }
    env = math_env(tmp_path, wrapper)
    first = env.reset(0)
    assert first.startswith("What is 6 * 7?\nInitially, when solving a question")  # the tool's instruction
    ran = env.step("Let me compute. <code>print(6 * 7)</code> and more")
    assert (
        ran.observation == "Code execution result: 42\n\n" and not ran.done
    )  # stdout "42\n", then ROLL's "\n"
    assert ran.reward == pytest.approx(0.15) and ran.info["tool_use_counter"] == 1
    # the checkout, the host's files and the network are not in the sandbox (model code never runs outside it)
    probe = f"import os, socket\nprint(os.path.exists({str(tmp_path)!r}), os.path.exists('/etc/passwd'))\n"
    probe += "try:\n    socket.create_connection(('127.0.0.1', 22), timeout=1)\nexcept OSError:\n    print('no net')\n"
    walled = env.step(f"```python\n{probe}```")
    assert walled.observation.startswith("Code execution result: False False\nno net")
    assert walled.observation.endswith(
        "Reached the maximum number of tool use. Please output final answer directly."
    )
    after = env.step("<code>print(1)</code> so \\boxed{42}")  # the uses are spent: the environment grades it
    assert (after.reward, after.done) == (1.0, True)
    env.reset(0)
    failed = env.step("<code>raise SystemExit(3)</code>")  # no output, non-zero exit: a tool error
    assert failed.reward == pytest.approx(0.05) and failed.info["tool_success_counter"] == 0


def test_python_code_never_runs_without_bubblewrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import trainer.config.bubblewrap as bubblewrap

    monkeypatch.setattr(bubblewrap, "bubblewrap_problem", lambda: "bwrap is not installed (no bwrap on PATH)")
    wrapper = {"tool_configs": [{"tool_id": "python_code", "tool_args": {"sandbox_type": "none"}}]}
    with pytest.raises(
        ValueError,
        match=r"^custom_envs\.G\.tool_wrapper: the python_code tool runs model code only "
        r"in the bubblewrap sandbox.*override ~custom_envs\.G\.tool_wrapper$",
    ):
        math_env(tmp_path, wrapper)


def test_rolls_four_gem_files_validate_and_the_search_tool_names_its_override() -> None:
    for name in ("gem_math_dapo", "gem_math_dapo_python_code", "gem_math_hotpotqa"):
        result = validate_config(CORPUS / f"{name}.yaml", [])
        assert result.errors == [], (name, [str(e) for e in result.errors])
    search = validate_config(CORPUS / "gem_math_hotpotqa_search.yaml", [])
    assert [str(e) for e in search.errors] == [
        "custom_envs.HotpotQA_with_search.tool_wrapper.tool_configs[0].tool_id: 'search' is not built in this "
        "version of PolicyLab: ROLL's search tool posts each query to a retrieval server (tool_args.search_url), an "
        "outside service; built tools: python_code; without it the environment plays without tools: override "
        "~custom_envs.HotpotQA_with_search.tool_wrapper"
    ]
    assert (
        validate_config(
            CORPUS / "gem_math_hotpotqa_search.yaml", ["~custom_envs.HotpotQA_with_search.tool_wrapper"]
        ).errors
        == []
    )


def test_the_smoke_gives_a_dataset_environment_the_smoke_rows_in_its_columns(tmp_path: Path) -> None:
    from trainer.config import load_config
    from trainer.config.smoke import smoke_overrides, smoke_rows

    config = load_config(CORPUS / "gem_math_dapo.yaml", [])
    rows = smoke_rows(config, [{"question": "What is 6 * 7?", "answer": "42"}])
    assert (
        rows[0]["prompt"] == "What is 6 * 7?" and rows[0]["solution"] == "42"
    )  # dapo_17k's question/answer_key
    data = write(tmp_path, rows)
    shrunk = smoke_overrides(config, model="tiny://tiny", data_file=data, output_dir=str(tmp_path / "out"))
    assert f"custom_envs.dapo_17k.env_config.dataset_name={data}" in shrunk
    spec = load_config(CORPUS / "gem_math_dapo.yaml", [o for o in shrunk if o.startswith("custom_envs.")])
    env = EnvManager(
        "train_env_manager",
        EnvManagerConfig(env_groups=1, group_size=1, tags=["dapo_17k"]),
        spec.custom_envs,
        batch_size=1,
        seed=0,
    ).make_env("dapo_17k")
    assert env.reset(0) == "What is 6 * 7?" and env.step("\\boxed{42}").reward == 1.0


def test_the_smokes_dataset_columns_are_the_environments_defaults() -> None:
    import inspect

    from trainer.config.roll_tools import DATASET_COLUMNS
    from trainer.envs.registry import ENVS

    for env_type, columns in DATASET_COLUMNS.items():
        params = inspect.signature(ENVS[env_type]).parameters
        assert (params["question_key"].default, params["answer_key"].default) == columns


def test_rolls_python_code_math_file_trains_two_steps_on_cpu(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The smoke (trainer.config.smoke, CPU-sized as the judge-server file is): DAPO questions from the smoke's data
    file, the python_code tool (a one-line instruction) in the sandbox, two training steps."""
    name = "roll/qwen3_agentic_gem/gem_math_dapo_python_code.yaml"
    smoke(name, tmp_path, request.getfixturevalue("tiny_models"), extra=CPU_SIZED)


def test_the_smoke_gives_a_qa_file_room_for_gems_prompt() -> None:
    from trainer.config import load_config
    from trainer.config.smoke import PROMPT_TOKENS, QA_PROMPT_TOKENS, smoke_prompt_tokens

    qa, math = (load_config(CORPUS / f"{name}.yaml", []) for name in ("gem_math_hotpotqa", "gem_math_dapo"))
    assert (smoke_prompt_tokens(qa), smoke_prompt_tokens(math)) == (
        PROMPT_TOKENS + QA_PROMPT_TOKENS,
        PROMPT_TOKENS,
    )
