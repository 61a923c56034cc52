"""WorkerGroup on a real local Ray cluster; LocalWorkerGroup in process."""

from __future__ import annotations

import time

import pytest
import ray
import torch

from tests.trainer.cluster.probe import Probe
from trainer.cluster import LocalWorkerGroup, WorkerGroup, WorkerGroupError, plan_resource_pools, shard_batch
from trainer.cluster.worker_group import Deferred
from trainer.config import PipelineConfig


def test_shard_batch_splits_contiguously_and_refuses_uneven_sizes() -> None:
    batch = {"ids": torch.arange(6).reshape(6, 1), "text": list("abcdef")}
    shards = shard_batch(batch, 3)
    assert [s["ids"].flatten().tolist() for s in shards] == [[0, 1], [2, 3], [4, 5]]
    assert [s["text"] for s in shards] == [["a", "b"], ["c", "d"], ["e", "f"]]
    with pytest.raises(ValueError, match=r"6 rows do not split evenly over 4 ranks.*multiple of 4"):
        shard_batch(batch, 4)
    with pytest.raises(ValueError, match=r"differ in length.*'ids': 6, 'text': 5"):
        shard_batch({"ids": batch["ids"], "text": list("abcde")}, 2)


def test_colocated_roles_share_one_placement_group_and_take_turns(ray_session) -> None:
    cfg = PipelineConfig.model_validate(
        {"actor_train": {"device_mapping": [0, 1]}, "actor_infer": {"device_mapping": [0, 1]}}
    )
    pools = plan_resource_pools(cfg)
    train = WorkerGroup(Probe, "actor_train", pools["actor_train"], ("train",))
    infer = None
    try:
        infer = WorkerGroup(Probe, "actor_infer", pools["actor_infer"], ("infer",))
        placed = train.call_all("where") + infer.call_all("where")
        assert len({p["placement_group"] for p in placed}) == 1
        assert placed[0]["placement_group"] == pools["actor_train"].placement_group.id.hex()
        assert [(p["tag"], p["rank"], p["world_size"]) for p in placed] == [
            ("train", 0, 2), ("train", 1, 2), ("infer", 0, 2), ("infer", 1, 2)
        ]
        assert all(p["resources"]["CPU"] == pytest.approx(0.5) for p in placed)  # half a device each
        # results come back in rank order, each rank with its own contiguous shard
        echoed = infer.call_sharded("echo", {"x": torch.arange(4)}, scale=10)
        assert [(e["rank"], e["x"].tolist()) for e in echoed] == [(0, [0, 10]), (1, [20, 30])]
        assert train.call_rank0("echo", {"y": [1]}) == {"rank": 0, "y": [1]}
        train.shutdown()  # the pool stays while actor_infer still uses it
        assert pools["actor_infer"].placement_group is not None
        assert infer.call_all("where")[1]["rank"] == 1
    finally:
        train.shutdown()
        if infer is not None:
            infer.shutdown()
    assert pools["actor_infer"].placement_group is None


def test_failure_on_one_rank_surfaces_with_role_and_rank_without_hanging(ray_session) -> None:
    cfg = PipelineConfig.model_validate({"critic": {"device_mapping": [0, 1]}})
    group = WorkerGroup(Probe, "critic", plan_resource_pools(cfg)["critic"], ("c",), distributed=True)
    try:
        placed = group.call_all("where")
        assert [p["env"]["RANK"] for p in placed] == ["0", "1"]
        assert {p["env"]["WORLD_SIZE"] for p in placed} == {"2"}
        assert [p["env"]["LOCAL_RANK"] for p in placed] == ["0", "1"]  # one node
        assert len({(p["env"]["MASTER_ADDR"], p["env"]["MASTER_PORT"]) for p in placed}) == 1
        assert not 10002 <= int(placed[0]["env"]["MASTER_PORT"]) <= 19999
        assert {p["backend"] for p in placed} == {"gloo"}
        started = time.monotonic()
        # rank 0 waits in a barrier that rank 1 never reaches: the error must not wait for rank 0
        with pytest.raises(WorkerGroupError, match=r"role 'critic' rank 1: fail_on failed: ValueError: deliberate") as info:
            group.call_all("fail_on", 1)
        assert (info.value.role, info.value.rank, info.value.method) == ("critic", 1, "fail_on")
        assert time.monotonic() - started < 60  # not the backend timeout (30 min): the error is reported at once
    finally:
        group.shutdown()


def test_construction_errors_and_timeouts_name_the_role(ray_session) -> None:
    cfg = PipelineConfig.model_validate({"reference": {"device_mapping": [0]}})
    pool = plan_resource_pools(cfg)["reference"]
    with pytest.raises(WorkerGroupError, match=r"role 'reference' rank 0: start failed: TypeError"):
        WorkerGroup(Probe, "reference", pool, ("too", "many"))
    assert pool.placement_group is None  # a failed start gives its resources back
    group = WorkerGroup(Probe, "reference", pool, ("r",), timeout_s=1)
    actors = list(group.actors)
    try:
        with pytest.raises(WorkerGroupError, match=r"role 'reference': fail_on failed: no answer after 1 s from ranks \[0\]"):
            group.call_all("fail_on", 5)  # rank 0 sleeps
    finally:
        group.shutdown()
    with pytest.raises(ray.exceptions.RayActorError):  # shutdown killed the sleeping actor
        ray.get(actors[0].node.remote(), timeout=10)


