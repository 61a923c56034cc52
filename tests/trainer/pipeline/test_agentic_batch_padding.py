"""An agentic batch that is not a whole number of optimizer steps is padded with copies of its rows, as ROLL's
agentic pipeline does with batch_adjust_mode copy (its default; decision 0062): ROLL's strategies never train a
partial accumulation window (base_worker.py:95 cuts the batch into windows of per_device_train_batch_size ×
gradient_accumulation_steps, protocol.py:807 asserts they divide it; megatron_strategy.py:1289 asserts the window
is whole), so AgenticPipeline.adjust_batch (agentic_pipeline.py:676) makes the batch whole first.

How it fails: the old code refused the config (validation error), and without that check the learner's
mini_batches raises on a rank that holds fewer rows than one optimizer step; copying the wrong rows (not the
real ones first) mislabels the logged samples; a non-copy mode that silently trains unpadded.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.trainer.pipeline.conftest import metrics_by_step, run_local

AGENTIC = Path(__file__).resolve().parents[3] / "examples" / "agentic_grid_cpu.yaml"


def test_padded_rows_are_the_real_rows_then_copies_in_order() -> None:
    from trainer.pipeline.agentic import padded_rows

    assert padded_rows(3, 4) == [0, 1, 2, 0]
    assert padded_rows(4, 4) == [0, 1, 2, 3]
    assert padded_rows(5, 4) == [0, 1, 2, 3, 4, 0, 1, 2]
    # ROLL's 30A3 agentic file: 128 trajectories, optimizer steps of 1 × 16 × 32 = 512 → each row 4 times
    assert Counter(padded_rows(128, 512)) == {i: 4 for i in range(128)}
    with pytest.raises(ValueError, match="0 rows"):
        padded_rows(0, 4)


def issues(*overrides: str) -> tuple[list[str], list[str]]:
    from trainer.config import load_raw, validate_config

    result = validate_config(load_raw(AGENTIC, list(overrides)))
    return [str(i) for i in result.errors], [str(i) for i in result.warnings]


def test_a_short_agentic_batch_is_a_warning_that_says_what_one_step_trains() -> None:
    errors, warnings = issues(
        "rollout_batch_size=8",
        "train_env_manager.env_groups=2",
        "train_env_manager.n_groups=[2]",
        "actor_train.training_args.per_device_train_batch_size=4",
        "actor_train.training_args.gradient_accumulation_steps=3",
    )
    assert errors == []
    [padding] = [w for w in warnings if w.startswith("actor_train.training_args.gradient_accumulation_steps")]
    assert "8 trajectories per step is not a whole number of optimizer steps" in padding
    assert (
        "pads the batch with 4 copies of its rows to 12" in padding
        and "1 optimizer step per rollout" in padding
    )


def test_the_unbuilt_adjust_modes_are_refused_only_where_the_batch_needs_adjusting() -> None:
    short = (
        "rollout_batch_size=8",
        "train_env_manager.env_groups=2",
        "train_env_manager.n_groups=[2]",
        "actor_train.training_args.per_device_train_batch_size=16",
    )
    errors, _ = issues(*short, "+batch_adjust_mode=delete")
    assert len(errors) == 1 and errors[0].startswith("batch_adjust_mode: ")
    assert "'delete', which is not built" in errors[0] and errors[0].endswith(
        "override batch_adjust_mode=copy"
    )
    errors, warnings = issues("+batch_adjust_mode=delete")  # a whole batch: nothing to adjust, nothing to say
    assert errors == [] and not [w for w in warnings if "batch_adjust_mode" in w]


def test_rlvr_keeps_refusing_a_batch_that_is_not_whole() -> None:
    from trainer.config import load_raw, validate_config

    demo = Path(__file__).resolve().parents[3] / "examples" / "demo_grpo_cpu.yaml"
    raw = load_raw(demo, ["actor_train.training_args.gradient_accumulation_steps=1000"])
    errors = [str(i) for i in validate_config(raw).errors]
    assert any("is not a whole number of optimizer steps" in e for e in errors)


def test_a_trajectory_run_trains_its_batch_padded_to_one_optimizer_step(tmp_path: Path) -> None:
    from trainer.config import load_config

    cfg = load_config(
        AGENTIC,
        [
            f"output_dir={tmp_path}",
            "track_with=none",
            "render_save_dir=null",
            "max_steps=2",
            "eval_steps=0",
            "save_steps=100",
            "rollout_batch_size=8",
            "train_env_manager.env_groups=2",
            "train_env_manager.n_groups=[2]",
            "actor_train.training_args.per_device_train_batch_size=12",
            "prompt_length=512",
        ],
    )
    assert run_local(cfg) == 0
    metrics = metrics_by_step(tmp_path)
    assert len(metrics) == 2
    for m in metrics.values():
        assert m["system/batch_add_count"] == 4.0  # 8 trajectories + 4 copies = one step of 12 rows


@pytest.mark.parametrize("mode", ["copy", "delete"])
def test_the_pipeline_pads_only_under_copy_and_stops_a_config_that_skipped_validation(mode: str) -> None:
    """batch_adjust_mode is read where the rows are adjusted: copy pads (3 rows to 4); another mode is not built
    and stops the step instead of training on copies; a whole batch is never adjusted, whatever the mode."""
    from types import SimpleNamespace

    from trainer.pipeline.agentic import AgenticPipeline

    pipeline = SimpleNamespace(rows_multiple=lambda: 4, cfg=SimpleNamespace(batch_adjust_mode=mode))
    assert AgenticPipeline.adjusted_rows(pipeline, 8) == list(range(8))  # type: ignore[arg-type]
    if mode == "copy":
        assert AgenticPipeline.adjusted_rows(pipeline, 3) == [0, 1, 2, 0]  # type: ignore[arg-type]
    else:
        with pytest.raises(
            ValueError, match=r"batch_adjust_mode: 'delete' is not built.*override batch_adjust_mode=copy"
        ):
            AgenticPipeline.adjusted_rows(pipeline, 3)  # type: ignore[arg-type]
