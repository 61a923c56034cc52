"""The reference role honours its strategy: hf_infer and torch_train hold the whole model,
fsdp2_infer and deepspeed_infer shard it, and all give the log-probs of a plain forward."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainer.cluster import LocalWorkerGroup
from trainer.roles.reference import ReferenceWorker

STRATEGIES = {
    "hf_infer": ({}, "PlainForward"),
    "torch_train": ({}, "PlainForward"),
    "fsdp2_infer": ({"reshard_after_forward": True}, "FSDP2Forward"),
    "deepspeed_infer": ({"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0}},
                        "DeepSpeedForward"),
}


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory: pytest.TempPathFactory):
    from tests.trainer.pipeline.conftest import load_cfg
    from trainer.pipeline.run.models import materialise_tiny_models

    return materialise_tiny_models(load_cfg(tmp_path_factory.mktemp("reference")))


def pipeline_batch(vocab: int) -> dict[str, torch.Tensor]:
    """4 rows of 6 prompt + 4 response tokens, left-padded prompts, right-padded responses."""
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, vocab, (4, 10), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :2] = 0
    attention_mask[1, -1] = 0
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids,
            "response_mask": attention_mask[:, 6:].float()}


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_reference_log_probs_equal_the_plain_forward(tiny_config, name: str) -> None:
    from trainer.config.schema import WorkerConfig
    from trainer.models.batch import response_logprobs
    from trainer.models.loading import load_model

    config, kind = STRATEGIES[name]
    cfg = tiny_config.model_copy(deep=True)
    cfg.reference = WorkerConfig.model_validate({
        "model_args": {"model_name_or_path": cfg.pretrain},
        "strategy_args": {"strategy_name": name, "strategy_config": config},
    })
    model = load_model(Path(cfg.pretrain)).eval()
    batch = pipeline_batch(model.config.vocab_size)
    with torch.no_grad():
        expected = response_logprobs(model, batch, temperature=1.0)

    group = LocalWorkerGroup(ReferenceWorker, "reference", init_args=(cfg,),
                             distributed=name in ("fsdp2_infer", "deepspeed_infer"))
    try:
        assert type(group.worker.strategy).__name__ == kind
        got = group.call_rank0("compute_log_probs", batch)
    finally:
        group.shutdown()
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    assert not torch.distributed.is_initialized()
