"""Worker groups: one Ray actor per rank of a role, driven by the single controller.

A worker class is a plain Python class constructed as `worker_cls(role, *init_args, rank,
world_size)`. `WorkerGroup` hosts one instance per rank in a Ray actor placed in the role's
`ResourcePool`; `LocalWorkerGroup` hosts a single one in the calling process. Both expose the same
calls, and a failure on any rank surfaces at once as a `WorkerGroupError` naming role and rank.
A call names its method by reference (`group.call_sharded(Actor.train_step, batch)`: a reader and a
type checker can follow it to the role's Protocol); a string still works for ad-hoc worker classes.
Both classes are generic in their role (`WorkerGroup[Actor]`, the Protocol in trainer.roles): a method of
another role is a type error (mypy), and the call's result has the method's return type.
A Protocol method declares how it is called (`@dispatch("sharded")`, as verl's `@register(dispatch_mode=…)`),
and a group refuses the other calls: `call_all(Actor.train_step, batch)` would train every rank on the
whole batch, so it is an error before any rank runs.
torch is imported only where a process group is set up, so light workers start fast; ray only in
the Ray side's methods, so `LocalWorkerGroup` (and this module) work where Ray is not installed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Concatenate, Generic, Literal, ParamSpec, TypeVar, overload

from trainer.cluster import distributed as dist_setup
from trainer.cluster.resources import ResourcePool

if TYPE_CHECKING:
    import ray

# ray.wait in slices: the driver's main thread returns to Python between them, so a signal (a cancel,
# the watchdog ending a stalled attempt) is handled within a second even while a call runs for hours
WAIT_SLICE_S = 1.0
Method = str | Callable[..., Any]
"""A worker method: the function itself (its name is what the rank calls) or its name."""


Dispatch = Literal["all", "sharded", "rank0"]
"""all: the same arguments on every rank; sharded: rank r gets the r-th slice of the batch; rank0: rank 0 only."""
DECLARED_DISPATCH: dict[Callable[..., Any], Dispatch] = {}
_F = TypeVar("_F", bound=Callable[..., Any])
# a group's role: the Protocol in trainer.roles its calls are checked against (cluster imports no role, so
# unbound here); covariant, as it is only ever an argument of the methods a call takes: WorkerGroup[Actor]
# is a WorkerGroup[Role]
R = TypeVar("R", covariant=True)
P = ParamSpec("P")
T = TypeVar("T")


def dispatch(mode: Dispatch) -> Callable[[_F], _F]:
    """Declare on a role's Protocol method how a worker group must call it."""
    def declare(method: _F) -> _F:
        DECLARED_DISPATCH[method] = mode
        return method
    return declare


def method_name(method: Method, used: Dispatch | None = None) -> str:
    """The name a rank calls; with `used`, refuses a method declared for another dispatch mode."""
    if isinstance(method, str):
        return method
    declared = DECLARED_DISPATCH.get(method)
    if used is not None and declared is not None and declared != used:
        raise TypeError(f"{method.__qualname__} is declared @dispatch({declared!r}): call it with "
                        f"group.call_{declared}(…), not group.call_{used}(…)")
    return method.__name__


class WorkerGroupError(RuntimeError):
    def __init__(self, role: str, rank: int | None, method: str, message: str) -> None:
        where = f"role {role!r} rank {rank}" if rank is not None else f"role {role!r}"
        super().__init__(f"{where}: {method} failed: {message}")
        self.role, self.rank, self.method, self.message = role, rank, method, message

    def __reduce__(self) -> tuple:  # raised inside an actor (a lost Deferred), it crosses Ray by pickle
        return (type(self), (self.role, self.rank, self.method, self.message))


