"""From `device_mapping` to Ray placement groups.

Each role lists the device ids it runs on. Roles whose device sets overlap are merged into one
colocated `ResourcePool`: one placement group with a bundle per device, the roles' actors share
the bundles (each takes an equal fraction of the device) and take turns (offload/onload between
phases). On a CPU-only cluster a "device" is a bundle of `num_cpus_per_device` CPUs, so the same
config runs on a laptop; on a GPU cluster a bundle is one GPU plus its CPUs.

Nodes: device ids count across machines as ROLL counts them, device d on node d // num_gpus_per_node.
A cluster whose nodes carry the custom resource `policylab_node_<i>` (scripts/services.py starts a
multi-node cluster so; a GPU node joins with `ray start --resources '{"policylab_node_1": 8}'`) gets
that resource in every bundle, so each role runs on the node its device ids name. On a cluster without
these resources bundles go wherever they fit.

Ray is imported inside the functions that talk to the cluster: planning pools (and this module)
work where Ray is not installed, as the local backend runs there.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainer.config.topology import WORKER_ROLES, devices_per_worker, duplicate_devices

if TYPE_CHECKING:
    from ray.util.placement_group import PlacementGroup

    from trainer.config.schema import PipelineConfig


NODE_RESOURCE_PREFIX = "policylab_node_"


def node_resource(index: int) -> str:
    """The custom resource that marks node `index` of a multi-node cluster (one unit per device)."""
    return f"{NODE_RESOURCE_PREFIX}{index}"


class ClusterResourceError(RuntimeError):
    """The cluster cannot host a resource pool (too few devices, or they stayed busy)."""


@dataclass(frozen=True)
class RolePlacement:
    """Where the ranks of one role run inside its pool."""

    role: str
    devices: tuple[int, ...]
    world_size: int
    bundle_index: tuple[int, ...]  # per rank: the bundle (position in the pool's devices) it runs in
    share: tuple[float, ...]  # per rank: the fraction of its bundle it takes (1 / roles on that device)


@dataclass
class ResourcePool:
    name: str  # the roles joined by "+", e.g. "actor_train+actor_infer"
    devices: tuple[int, ...]  # the device ids of the pool, sorted; bundle i is devices[i]
    bundles: list[dict[str, float]]
    use_gpu: bool
    roles: dict[str, RolePlacement]
    placement_group: PlacementGroup | None = None
    users: int = field(default=0, repr=False)  # worker groups placed in the pool (the last removes it)

    @property
    def colocated(self) -> bool:
        return len(self.roles) > 1

    def actor_resources(self, role: str, rank: int) -> dict[str, float]:
        """num_cpus / num_gpus of one rank's actor: its share of the bundle it runs in."""
        placement = self.placement(role)
        bundle = self.bundles[placement.bundle_index[rank]]
        share = placement.share[rank]
        return {"num_cpus": bundle["CPU"] * share, "num_gpus": bundle.get("GPU", 0.0) * share}

    def placement(self, role: str) -> RolePlacement:
        if role not in self.roles:
            raise KeyError(f"role {role!r} is not in resource pool {self.name!r} (roles: {', '.join(self.roles)})")
        return self.roles[role]

    def acquire(self, timeout_s: float = 60.0) -> PlacementGroup:
        """Create the placement group on first use (checking the cluster first, so a pool that
        cannot fit fails at once instead of hanging) and count one more user."""
        if self.placement_group is None:
            self.placement_group = create_placement_group(self, timeout_s)
        self.users += 1
        return self.placement_group

    def release(self) -> None:
        """One user fewer; the last one removes the placement group."""
        self.users = max(0, self.users - 1)
        if self.users == 0 and self.placement_group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.placement_group)
            self.placement_group = None


