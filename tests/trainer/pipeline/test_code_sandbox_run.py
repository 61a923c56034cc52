"""A run whose prompts carry ROLL's code-sandbox columns is scored by the code_sandbox reward (issue 36).

The tiny model writes no working code, so the rows' tests are `text` cases (ROLL's: the response is the
data) that any response passes or none does: the reward of each prompt is then known, 1 or 0, whatever
the model samples, and the logged rollouts show each prompt got its own row's verdict from the sandbox.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.trainer.pipeline.conftest import events, load_cfg, metrics_by_step, run_local

CODE_SANDBOX_CLS = "roll.pipeline.rlvr.rewards.code_sandbox_reward_worker.CodeSandboxRewardWorker"
PASS = [{"assert_code": "assert isinstance({response}, str)"}]
FAIL = [{"assert_code": "assert {response} == 'a response the tiny model never writes: ' * 3"}]


def write_rows(path: Path) -> None:
    rows = [{"question": f"task {i}: write a function", "case_type": "text", "tag": "kodcode",
             "test_cases": json.dumps(PASS if i % 2 == 0 else FAIL), "test_case_function": "None"}
            for i in range(4)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_a_run_scores_its_rollouts_in_the_sandbox(tmp_path: Path) -> None:
    data = tmp_path / "code.jsonl"
    write_rows(data)
    cfg = load_cfg(
        tmp_path,
        "max_steps=2", "eval_steps=0", "save_steps=100", "prompt_length=64", "response_length=4",
        "~actor_train.data_args.synthetic",
        f"actor_train.data_args.file_name={data}",
        "actor_train.data_args.prompt=question",
        "actor_train.data_args.tag=tag",
        "~rewards.synthetic",
        f"+rewards.code.worker_cls={CODE_SANDBOX_CLS}",
        "+rewards.code.tag_included=[kodcode]",
        "+rewards.code.use_local=true",
        "+rewards.code.reward_kwargs.timeout_s=10",
    )
    assert run_local(cfg) == 0
    metrics = metrics_by_step(tmp_path)
    assert sorted(metrics) == [1, 2]
    assert all(m["reward/mean"] == 0.5 for m in metrics.values()), metrics
    samples = [s for e in events(tmp_path, "rollouts") for s in e["data"]["samples"]]
    assert samples
    for s in samples:
        task = int(s["prompt"].split("task ")[1].split(":")[0])
        assert s["reward"] == (1.0 if task % 2 == 0 else 0.0), s
