"""A collective that one rank never joins fails within the role's backend_timeout (minutes, fractions
allowed), naming the role, the rank that gave up and the rank that never came: not after rpc_timeout."""

from __future__ import annotations

import time

import pytest

from tests.trainer.cluster.straggler import Straggler
from trainer.cluster import WorkerGroup, WorkerGroupError, plan_resource_pools
from trainer.config import PipelineConfig


def test_a_hung_rank_fails_the_collective_after_backend_timeout_naming_role_and_ranks(ray_session) -> None:
    cfg = PipelineConfig.model_validate({"actor_train": {"device_mapping": [0, 1], "backend_timeout": 0.05}})
    assert cfg.actor_train.backend_timeout == 0.05  # 3 s: the schema takes fractions of a minute
    pool = plan_resource_pools(cfg)["actor_train"]
    group = WorkerGroup(Straggler, "actor_train", pool, distributed=True,
                        backend_timeout_minutes=cfg.actor_train.backend_timeout)  # no call timeout at all
    try:
        assert group.call_all("all_reduce", None) == [2.0, 2.0]
        started = time.monotonic()
        with pytest.raises(WorkerGroupError) as info:
            group.call_all("all_reduce", 1)
        waited = time.monotonic() - started
    finally:
        group.shutdown()
    assert (info.value.role, info.value.rank, info.value.method) == ("actor_train", 0, "all_reduce")
    message = str(info.value)
    assert message.startswith("role 'actor_train' rank 0: all_reduce failed: ")
    assert "Timed out" in message and "ranks [1] had not answered" in message, message
    assert 2 < waited < 60, waited  # the 3 s backend timeout, far from rank 1's 600 s sleep


def test_backend_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"backend_timeout"):
        PipelineConfig.model_validate({"actor_train": {"backend_timeout": 0}})
