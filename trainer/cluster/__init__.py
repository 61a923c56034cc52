"""Ray machinery: resource pools from device_mapping, placement groups, worker groups.

The role workers (actor_train, actor_infer, …) live in `trainer.cluster.workers`.
"""

from trainer.cluster.resources import ClusterResourceError, ResourcePool, RolePlacement, plan_resource_pools
from trainer.cluster.worker_group import LocalWorkerGroup, WorkerGroup, WorkerGroupError, shard_batch

__all__ = [
    "ClusterResourceError",
    "LocalWorkerGroup",
    "ResourcePool",
    "RolePlacement",
    "WorkerGroup",
    "WorkerGroupError",
    "plan_resource_pools",
    "shard_batch",
]