def plan_resource_pools(
    cfg: PipelineConfig, *, num_cpus_per_device: float = 1.0, use_gpu: bool | None = None,
    by_node: bool | None = None,
) -> dict[str, ResourcePool]:
    """Map every role that has workers to its ResourcePool; colocated roles map to the same object.

    `use_gpu` None asks the running Ray cluster (any GPU → GPU bundles), or torch when Ray is not
    initialised. `by_node` pins device d's bundle to node d // num_gpus_per_node (its
    `policylab_node_<i>` resource); None does so when the running cluster's nodes carry those resources.
    A role without device_mapping runs on actor_train's devices when `colocate_all`, else as one worker
    in a pool of its own with a single CPU bundle.
    """
    if num_cpus_per_device <= 0:
        raise ValueError(f"num_cpus_per_device must be > 0, got {num_cpus_per_device}")
    if use_gpu is None:
        use_gpu = cluster_has_gpus()
    if by_node is None:
        by_node = cluster_marks_nodes()
    devices_per_node = cfg.num_gpus_per_node if by_node else None
    sections = role_sections(cfg)
    train_devices = sections["actor_train"].device_mapping if "actor_train" in sections else None
    mapped: dict[str, tuple[int, ...]] = {}
    unmapped: list[str] = []
    for role, section in sections.items():
        devices = section.device_mapping
        if not devices and cfg.colocate_all and train_devices:
            devices = train_devices
        if devices:
            if duplicate_devices(devices):
                raise ValueError(f"{role}.device_mapping lists a device twice: {duplicate_devices(devices)}")
            if min(devices) < 0:
                raise ValueError(f"{role}.device_mapping has a negative device id: {list(devices)}")
            mapped[role] = tuple(devices)
        else:
            unmapped.append(role)

    pools: dict[str, ResourcePool] = {}
    for group in overlapping_groups(mapped):
        pool = build_pool(group, {r: mapped[r] for r in group}, sections, num_cpus_per_device, use_gpu,
                          devices_per_node)
        pools.update(dict.fromkeys(group, pool))
    for role in unmapped:
        placement = RolePlacement(role, (), 1, (0,), (1.0,))
        pools[role] = ResourcePool(role, (), [{"CPU": num_cpus_per_device}], False, {role: placement})
    return pools


def role_sections(cfg: PipelineConfig) -> dict[str, Any]:
    """The config sections that become worker groups: the fixed roles that are set, and one
    `rewards.<name>` role per reward worker."""
    sections = {role: getattr(cfg, role) for role in WORKER_ROLES if getattr(cfg, role, None) is not None}
    for name, section in (cfg.rewards or {}).items():
        sections[f"rewards.{name}"] = section
    return sections


def overlapping_groups(mapped: dict[str, tuple[int, ...]]) -> list[list[str]]:
    """Connected components of "shares a device" (a role on {0,1} and one on {1,2} join even if
    a third role on {2,3} only touches the second)."""
    groups: list[tuple[list[str], set[int]]] = []
    for role, devices in mapped.items():
        joined = [g for g in groups if g[1] & set(devices)]
        merged_roles = [r for g in joined for r in g[0]] + [role]
        merged_devices = set(devices).union(*(g[1] for g in joined))
        groups = [g for g in groups if g not in joined] + [(merged_roles, merged_devices)]
    return [roles for roles, _ in groups]