@dataclass(frozen=True)
class Deferred:
    """A result that `call_all_deferred` left in Ray's object store, owned by the rank that produced it.
    Passed as an argument of another group's call, that actor fetches it itself: the value never goes
    through the driver. If it was lost (its owner died), the error names the role that produced it."""

    role: str
    rank: int
    method: str
    ref: ray.ObjectRef  # of the producing task, whose value is [reference to the result put by that rank]

    def resolve(self) -> Any:
        import ray

        try:
            (result,) = ray.get(self.ref)
            return ray.get(result)
        except ray.exceptions.RayError as error:
            raise WorkerGroupError(self.role, self.rank, self.method,
                                   f"its result was lost: {type(error).__name__}: {error}") from None


def shard_batch(batch: Mapping[str, Any], parts: int) -> list[dict[str, Any]]:
    """Split every value (tensor or list) along dim 0 into `parts` equal contiguous shards."""
    sizes = {key: len(value) for key, value in batch.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"call_sharded: batch values differ in length along dim 0: {sizes}")
    rows = next(iter(sizes.values()), 0)
    if rows % parts:
        raise ValueError(
            f"call_sharded: {rows} rows do not split evenly over {parts} ranks (sizes {sizes}); "
            f"make the batch a multiple of {parts} (padding is not done implicitly)"
        )
    per_rank = rows // parts
    return [{key: value[r * per_rank : (r + 1) * per_rank] for key, value in batch.items()} for r in range(parts)]


class WorkerHost:
    """The Ray actor body: joins the process group (if asked), then builds the worker. Its repr (the
    actor's `repr_name` in Ray's state API and dashboard) is "<role>:<rank>", so Ray's own records say
    which role and rank each actor process runs."""

    def __init__(self, role: str, rank: int) -> None:
        self.role, self.rank = role, rank
        self.worker: Any = None

    def __repr__(self) -> str:
        return f"{self.role}:{self.rank}"

    def node(self) -> tuple[str, str, int]:
        """(node id, node IP, a free port on that node)."""
        import ray

        return ray.get_runtime_context().get_node_id(), dist_setup.node_ip_address(), dist_setup.find_free_port()

    def start(
        self,
        worker_cls: type,
        role: str,
        init_args: tuple,
        rank: int,
        world_size: int,
        rendezvous: dict[str, Any] | None,
    ) -> int:
        if rendezvous is not None:
            dist_setup.init_process_group(rank=rank, world_size=world_size, **rendezvous)
        self.worker = worker_cls(role, *init_args, rank, world_size)
        return os.getpid()  # the driver's watchdog reads a stuck rank's stack through it

    def call(self, method: str, args: tuple, kwargs: dict[str, Any]) -> Any:
        args = tuple(a.resolve() if isinstance(a, Deferred) else a for a in args)
        return getattr(self.worker, method)(*args, **kwargs)

    def call_deferred(self, method: str, args: tuple, kwargs: dict[str, Any]) -> list[ray.ObjectRef]:
        """`call`, with its result put in the object store by this process; returns [reference], which the
        driver passes on without fetching the value."""
        import ray

        return [ray.put(self.call(method, args, kwargs))]


