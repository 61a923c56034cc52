"""Every variant of examples/demo_grpo_cpu.yaml is refused by `validate --preflight` with its reason, or runs 2 steps
in a test (issue 31).

A variant changes one axis of the demo to one value the schema lists: actor_infer's engine, actor_train's strategy,
a reference role's strategy (the demo has none: the variant adds one and the KL loss that reads it), the tracker.
VARIANTS maps each to where it runs when preflight accepts it: HERE (2 steps in this module), or the existing test
that already runs the demo that way (not run twice). What preflight accepts depends on the machine (Megatron needs
CUDA, a tracker its package), so the mapping is checked against this machine's verdict at test time.
"""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest

from tests.trainer.pipeline.conftest import DEMO_GRPO, REPO_ROOT, events, load_cfg, metrics_by_step, run_local
from trainer.config import PipelineConfig, validate_config
from trainer.config.preflight import preflight
from trainer.config.registries import ROLE_STRATEGIES

HERE = "here"
TWO_STEPS = ("max_steps=2", "eval_steps=0", "save_steps=2")
WITH_REFERENCE = ("use_kl_loss=true", "kl_loss_coef=0.01", "+reference.model_args.model_name_or_path=${pretrain}",
                  "+reference.device_mapping=[0]")


def reference(name: str) -> tuple[str, ...]:
    return (f"+reference.strategy_args.strategy_name={name}", *WITH_REFERENCE)


# variant -> (overrides on the demo, where it runs when preflight accepts it: HERE, a test "file::name", or None for
# a value this build never runs, which preflight must refuse)
VARIANTS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "actor_infer=hf_infer": ((), HERE),  # the demo as shipped: torch_train, hf_infer, stdout, no reference
    "actor_infer=vllm": (("actor_infer.strategy_args.strategy_name=vllm",), None),  # head_dim 16: refused on CPU
    "actor_infer=vllm (tiny32)": (("actor_infer.strategy_args.strategy_name=vllm", "pretrain=tiny://tiny32?seed=0"),
                                  "test_vllm_pipeline.py::test_vllm_run_resumes_exactly_and_tracks_the_logprob_mismatch"),
    "actor_infer=sglang": (("actor_infer.strategy_args.strategy_name=sglang",), None),
    "actor_train=torch_train": ((), HERE),
    "actor_train=fsdp2_train": (("actor_train.strategy_args.strategy_name=fsdp2_train",),
                                "test_fsdp2_actor.py::test_two_fsdp2_workers_match_one_worker_at_step_1"),
    "actor_train=deepspeed_train": (("actor_train.strategy_args.strategy_name=deepspeed_train",),
                                    "test_deepspeed_pipeline.py::test_shortened_grpo_demo_learns_through_deepspeed_train"),
    "actor_train=megatron_train": (("actor_train.strategy_args.strategy_name=megatron_train",),
                                   "test_megatron_pipeline.py::test_the_first_step_on_megatron_equals_torch_train"),
    "reference=none": ((), HERE),
    "reference=hf_infer": (reference("hf_infer"), HERE),
    "reference=torch_train": (reference("torch_train"), HERE),
    "reference=fsdp2_infer": (reference("fsdp2_infer"), HERE),
    "reference=deepspeed_infer": (reference("deepspeed_infer"),
                                  "test_deepspeed_pipeline.py::test_deepspeed_run_resumed_at_step_2_matches_uninterrupted_run"),
    "reference=megatron_infer": (reference("megatron_infer"),
                                 "test_megatron_pipeline.py::test_the_first_step_on_megatron_equals_torch_train"),
    "track_with=stdout": (("track_with=stdout",), HERE),
    "track_with=none": (("track_with=none",), HERE),
    "track_with=tensorboard": (("track_with=tensorboard",), HERE),
    "track_with=wandb": (("track_with=wandb",), None),  # logs to a server: not run in tests
    "track_with=swanlab": (("track_with=swanlab",), None),
}


def verdict(tmp_path: Path, overrides: tuple[str, ...]) -> tuple[PipelineConfig | None, list[str]]:
    """What `validate --preflight` says about the variant: the config, and every refusal (empty: accepted)."""
    result = validate_config(DEMO_GRPO, [f"output_dir={tmp_path}", f"logging_dir={tmp_path}/logs", *overrides])
    if not result.ok:
        return None, [str(i) for i in result.errors]
    return result.config, [str(i) for i in preflight(result.config, backend="local")]


def test_every_value_the_schema_lists_is_a_variant() -> None:
    tracker = typing.get_args(PipelineConfig.model_fields["track_with"].annotation)
    wanted = {f"actor_infer={n}" for n in ROLE_STRATEGIES["actor_infer"]} \
        | {f"actor_train={n}" for n in ROLE_STRATEGIES["actor_train"]} \
        | {f"reference={n}" for n in (*ROLE_STRATEGIES["reference"], "none")} | {f"track_with={n}" for n in tracker}
    assert wanted <= {name.split(" ")[0] for name in VARIANTS}, wanted - set(VARIANTS)


@pytest.mark.parametrize("name", [n for n, (_, runs) in VARIANTS.items() if runs not in (HERE, None)])
def test_a_variant_mapped_to_another_test_names_a_test_that_exists(name: str) -> None:
    module, function = VARIANTS[name][1].split("::")  # type: ignore[union-attr]
    tree = ast.parse((REPO_ROOT / "tests" / "trainer" / "pipeline" / module).read_text(encoding="utf-8"))
    assert function in {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}, VARIANTS[name]


@pytest.mark.parametrize("name", list(VARIANTS))
def test_a_variant_is_refused_with_its_reason_or_runs_in_a_test(name: str, tmp_path: Path) -> None:
    overrides, runs = VARIANTS[name]
    _, refusals = verdict(tmp_path, overrides)
    if refusals:
        field = overrides[0].split("=")[0].lstrip("+").rsplit(".strategy_args", 1)[0] if overrides else ""
        assert any(r.startswith(field) for r in refusals), (name, refusals)  # the reason names the variant's field
        return
    assert runs is not None, f"{name}: preflight accepts it here, but no test runs it"


@pytest.mark.parametrize("name", [n for n, (_, runs) in VARIANTS.items() if runs == HERE])
def test_a_variant_runs_two_steps(name: str, tmp_path: Path) -> None:
    overrides = VARIANTS[name][0]
    _, refusals = verdict(tmp_path, overrides)
    if refusals:
        pytest.skip(f"preflight refuses it here: {refusals}")
    cfg = load_cfg(tmp_path, *TWO_STEPS, f"logging_dir={tmp_path}/logs", *overrides)
    assert run_local(cfg) == 0
    metrics = metrics_by_step(tmp_path)
    assert sorted(metrics) == [1, 2] and all("actor/pg_loss" in m for m in metrics.values())
    if cfg.reference is not None:
        assert all(m["actor/kl_loss"] != 0 or step == 1 for step, m in metrics.items())
    if cfg.track_with == "tensorboard":
        assert list(tmp_path.rglob("events.out.tfevents.*")), "tensorboard wrote no event file"
    assert events(tmp_path, "status")[-1]["data"]["state"] == "succeeded"
