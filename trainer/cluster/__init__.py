"""Ray machinery: resource pools from device_mapping, placement groups, worker groups.

The roles (actor_train, actor_infer, …) live in `trainer.roles`; this package imports none of them.
Ray itself is imported only inside the functions that place or call Ray actors: this package, the
local backend (`LocalWorkerGroup`) and pool planning work where the `ray` package is not installed.
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
