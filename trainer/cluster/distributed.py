"""torch.distributed set-up for the ranks of one worker group (inside Ray actors or in-process).

torch is imported inside the functions that need it: actors of workers without torch start fast.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta


def find_free_port() -> int:
    """A port the OS considers free (its ephemeral range, 32768–60999 on Linux: outside the
    10002–19999 range Ray reserves for its workers)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def node_ip_address() -> str:
    import ray

    return ray.util.get_node_ip_address() if ray.is_initialized() else "127.0.0.1"


def default_backend() -> str:
    """gloo on CPU; on GPU nccl for CUDA tensors plus gloo for CPU tensors (object collectives,
    CPU-offloaded state dicts)."""
    import torch

    return "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"


def init_process_group(
    *,
    rank: int,
    world_size: int,
    master_addr: str,
    master_port: int,
    local_rank: int = 0,
    timeout_minutes: float = 30.0,
) -> None:
    """Export the torchrun-style variables (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK)
    and join the default process group; on GPU first bind this process to its device."""
    import torch
    import torch.distributed as dist

    os.environ.update(
        MASTER_ADDR=master_addr,
        MASTER_PORT=str(master_port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(local_rank),
    )
    if torch.cuda.is_available():
        # Ray narrows CUDA_VISIBLE_DEVICES to the actor's GPU, which then is device 0.
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    dist.init_process_group(
        backend=default_backend(),
        init_method=f"tcp://{master_addr}:{master_port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(minutes=timeout_minutes),
    )


def is_initialized() -> bool:
    import torch.distributed as dist

    return dist.is_initialized()


def destroy_process_group() -> None:
    """Leave the default group. When DeepSpeed has joined it, DeepSpeed's own destroy also drops the
    sub-groups it cached (a later group in this process would otherwise meet stale ones); megatron's
    parallel state (its TP / PP / DP sub-groups) is dropped likewise."""
    import sys

    import torch.distributed as dist

    if not dist.is_initialized():
        return
    megatron_state = sys.modules.get("megatron.core.parallel_state")
    if megatron_state is not None and megatron_state.model_parallel_is_initialized():
        megatron_state.destroy_model_parallel()
    deepspeed_comm = sys.modules.get("deepspeed.comm")
    if deepspeed_comm is not None and deepspeed_comm.is_initialized():
        deepspeed_comm.destroy_process_group()
    else:
        dist.destroy_process_group()