def test_a_deferred_result_goes_from_one_group_to_another_without_the_driver(ray_session) -> None:
    cfg = PipelineConfig.model_validate(
        {"actor_train": {"device_mapping": [0, 1]}, "actor_infer": {"device_mapping": [0, 1]}}
    )
    pools = plan_resource_pools(cfg)
    train = WorkerGroup(Probe, "actor_train", pools["actor_train"], ("train",))
    infer = WorkerGroup(Probe, "actor_infer", pools["actor_infer"], ("infer",))
    try:
        deferred = train.call_all_deferred("echo", {"y": [7]})
        assert isinstance(deferred, Deferred) and isinstance(deferred.ref, ray.ObjectRef)  # a reference, not the value
        # every actor_infer rank receives actor_train rank 0's result (its "rank" key wins over the echoer's)
        assert infer.call_all("echo", deferred) == [{"rank": 0, "y": [7]}, {"rank": 0, "y": [7]}]
        # a result lost before it is used (here: a task that failed) is told as its producer's failure
        lost = Deferred("actor_train", 0, "full_state_dict", ray.remote(lambda: int("lost")).remote())
        with pytest.raises(WorkerGroupError, match=r"^role 'actor_train' rank 0: full_state_dict failed: its result "
                                                   r"was lost: RayTaskError\(ValueError\)"):
            infer.call_all("echo", lost)
        # wait=False hands the Deferred out at once; the group's next call settles every rank of it
        assert infer.call_all("echo", train.call_all_deferred("echo", {"y": [8]}, wait=False))[1] == {"rank": 0, "y": [8]}
        assert train.call_all_deferred("fail_on", 0, wait=False).method == "fail_on"  # no error yet: not waited for
        with pytest.raises(WorkerGroupError, match=r"^role 'actor_train' rank 0: fail_on failed: ValueError"):
            train.call_rank0("echo", {})
        assert train.call_rank0("where")["rank"] == 0  # settled once: the failure is not raised again
        train.shutdown()
        train = WorkerGroup(Probe, "actor_train", pools["actor_train"], ("train",))
        with pytest.raises(WorkerGroupError, match=r"role 'actor_train' rank 1: fail_on failed: ValueError"):
            train.call_all_deferred("fail_on", 1)  # every rank is waited for: a failure surfaces at once
    finally:
        train.shutdown()
        infer.shutdown()


def test_local_worker_group_has_the_same_calls() -> None:
    group = LocalWorkerGroup(Probe, "reward", None, ("local",))
    assert group.call_sharded("echo", {"x": [1, 2]}, scale=2) == [{"rank": 0, "x": [1, 2, 1, 2]}]
    assert group.call_rank0("echo", {}) == {"rank": 0}
    assert group.call_all_deferred("echo", {"y": [1]}) == {"rank": 0, "y": [1]}  # nothing to defer in-process
    with pytest.raises(WorkerGroupError, match=r"role 'reward' rank 0: fail_on failed: ValueError"):
        group.call_all("fail_on", 0)
    group.shutdown()


class _Trains:
    """A worker whose train_step records the rows it was handed."""

    def __init__(self, role: str, rank: int, world_size: int) -> None:
        self.rows: list[int] = []

    def train_step(self, batch: dict, step: int) -> dict[str, float]:
        self.rows.append(len(batch["ids"]))
        return {"rows": float(len(batch["ids"]))}


def test_a_role_method_called_with_another_dispatch_mode_is_refused_before_any_rank_runs() -> None:
    from trainer import roles

    group = LocalWorkerGroup(_Trains, "actor_train")
    batch = {"ids": torch.arange(4)}
    with pytest.raises(TypeError, match=r"Trained.train_step is declared @dispatch\('sharded'\).*not group.call_all"):
        group.call_all(roles.Actor.train_step, batch, step=1)
    with pytest.raises(TypeError, match=r"call_sharded"):
        group.call_rank0(roles.Actor.train_step, batch, step=1)
    assert group.worker.rows == []  # refused before the worker saw anything
    assert group.call_sharded(roles.Actor.train_step, batch, step=1) == [{"rows": 4.0}]
    # the Ray group checks the same declaration before it sends anything (no cluster needed to refuse)
    ray_group = WorkerGroup.__new__(WorkerGroup)
    with pytest.raises(TypeError, match=r"Reward.score is declared @dispatch\('rank0'\)"):
        ray_group.call_sharded(roles.Reward.score, {"prompts": ["p"]})
    with pytest.raises(TypeError, match=r"Rollout.generate is declared @dispatch\('sharded'\)"):
        ray_group.call_all_deferred(roles.Rollout.generate, {})


def test_every_method_of_the_role_protocols_declares_its_dispatch_mode() -> None:
    from trainer import roles
    from trainer.cluster.worker_group import DECLARED_DISPATCH

    undeclared = sorted(f"{protocol.__name__}.{name}" for protocol in {roles.Role, roles.Trained, *roles.ROLE_PROTOCOLS.values()}
                        for name, member in vars(protocol).items()
                        if callable(member) and not name.startswith("_") and member not in DECLARED_DISPATCH)
    # full_state_dict: called on every rank (FSDP gathers) or on rank 0 of one (tests), by design either
    assert undeclared == ["Actor.full_state_dict"]
