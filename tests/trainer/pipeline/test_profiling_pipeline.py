"""profiler_timeline in the loop (decision 0037): a tiny PPO run with a reference, profiled at step 2, writes one
trace per rank and compute call of every computing role (the hf_infer engine's generation, actor_train's
log-probs and update, the reference's log-probs, the critic's values and update) into <run>/profiles/step_2/,
each reported by a `profile` event; the same run with the knob off writes none (the disconnected-knob test)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.trainer.pipeline.conftest import REPO_ROOT, events, load_cfg, run_local

PPO_WITH_REFERENCE = ("use_kl_loss=true", "kl_loss_coef=0.01", "max_steps=2", "eval_steps=0", "save_steps=100",
                      "+reference.model_args.model_name_or_path=${pretrain}", "+reference.device_mapping=[0]",
                      "+reference.strategy_args.strategy_name=hf_infer",
                      "critic.training_args.per_device_train_batch_size=4",
                      "critic.training_args.gradient_accumulation_steps=2")
EXPECTED = {  # file name -> what its trace must hold besides the role's own label: our function, or an aten op
    "actor_infer_rank0_generate.pt.trace.json.gz": "generate",
    "actor_train_rank0_compute_log_probs.pt.trace.json.gz": "response_logprobs",
    "actor_train_rank0_train_step.pt.trace.json.gz": "ppo_update",
    "reference_rank0_compute_log_probs.pt.trace.json.gz": "response_logprobs",
    "critic_rank0_compute_values.pt.trace.json.gz": "response_values",
    "critic_rank0_train_step.pt.trace.json.gz": "ppo_update",
}


def run(tmp_path: Path, *overrides: str) -> Path:
    out = tmp_path / "run"
    cfg = load_cfg(out, *PPO_WITH_REFERENCE, *overrides, source=REPO_ROOT / "examples" / "demo_ppo_cpu.yaml")
    assert run_local(cfg) == 0
    return out


def trace_names(path: Path) -> set[str]:
    with gzip.open(path, "rt") as f:
        return {e.get("name", "") for e in json.load(f)["traceEvents"]}


def test_profiler_timeline_writes_a_trace_per_computing_role_of_the_profiled_step(tmp_path: Path) -> None:
    out = run(tmp_path, "profiler_timeline=true", "profiler_steps=[2,2]")
    profiles = out / "profiles"
    assert [p.name for p in profiles.iterdir()] == ["step_2"]  # step 1 is outside the range
    assert sorted(p.name for p in (profiles / "step_2").iterdir()) == sorted(EXPECTED)
    for name, ours in EXPECTED.items():
        names = trace_names(profiles / "step_2" / name)
        role, call = name.split("_rank0_")[0], name.split("_rank0_")[1].split(".")[0]
        assert f"{role}.{call}" in names, name
        assert any(n.endswith(f": {ours}") for n in names), (name, ours)
        assert any(n.startswith("aten::") for n in names), name
    reported = events(out, "profile")
    assert {e["step"] for e in reported} == {2}
    assert sorted(Path(e["data"]["path"]).name for e in reported) == sorted(EXPECTED)
    for e in reported:
        assert e["data"]["size_bytes"] == Path(e["data"]["path"]).stat().st_size
        assert (e["data"]["kind"], e["data"]["format"], e["data"]["rank"]) == ("timeline", "chrome_trace_gz", 0)


def test_with_the_knob_off_nothing_is_profiled(tmp_path: Path) -> None:
    out = run(tmp_path, "profiler_steps=[1,2]")
    assert not (out / "profiles").exists() and events(out, "profile") == []


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
def test_each_rank_of_a_ray_group_writes_its_own_trace(tmp_path: Path) -> None:
    from trainer.pipeline.runner import RunIdentity, run_training

    out = tmp_path / "run"
    cfg = load_cfg(out, "max_steps=1", "eval_steps=0", "save_steps=100", "ppo_epochs=1", "profiler_timeline=true",
                   "profiler_steps=[1,1]", "actor_train.training_args.gradient_accumulation_steps=2",
                   "actor_train.strategy_args.strategy_name=fsdp2_train", "actor_train.device_mapping=[0,1]",
                   "actor_infer.device_mapping=[0,1]")
    assert run_training(cfg, RunIdentity("profiled"), backend="ray", log=lambda line: None) == 0
    names = sorted(p.name for p in (out / "profiles" / "step_1").iterdir())
    assert names == sorted(f"{role}_rank{rank}_{call}.pt.trace.json.gz" for rank in (0, 1)
                           for role, call in (("actor_infer", "generate"), ("actor_train", "train_step")))
    assert sorted((e["data"]["role"], e["data"]["rank"]) for e in events(out, "profile")) == [
        ("actor_infer", 0), ("actor_infer", 1), ("actor_train", 0), ("actor_train", 1)]
