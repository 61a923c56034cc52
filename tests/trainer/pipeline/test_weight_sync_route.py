"""Which way actor_train's weights reach actor_infer: in one process, bucket by bucket on the engine's
device and in its dtype; across processes (Ray), as a full CPU state dict through the object store."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.trainer.pipeline.conftest import load_cfg
from trainer.pipeline.rlvr import push_weights_in_process, weights_in_process
from trainer.pipeline.run.models import materialise_tiny_models
from trainer.pipeline.runner import build_groups


def groups(local: bool) -> dict[str, SimpleNamespace]:
    return {role: SimpleNamespace(in_process=local) for role in ("actor_train", "actor_infer")}


@pytest.mark.parametrize(("overrides", "local", "expected"), [
    ((), True, True),                                                        # the demo: torch_train + hf_infer
    ((), False, False),                                                      # Ray actors: other processes
    (("actor_train.strategy_args.strategy_name=fsdp2_train",), True, True),  # DTensors gathered one by one
    (("actor_train.strategy_args.strategy_name=fsdp2_train",
      "+actor_train.strategy_args.strategy_config.cpu_offload=true"), True, False),
    (("actor_train.strategy_args.strategy_name=deepspeed_train",), True, False),
])
def test_the_route_follows_where_the_roles_live(tmp_path, overrides, local, expected) -> None:
    cfg = load_cfg(tmp_path, *overrides)
    assert weights_in_process(cfg, groups(local)) is expected


def test_local_groups_sync_bucket_by_bucket_into_the_engine(tmp_path) -> None:
    cfg = materialise_tiny_models(load_cfg(tmp_path))
    built = build_groups(cfg, ["actor_train", "actor_infer"], "local")
    trainer = built["actor_train"].worker.strategy.model
    engine = built["actor_infer"].worker.engine.model
    with torch.no_grad():
        for param in trainer.parameters():
            param.add_(0.5)  # what an update does: the engine now holds stale weights
    assert not torch.equal(trainer.model.norm.weight, engine.model.norm.weight)
    sent = push_weights_in_process(built["actor_train"], built["actor_infer"], bucket_bytes=16 * 1024)
    assert sent > 1
    for name, value in trainer.state_dict().items():
        assert torch.equal(engine.state_dict()[name], value), name


def test_a_sleeping_engine_is_woken_before_its_weights_are_loaded(tmp_path) -> None:
    """Loading into the parked CPU copy would cost a device->CPU copy now and a CPU->device copy at
    the next wake: the in-process sync wakes the engine and loads where it generates."""
    cfg = materialise_tiny_models(load_cfg(tmp_path))
    built = build_groups(cfg, ["actor_train", "actor_infer"], "local")
    engine = built["actor_infer"].worker.engine
    engine.sleep()
    push_weights_in_process(built["actor_train"], built["actor_infer"])
    assert not engine.asleep
