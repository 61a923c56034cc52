"""LearnerSpec (trainer.pipeline.learner): the learner's narrow view of the config (issue 42). It carries the
knobs the learner reads and no others, and nothing else in learner.py reads the config."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from tests.trainer.pipeline.conftest import load_cfg
from trainer.algorithms.train_infer import MismatchFilter, MismatchWeight
from trainer.pipeline import learner
from trainer.pipeline.learner import LearnerSpec
from trainer.pipeline.rewarding import RewardSpec

SOURCE = Path(learner.__file__)
FIELDS = {f.name for f in dataclasses.fields(LearnerSpec)}
REFERENCE = ("reference.model_args.model_name_or_path=${pretrain}", "reference.device_mapping=[0]")  # KL needs one


def spec(tmp_path: Path, *overrides: str) -> LearnerSpec:
    return LearnerSpec.from_config(load_cfg(tmp_path, *overrides))


def test_the_spec_reads_each_knob_from_the_config(tmp_path: Path) -> None:
    got = spec(tmp_path, "adv_estimator=reinforce_plus_plus", "gamma=0.9", "lambd=0.8",
               "norm_adv_by_std_in_grpo=false", "add_token_level_kl=true", "kl_penalty=low_var_kl",
               "init_kl_coef=0.05", "kl_ctrl_type=adaptive", "target_kl=0.1", "kl_horizon=500",
               "use_rollout_log_probs=true", "critic_warmup=3", "off_policy_correction=mask", "off_policy_cap=4.0",
               "stale_samples=downweight", "stale_sample_decay=0.5", *REFERENCE)
    assert dataclasses.asdict(got) | {"rewards": None, "mismatch_weight": None, "mismatch_filters": ()} == {
        "rewards": None, "adv_estimator": "reinforce_plus_plus", "gamma": 0.9, "lambd": 0.8,
        "norm_adv_by_std_in_grpo": False, "add_token_level_kl": True, "kl_penalty": "low_var_kl",
        "init_kl_coef": 0.05, "target_kl": 0.1, "kl_horizon": 500, "kl_ctrl_type": "adaptive",
        "use_rollout_log_probs": True, "critic_warmup": 3, "off_policy_correction": "mask", "off_policy_cap": 4.0,
        "stale_samples": "downweight", "stale_sample_decay": 0.5, "mismatch_weight": None, "mismatch_filters": (),
        "infer_engine": "hf_infer",
    }
    assert got.rewards == RewardSpec.from_config(load_cfg(tmp_path))  # the reward view, built from the same config


def test_the_train_infer_correction_comes_resolved_and_acts_as_the_config_says(tmp_path: Path) -> None:
    on = ("train_infer_correction.is_weight.enabled=true", "train_infer_correction.is_weight.upper_bound=2.0",
          "train_infer_correction.filters=[{enabled: true, ratio_low: 0.9, ratio_high: 1.1}, {enabled: false},"
          " {enabled: true, agg_type: sequence, ratio_enabled: false, diff_enabled: true}]")
    got = spec(tmp_path, *on)
    assert got.mismatch_weight == MismatchWeight("token", 2.0)
    assert got.mismatch_filters == (MismatchFilter("token", (0.9, 1.1), None),
                                    MismatchFilter("sequence", None, (-0.2, 0.2)))
    for overrides in [(), on, ("train_infer_correction.filters=[{enabled: true, ratio_enabled: false}]",)]:
        cfg = load_cfg(tmp_path, *overrides)
        assert LearnerSpec.from_config(cfg).corrects_train_infer == cfg.train_infer_correction.acts(), overrides


@pytest.mark.parametrize(("overrides", "steps", "recomputes"), [
    ((), 1, False),  # one update on fresh rollouts: the current log-probs are the old ones
    ((), 2, True),
    (("use_rollout_log_probs=true",), 2, False),  # the engine's replace them
    (("add_token_level_kl=true", *REFERENCE), 1, True),
    (("train_infer_correction.is_weight.enabled=true",), 1, True),
], ids=["one-update", "two-updates", "engine-log-probs", "kl-in-reward", "train-infer"])
def test_when_the_old_log_probs_are_recomputed(tmp_path: Path, overrides: tuple[str, ...], steps: int,
                                               recomputes: bool) -> None:
    assert spec(tmp_path, *overrides).recomputes_log_probs(steps) is recomputes


def functions(tree: ast.AST) -> dict[str, ast.FunctionDef]:
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            found |= {f"{node.name}.{f.name}": f for f in node.body if isinstance(f, ast.FunctionDef)}
        elif isinstance(node, ast.Module):
            found |= {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}
    return found


def spec_reads(node: ast.AST, *, self_is_spec: bool) -> set[str]:
    """Attribute names read on `spec`, `self.spec` (and on `self` inside LearnerSpec's own methods)."""
    def is_spec(value: ast.expr) -> bool:
        return ((isinstance(value, ast.Name) and (value.id == "spec" or (self_is_spec and value.id == "self")))
                or (isinstance(value, ast.Attribute) and value.attr == "spec"
                    and isinstance(value.value, ast.Name) and value.value.id == "self"))
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and is_spec(n.value)}


def test_the_spec_carries_exactly_what_the_learner_reads() -> None:
    """Every field is read by the learner (no knob carried for nothing), and only `LearnerSpec.from_config`
    sees the config: no other function of learner.py names a `cfg` or takes a PipelineConfig."""
    tree = ast.parse(SOURCE.read_text())
    funcs = functions(tree)
    reads: set[str] = set()
    for name, func in funcs.items():
        if name != "LearnerSpec.from_config":
            reads |= spec_reads(func, self_is_spec=name.startswith("LearnerSpec."))
    assert FIELDS - reads == set()
    config_readers = sorted(
        name for name, func in funcs.items()
        if any(isinstance(n, ast.Name) and n.id in ("cfg", "config", "PipelineConfig") for n in ast.walk(func))
        or "PipelineConfig" in ast.unparse(func.args))
    assert config_readers == ["LearnerSpec.from_config"]


def test_the_check_would_see_a_config_read_and_an_unread_field() -> None:
    leak = ast.parse("def staleness_terms(cfg, schedule):\n    return cfg.stale_samples\n")
    assert any(isinstance(n, ast.Name) and n.id == "cfg" for n in ast.walk(leak))
    assert spec_reads(ast.parse("def f(spec):\n    return spec.gamma\n"), self_is_spec=False) == {"gamma"}
