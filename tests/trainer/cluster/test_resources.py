"""Planning resource pools from device_mapping (pure), and the cluster checks (real Ray)."""

from __future__ import annotations

import time

import pytest
import ray

from trainer.cluster import ClusterResourceError, plan_resource_pools
from trainer.config import PipelineConfig


def config(**roles) -> PipelineConfig:
    return PipelineConfig.model_validate(roles)


def test_overlapping_device_sets_become_one_colocated_pool() -> None:
    cfg = config(
        actor_train={"device_mapping": "list(range(0,4))"},
        actor_infer={"device_mapping": [2, 3, 4, 5], "num_gpus_per_worker": 2},
        reference={"device_mapping": [6]},
        critic={"device_mapping": [5, 7]},  # touches actor_infer only: still the same pool
        rewards={"math": {"reward_type": "math_rule"}},
    )
    pools = plan_resource_pools(cfg, num_cpus_per_device=2, use_gpu=True)
    shared = pools["actor_train"]
    assert pools["actor_infer"] is shared and pools["critic"] is shared
    assert shared.devices == (0, 1, 2, 3, 4, 5, 7) and shared.colocated
    assert shared.bundles == [{"GPU": 1.0, "CPU": 2.0}] * 7
    infer = shared.placement("actor_infer")
    assert infer.world_size == 2 and infer.bundle_index == (2, 4)  # ranks start on devices 2 and 4
    # device 2 is shared with actor_train, device 4 with nobody, device 5 with critic
    assert shared.actor_resources("actor_infer", 0) == {"num_cpus": 1.0, "num_gpus": 0.5}
    assert shared.actor_resources("actor_infer", 1) == {"num_cpus": 2.0, "num_gpus": 1.0}
    assert shared.placement("critic").share == (0.5, 1.0)
    assert pools["reference"] is not shared and pools["reference"].devices == (6,)
    assert pools["rewards.math"].devices == () and pools["rewards.math"].bundles == [{"CPU": 2}]


def test_cpu_cluster_gets_cpu_bundles_and_colocate_all_reuses_actor_train_devices() -> None:
    cfg = config(actor_train={"device_mapping": [0, 1]}, actor_infer={}, reference={}, colocate_all=True)
    pools = plan_resource_pools(cfg, use_gpu=False)
    assert pools["actor_train"] is pools["actor_infer"] is pools["reference"]
    assert pools["actor_train"].bundles == [{"CPU": 1.0}, {"CPU": 1.0}]
    assert pools["reference"].actor_resources("reference", 1) == {"num_cpus": pytest.approx(1 / 3), "num_gpus": 0.0}


def test_inconsistent_mappings_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"actor_infer\.device_mapping has 3 devices.*num_gpus_per_worker=2"):
        plan_resource_pools(config(actor_infer={"device_mapping": [0, 1, 2], "num_gpus_per_worker": 2}), use_gpu=True)
    with pytest.raises(ValueError, match=r"actor_train\.world_size=3 disagrees"):
        plan_resource_pools(config(actor_train={"device_mapping": [0, 1], "world_size": 3}), use_gpu=True)
    with pytest.raises(ValueError, match=r"actor_train\.device_mapping lists a device twice"):
        plan_resource_pools(config(actor_train={"device_mapping": [0, 0]}), use_gpu=False)


def test_more_devices_than_the_cluster_fails_fast(ray_session) -> None:
    started = time.monotonic()
    cpu_pool = plan_resource_pools(config(actor_train={"device_mapping": "list(range(0,64))"}))["actor_train"]
    assert cpu_pool.bundles[0] == {"CPU": 1.0}  # the test cluster has no GPU: CPU bundles
    cpus = ray.cluster_resources()["CPU"]
    with pytest.raises(ClusterResourceError, match=rf"64 CPU needed but the cluster has {cpus:g}"):
        cpu_pool.acquire()
    gpus = int(ray.cluster_resources().get("GPU", 0))
    gpu_cfg = config(actor_train={"device_mapping": list(range(gpus + 2))})
    gpu_pool = plan_resource_pools(gpu_cfg, use_gpu=True)["actor_train"]
    with pytest.raises(ClusterResourceError, match=rf"{gpus + 2} GPU needed but the cluster has {gpus}"):
        gpu_pool.acquire()
    assert time.monotonic() - started < 30  # refused up front, not after waiting for a placement group
    assert cpu_pool.placement_group is None and gpu_pool.placement_group is None


def test_busy_cluster_times_out_with_a_clear_error(ray_session) -> None:
    more_than_half = int(ray.cluster_resources()["CPU"]) // 2 + 1  # each pool fits alone, not both
    cfg = config(
        actor_train={"device_mapping": list(range(more_than_half))},
        reference={"device_mapping": list(range(more_than_half, 2 * more_than_half))},
    )
    pools = plan_resource_pools(cfg, use_gpu=False)
    holder = pools["actor_train"]
    holder.acquire()
    try:
        live_before = live_placement_groups()
        started = time.monotonic()
        with pytest.raises(ClusterResourceError, match=r"'reference'.*not ready after 1 s"):
            pools["reference"].acquire(timeout_s=1)
        assert time.monotonic() - started < 30  # the 1 s timeout, not an endless wait
        assert live_placement_groups() == live_before  # the waiting group was withdrawn, not left pending
    finally:
        holder.release()
    assert holder.placement_group is None


def live_placement_groups() -> set[str]:
    return {pg_id for pg_id, pg in ray.util.placement_group_table().items() if pg["state"] != "REMOVED"}