class WorkerGroup(Generic[R]):
    """`world_size` Ray actors of `worker_cls` for `role`, placed in `pool`.

    distributed=True: every actor joins one torch.distributed group (gloo on CPU, nccl on GPU)
    with MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE/LOCAL_RANK exported, before the worker is built.
    `timeout_s` bounds every call (None: wait as long as the ranks work; an error on any rank still
    surfaces at once); `backend_timeout_minutes` bounds a collective (the role's backend_timeout);
    `env_vars` (the role's system_envs) are set in the actors. After a WorkerGroupError the other ranks may be stuck in a collective:
    shut the group down.
    """

    in_process = False  # Ray actors: what crosses to another role goes through the object store

    def __init__(
        self,
        worker_cls: type,
        role: str,
        pool: ResourcePool,
        init_args: tuple = (),
        *,
        distributed: bool = False,
        env_vars: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        start_timeout_s: float = 300.0,
        backend_timeout_minutes: float = 30.0,
    ) -> None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.role, self.pool, self.timeout_s = role, pool, timeout_s
        # calls handed out without waiting (call_all_deferred(wait=False)): settled with the next call
        self.unsettled: list[tuple[str, list[ray.ObjectRef]]] = []
        self.in_flight: tuple[str, tuple[int, ...]] | None = None  # (method, ranks not answered yet)
        self.pids: list[int | None] = []
        placement = pool.placement(role)
        self.world_size = placement.world_size
        group = pool.acquire()
        actor_cls = ray.remote(WorkerHost)
        # A runtime_env of its own makes Ray start fresh worker processes instead of reusing the
        # prestarted ones: only when there are variables to set.
        runtime_env = {"env_vars": dict(env_vars)} if env_vars else None
        self.actors: list[Any] = []  # Ray actor handles: their `.remote` methods are made at run time
        for rank in range(self.world_size):
            strategy = PlacementGroupSchedulingStrategy(
                placement_group=group, placement_group_bundle_index=placement.bundle_index[rank]
            )
            options = pool.actor_resources(role, rank)
            self.actors.append(
                actor_cls.options(**options, scheduling_strategy=strategy, runtime_env=runtime_env).remote(role, rank)
            )
        try:
            rendezvous: list[dict[str, Any] | None] = (
                list(self._rendezvous(start_timeout_s, backend_timeout_minutes)) if distributed
                else [None] * self.world_size)
            starts = [
                actor.start.remote(worker_cls, role, tuple(init_args), rank, self.world_size, rendezvous[rank])
                for rank, actor in enumerate(self.actors)
            ]
            self.pids = self._gather(starts, "start", start_timeout_s)
        except BaseException:
            self.shutdown()
            raise

    def _rendezvous(self, timeout_s: float, backend_timeout_minutes: float) -> list[dict[str, Any]]:
        """Rank 0's node address and a free port on it; LOCAL_RANK = order among same-node ranks."""
        nodes = self._gather([actor.node.remote() for actor in self.actors], "start", timeout_s)
        _, master_addr, master_port = nodes[0]
        seen: dict[str, int] = {}
        result = []
        for node_id, _, _ in nodes:
            local_rank = seen.get(node_id, 0)
            seen[node_id] = local_rank + 1
            result.append(
                {
                    "master_addr": master_addr,
                    "master_port": master_port,
                    "local_rank": local_rank,
                    "timeout_minutes": backend_timeout_minutes,
                }
            )
        return result

    def _gather(self, refs: Sequence[ray.ObjectRef], method: str, timeout_s: float | None) -> list:
        """Results in rank order; raises on the first failing rank rather than waiting for all. The calls
        left unsettled before this one are waited for with it: a failure or hang there surfaces here, and a
        hung rank is found by the collective timeout of a rank that went on to this call."""
        import ray

        earlier, self.unsettled = self.unsettled, []
        pending = {ref: (rank, name, False) for name, old in earlier for rank, ref in enumerate(old)}
        pending.update({ref: (rank, method, True) for rank, ref in enumerate(refs)})
        results: list[Any] = [None] * len(refs)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            while pending:
                self.in_flight = (method, tuple(sorted({rank for rank, _, _ in pending.values()})))
                remaining = WAIT_SLICE_S if deadline is None else min(WAIT_SLICE_S, max(0.0, deadline - time.monotonic()))
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=remaining)
                if not ready:
                    if deadline is None or time.monotonic() < deadline:
                        continue
                    ranks = sorted({rank for rank, _, _ in pending.values()})
                    raise WorkerGroupError(self.role, None, method, f"no answer after {timeout_s:g} s from ranks {ranks}")
                for ref in ready:
                    rank, name, wanted = pending.pop(ref)
                    try:
                        value = ray.get(ref)
                    except ray.exceptions.RayTaskError as error:
                        cause = error.cause if error.cause is not None else error
                        if isinstance(cause, WorkerGroupError) and cause.role != self.role:
                            raise cause from error  # a Deferred argument was lost: its producer is the story
                        message = f"{type(cause).__name__}: {cause}{_still_busy(pending)}"
                        raise WorkerGroupError(self.role, rank, name, message) from error
                    except ray.exceptions.RayError as error:  # the actor died (OOM, segfault, killed)
                        message = f"{type(error).__name__}: {error}{_still_busy(pending)}"
                        raise WorkerGroupError(self.role, rank, name, message) from error
                    if wanted:
                        results[rank] = value
        finally:
            self.in_flight = None
        return results

    @overload
    def call_all(self, method: Callable[Concatenate[R, P], T], *args: P.args, **kwargs: P.kwargs) -> list[T]: ...
    @overload
    def call_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]: ...

    def call_all(self, method: Method, *args: Any, **kwargs: Any) -> list[Any]:
        """The same call on every rank; results in rank order."""
        method = method_name(method, "all")
        return self._gather([a.call.remote(method, args, kwargs) for a in self.actors], method, self.timeout_s)

    # the method's arguments are not checked (a keyword of the group's own, `wait`, stands between them)
    def call_all_deferred(self, method: Callable[Concatenate[R, ...], Any] | str, *args: Any, wait: bool = True,
                          **kwargs: Any) -> Deferred:
        """The same call on every rank, rank 0's result left in Ray's object store: a `Deferred` to pass as an
        argument of another group's call, which fetches it itself (weights go from actor_train to actor_infer
        without a round trip through the driver). wait=True waits like `call_all` (errors and hangs surface
        the same way); wait=False returns at once and the next call on this group settles it (an actor runs
        its calls in order, so that call's ranks also start after this one's)."""
        method = method_name(method, "all")
        refs = [a.call_deferred.remote(method, args, kwargs) for a in self.actors]
        if wait:
            self._gather(refs, method, self.timeout_s)
        else:
            self.unsettled.append((method, refs))
        return Deferred(self.role, 0, method, refs[0])

    # the shard stands where the method's first argument is: the method and result are typed, not its arguments
    @overload
    def call_sharded(self, method: Callable[Concatenate[R, ...], T], batch: Mapping[str, Any],
                     **kwargs: Any) -> list[T]: ...
    @overload
    def call_sharded(self, method: str, batch: Mapping[str, Any], **kwargs: Any) -> list[Any]: ...

    def call_sharded(self, method: Method, batch: Mapping[str, Any], **kwargs: Any) -> list[Any]:
        """Rank r gets the r-th equal contiguous slice (along dim 0) of every value in `batch`."""
        method = method_name(method, "sharded")
        shards = shard_batch(batch, self.world_size)
        refs = [a.call.remote(method, (shard,), kwargs) for a, shard in zip(self.actors, shards, strict=True)]
        return self._gather(refs, method, self.timeout_s)

    @overload
    def call_rank0(self, method: Callable[Concatenate[R, P], T], *args: P.args, **kwargs: P.kwargs) -> T: ...
    @overload
    def call_rank0(self, method: str, *args: Any, **kwargs: Any) -> Any: ...

    def call_rank0(self, method: Method, *args: Any, **kwargs: Any) -> Any:
        """Only rank 0 (a method without collectives, or the group would wait on the others)."""
        method = method_name(method, "rank0")
        return self._gather([self.actors[0].call.remote(method, args, kwargs)], method, self.timeout_s)[0]

    def shutdown(self) -> None:
        """Kill the actors and give the pool back (its placement group goes with its last user)."""
        self.unsettled = []
        if self.actors:
            import ray

            for actor in self.actors:
                ray.kill(actor, no_restart=True)
            self.actors = []
            self.pool.release()


