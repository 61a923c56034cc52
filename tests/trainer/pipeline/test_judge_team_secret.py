"""A run whose judge key is a team secret (issue 41, decision 0045): the config says `${secret:JUDGE_KEY}`, the
platform passes the value in RUN_SECRETS_VAR, and the judge server receives it; the run directory (events,
logs, the fingerprint) holds only the reference."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.trainer.pipeline.conftest import DEMO_GRPO, FAST, events, run_local
from tests.trainer.rewards.judge_server import judge_server
from trainer.config import load_config
from trainer.config import secrets as secrets_module
from trainer.config.secrets import RUN_SECRETS_VAR

KEY = "sk-team-secret-7d2e41"
JUDGE_CLS = "roll.pipeline.rlvr.rewards.llm_judge_reward_worker.LLMJudgeRewardWorker"


def test_the_judge_receives_the_team_secret_and_the_run_keeps_the_reference(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RUN_SECRETS_VAR, json.dumps({"JUDGE_KEY": KEY}))
    monkeypatch.setattr(secrets_module, "_given", None)
    with judge_server() as server:
        cfg = load_config(DEMO_GRPO, [*FAST, f"output_dir={tmp_path}", "max_steps=1", "eval_steps=0",
                                      "save_steps=100", "~rewards.synthetic", f"+rewards.judge.worker_cls={JUDGE_CLS}",
                                      "+rewards.judge.judge_model_type=api", f"+rewards.judge.judge_api_url={server.base_url}",
                                      "+rewards.judge.judge_model_name=judge-7b",
                                      "+rewards.judge.judge_api_key=${secret:JUDGE_KEY}"], env={})
        assert cfg.rewards["judge"].judge_api_key == "${secret:JUDGE_KEY}"
        assert run_local(cfg) == 0
    assert server.received and {r["authorization"] for r in server.received} == {f"Bearer {KEY}"}
    assert RUN_SECRETS_VAR not in os.environ  # read once, then gone from what child processes inherit
    [fingerprint] = events(tmp_path, "fingerprint")
    assert fingerprint["data"]["config_hash"]
    leaked = [str(p) for p in tmp_path.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert leaked == []
