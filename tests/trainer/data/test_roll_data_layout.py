"""ROLL's RLVR data layout read as it is (decision 0044): rows with a `messages` chat, the reference in
`ground_truth` and the domain in `tag`, as ROLL's data files hold them, reach the IFEval and CrossThinkQA
rewards through the ROLL worker classes with no column named in the config.

How it fails: drop the loader's ground_truth / tag / messages fallbacks (the answer or tag is None, or the
prompt column is missing), or route by another field than the tag.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from trainer.config import validate_config
from trainer.data.datasets import load_prompt_dataset
from trainer.roles.reward import build_reward_fn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "config"))
from config_testing import changed

IFEVAL = json.dumps({"func_name": "validate_lowercase", "N": None, "keyword_list": None})
ROWS = [
    {"messages": [{"role": "user", "content": "Describe rain in lowercase."}], "ground_truth": IFEVAL, "tag": "ifeval"},
    {"messages": json.dumps([{"role": "user", "content": "Which is cheaper? (A) x (B) y"}]), "ground_truth": "B",
     "tag": "crossthinkqa"},
]


def test_roll_rows_load_and_score_with_the_roll_workers(tmp_path: Path, tiny_tokenizer: Any) -> None:
    path = tmp_path / "roll.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    samples = load_prompt_dataset({"file_name": str(path)}, tiny_tokenizer)
    assert [s["answer"] for s in samples] == [IFEVAL, "B"]
    assert [s["tag"] for s in samples] == ["ifeval", "crossthinkqa"]
    assert "Describe rain in lowercase." in samples[0]["prompt"] and "<|im_start|>user" in samples[0]["prompt"]

    rewards = {
        "ifeval": {"worker_cls": "roll.pipeline.rlvr.rewards.ifeval_rule_reward_worker.GeneralRuleRewardWorker",
                   "reward_type": "soft", "tag_included": ["ifeval"]},
        "crossthinkqa": {
            "worker_cls": "roll.pipeline.rlvr.rewards.crossthinkqa_rule_reward_worker.CrossThinkQARuleRewardWorker",
            "reward_type": "soft", "tag_included": ["crossthinkqa"]},
    }
    result = validate_config(changed({"rewards": rewards}))
    assert not result.errors, result.errors
    score = build_reward_fn(result.config)
    prompts = [s["prompt"] for s in samples]
    assert score(prompts, ["soft rain falls", "the answer is B"], samples) == [1.0, 0.5]
    assert score(prompts, ["Soft rain", r"\boxed{A}"], samples) == [0.0, -0.5]


def test_named_columns_still_win(tmp_path: Path, tiny_tokenizer: Any) -> None:
    path = tmp_path / "both.jsonl"
    path.write_text(json.dumps({"prompt": "p", "messages": [{"role": "user", "content": "m"}], "answer": "a",
                                "ground_truth": "g", "task": "t", "tag": "x"}) + "\n")
    [sample] = load_prompt_dataset({"file_name": str(path), "template": "none"}, tiny_tokenizer)
    assert (sample["prompt"], sample["answer"], sample["tag"]) == ("p", "a", "t")
    [sample] = load_prompt_dataset({"file_name": str(path), "template": "none", "response": "ground_truth",
                                    "messages": "messages", "tag": "tag"}, tiny_tokenizer)
    assert (sample["prompt"], sample["answer"], sample["tag"]) == ("m", "g", "x")