def _still_busy(pending: Mapping[ray.ObjectRef, tuple[int, str, bool]]) -> str:
    """The ranks that had not answered when another failed: when a collective timed out (the role's
    backend_timeout), these are the ranks that never joined it."""
    if not pending:
        return ""
    ranks = sorted({rank for rank, _, _ in pending.values()})
    return f" (ranks {ranks} had not answered: hung, or waiting in a collective)"


class LocalWorkerGroup(Generic[R]):
    """The same calls on one worker (rank 0 of 1) in this process: tests, debugging, CPU demos.

    distributed=True sets up a one-rank gloo/nccl group when none exists, so fsdp2_train runs too.
    """

    in_process = True  # its worker lives in this process: tensors can be handed over on their device

    def __init__(
        self,
        worker_cls: type,
        role: str,
        pool: ResourcePool | None = None,
        init_args: tuple = (),
        *,
        distributed: bool = False,
    ) -> None:
        self.role, self.pool, self.world_size = role, pool, 1
        self.in_flight: tuple[str, tuple[int, ...]] | None = None
        self.pids: list[int | None] = [os.getpid()]
        self.owns_process_group = distributed and not dist_setup.is_initialized()
        if self.owns_process_group:
            dist_setup.init_process_group(
                rank=0, world_size=1, master_addr="127.0.0.1", master_port=dist_setup.find_free_port()
            )
        try:
            self.worker = worker_cls(role, *init_args, 0, 1)
        except Exception as error:
            self.shutdown()
            raise WorkerGroupError(role, 0, "start", f"{type(error).__name__}: {error}") from error

    def _call(self, method: Method, args: tuple, kwargs: dict[str, Any], used: Dispatch) -> Any:
        method = method_name(method, used)
        self.in_flight = (method, (0,))
        try:
            return getattr(self.worker, method)(*args, **kwargs)
        except Exception as error:
            raise WorkerGroupError(self.role, 0, method, f"{type(error).__name__}: {error}") from error
        finally:
            self.in_flight = None

    @overload
    def call_all(self, method: Callable[Concatenate[R, P], T], *args: P.args, **kwargs: P.kwargs) -> list[T]: ...
    @overload
    def call_all(self, method: str, *args: Any, **kwargs: Any) -> list[Any]: ...

    def call_all(self, method: Method, *args: Any, **kwargs: Any) -> list[Any]:
        return [self._call(method, args, kwargs, "all")]

    @overload
    def call_all_deferred(self, method: Callable[Concatenate[R, ...], T], *args: Any, wait: bool = True,
                          **kwargs: Any) -> T: ...
    @overload
    def call_all_deferred(self, method: str, *args: Any, wait: bool = True, **kwargs: Any) -> Any: ...

    def call_all_deferred(self, method: Method, *args: Any, wait: bool = True, **kwargs: Any) -> Any:
        """In one process there is nothing to defer: the result itself."""
        return self._call(method, args, kwargs, "all")

    @overload
    def call_sharded(self, method: Callable[Concatenate[R, ...], T], batch: Mapping[str, Any],
                     **kwargs: Any) -> list[T]: ...
    @overload
    def call_sharded(self, method: str, batch: Mapping[str, Any], **kwargs: Any) -> list[Any]: ...

    def call_sharded(self, method: Method, batch: Mapping[str, Any], **kwargs: Any) -> list[Any]:
        return [self._call(method, (shard_batch(batch, 1)[0],), kwargs, "sharded")]

    @overload
    def call_rank0(self, method: Callable[Concatenate[R, P], T], *args: P.args, **kwargs: P.kwargs) -> T: ...
    @overload
    def call_rank0(self, method: str, *args: Any, **kwargs: Any) -> Any: ...

    def call_rank0(self, method: Method, *args: Any, **kwargs: Any) -> Any:
        return self._call(method, args, kwargs, "rank0")

    def shutdown(self) -> None:
        """The worker's own `shutdown` (an in-process engine's cleanup) first, then the process group."""
        if hasattr(self, "worker") and hasattr(self.worker, "shutdown"):
            self.worker.shutdown()
        if self.owns_process_group:
            dist_setup.destroy_process_group()
            self.owns_process_group = False


Group = WorkerGroup[R] | LocalWorkerGroup[R]
"""A role's group, on Ray or in this process (trainer.roles.RoleGroups names each role's)."""