def build_pool(
    roles: list[str],
    role_devices: dict[str, tuple[int, ...]],
    sections: dict[str, Any],
    num_cpus_per_device: float,
    use_gpu: bool,
    devices_per_node: int | None = None,
) -> ResourcePool:
    """One pool for colocated `roles`; with `devices_per_node`, each device's bundle also asks for the
    resource of its node (device // devices_per_node)."""
    devices = tuple(sorted(set().union(*role_devices.values())))
    position = {device: i for i, device in enumerate(devices)}
    roles_on = {d: sum(d in ds for ds in role_devices.values()) for d in devices}
    bundle = {"GPU": 1.0, "CPU": num_cpus_per_device} if use_gpu else {"CPU": num_cpus_per_device}
    placements = {}
    for role in roles:
        own = role_devices[role]
        section = sections[role]
        per_worker = devices_per_worker(role, section)
        if len(own) % per_worker:
            raise ValueError(
                f"{role}.device_mapping has {len(own)} devices, not a multiple of "
                f"{role}.num_gpus_per_worker={per_worker}"
            )
        world_size = len(own) // per_worker
        declared = section.world_size
        if declared is not None and declared != world_size:
            raise ValueError(
                f"{role}.world_size={declared} disagrees with device_mapping ({len(own)} devices / "
                f"num_gpus_per_worker={per_worker} = {world_size} workers)"
            )
        first_devices = [own[rank * per_worker] for rank in range(world_size)]
        placements[role] = RolePlacement(
            role=role,
            devices=own,
            world_size=world_size,
            bundle_index=tuple(position[d] for d in first_devices),
            share=tuple(1.0 / roles_on[d] for d in first_devices),
        )
    bundles = [
        dict(bundle) if devices_per_node is None else {**bundle, node_resource(d // devices_per_node): 1.0}
        for d in devices
    ]
    return ResourcePool("+".join(roles), devices, bundles, use_gpu, placements)


def _ray_if_initialized() -> Any:
    """The ray module when it is installed and initialised in this process, else None."""
    ray = sys.modules.get("ray")  # not initialised unless something imported it
    return ray if ray is not None and ray.is_initialized() else None


def cluster_has_gpus() -> bool:
    ray = _ray_if_initialized()
    if ray is not None:
        return ray.cluster_resources().get("GPU", 0) > 0
    import torch

    return torch.cuda.is_available()


def cluster_marks_nodes() -> bool:
    """True when the running cluster's nodes carry `policylab_node_<i>` resources."""
    ray = _ray_if_initialized()
    return ray is not None and any(name.startswith(NODE_RESOURCE_PREFIX) for name in ray.cluster_resources())


def missing_nodes(pool: ResourcePool) -> list[str]:
    """The node resources the pool's bundles ask for that no live node offers (a node that is down, or
    still joining after a restart)."""
    import ray

    total = ray.cluster_resources()
    wanted = {name for bundle in pool.bundles for name in bundle if name.startswith(NODE_RESOURCE_PREFIX)}
    return sorted(name for name in wanted if total.get(name, 0.0) <= 0)


def check_cluster_fits(pool: ResourcePool) -> None:
    """Fail fast when the whole cluster, even idle, could not hold the pool's bundles."""
    import ray

    total = ray.cluster_resources()
    needed: dict[str, float] = {}
    for bundle in pool.bundles:
        for resource, amount in bundle.items():
            needed[resource] = needed.get(resource, 0.0) + amount
    short = {r: (n, total.get(r, 0.0)) for r, n in needed.items() if n > total.get(r, 0.0) + 1e-9}
    if short:
        detail = ", ".join(f"{n:g} {r} needed but the cluster has {have:g}" for r, (n, have) in short.items())
        raise ClusterResourceError(
            f"resource pool {pool.name!r} (device_mapping {list(pool.devices)}) cannot fit: {detail}. "
            "Shrink the roles' device_mapping or add nodes."
        )
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    for bundle in pool.bundles:
        if not any(all(node.get(r, 0.0) >= a for r, a in bundle.items()) for node in nodes):
            raise ClusterResourceError(
                f"resource pool {pool.name!r}: no single node can hold the bundle {bundle}; "
                f"nodes have {[{r: n.get(r, 0.0) for r in bundle} for n in nodes]}"
            )


def create_placement_group(pool: ResourcePool, timeout_s: float) -> PlacementGroup:
    """Wait up to `timeout_s` for a node the pool names that is not in the cluster (it may be rejoining
    after a crash), fail at once if the cluster cannot hold the pool, else wait up to `timeout_s` for the
    placement group."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    deadline = time.monotonic() + timeout_s
    while missing_nodes(pool) and time.monotonic() < deadline:
        time.sleep(1.0)
    check_cluster_fits(pool)
    group = placement_group(pool.bundles, strategy="PACK")
    try:
        ray.get(group.ready(), timeout=timeout_s)
    except ray.exceptions.GetTimeoutError:
        remove_placement_group(group)
        raise ClusterResourceError(
            f"resource pool {pool.name!r}: placement group of {len(pool.bundles)} bundles "
            f"{pool.bundles[0] if pool.bundles else {}} not ready after {timeout_s:g} s; the cluster has "
            f"{ray.available_resources()} free of {ray.cluster_resources()} (other pools may hold them)"
        ) from None
    return group
