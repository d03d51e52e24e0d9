"""Weight sync: learner → every engine replica, versioned. One interface, two transports.

``WeightSync(learners, engines, transport).push(version)``:
  1. every learner rank walks the same bucket plan (conductor/weight_transfer.py); under ZeRO-3 each
     bucket is gathered (``GatheredParameters``) and released before the next, so no rank ever holds
     the whole model at once;
  2. rank 0 sends each bucket through the transport:
     - ``object_store``: safetensors bytes → Ray object store; then each replica in turn loads every
       bucket and takes the version in *one* actor call (``apply_weights``). An engine runs one call at
       a time, so the swap falls between two generation requests, and the other replicas keep serving
       while one swaps: replica by replica, the pool never stops. The object store holds one copy of
       the model until the last replica has it;
     - ``collective``: one flat tensor per bucket broadcast over a process group of learner rank 0 and
       every engine worker (NCCL on GPU, gloo on CPU: the same code, so the logic is tested here).
       Each engine takes the whole broadcast in one call (``receive_weights``), also between requests,
       but all replicas at once: a broadcast is one collective;
  3. every generation afterwards carries the version.

``repair(version)`` brings replicas that fell behind (a restarted engine comes back awaiting weights)
to ``version``: over the object store to those replicas only; over a collective by pushing to all,
where every push first re-forms the group if a replica's process changed (a restarted engine's workers
are no longer in it; the push waits for it to come back).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any, Optional

import torch

from conductor.weight_transfer import Bucket, ParamSpec, bucket_plan, flatten

AWAITING_WEIGHTS = -1  # an engine's version while it has no current weights (actors/conductor_engine.py)


def parameter_specs(module: torch.nn.Module) -> list[ParamSpec]:
    """Names, full shapes (``ds_shape`` under ZeRO-3, where the local tensor is a shard) and dtypes."""
    specs = []
    for name, param in module.named_parameters():
        shape = tuple(getattr(param, "ds_shape", param.shape))
        specs.append((name, tuple(int(d) for d in shape), str(param.dtype).removeprefix("torch.")))
    return specs


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


class ObjectStoreSender:
    """Learner rank 0's side of the object-store transport."""

    def __init__(self, replicas: Sequence[Any]):
        self.replicas = list(replicas)
        self.pending: list[Any] = []

    def send(self, bucket: Bucket) -> None:
        import ray
        from safetensors.torch import save

        self.pending.append(ray.put(save({name: tensor.contiguous() for name, tensor in bucket})))

    def finish(self, version: int, replicas: Optional[Sequence[int]] = None) -> None:
        """Replica by replica: each loads every bucket and takes ``version`` in one call. A replica that
        is dead or restarting is skipped; it comes back awaiting weights and ``repair`` reaches it."""
        import ray

        buckets, self.pending = self.pending, []
        for index in (range(len(self.replicas)) if replicas is None else replicas):
            try:
                ray.get(self.replicas[index].apply_weights.remote(buckets, version))
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                continue


class CollectiveSender:
    def __init__(self, group: Any):
        self.group = group

    def send(self, bucket: Bucket) -> None:
        self.group.broadcast(flatten(bucket).contiguous(), src=0)

    def finish(self, version: int, replicas: Optional[Sequence[int]] = None) -> None:
        """Engines take ``version`` in their own ``receive_weights`` call."""


class WeightSync:
    """Driver side: connects once, then ``push(version)`` after every optimizer step."""

    def __init__(self, learners: Any, engines: Any, transport: str, timeout_s: float = 600.0):
        if transport not in ("object_store", "collective"):
            raise ValueError(f"unknown weight-sync transport {transport!r}")
        self.learners, self.engines, self.transport, self.timeout_s = learners, engines, transport, timeout_s
        self.members: list[Optional[int]] = []  # the engines' pids when the broadcast group was formed
        self.connect()

    def connect(self) -> None:
        """Hand learner rank 0 the replicas' handles, or form the broadcast group (blocks until every
        engine worker joins)."""
        import ray

        if self.transport == "object_store":
            ray.get(self.learners.connect_sender("object_store", replicas=self.engines.replicas),
                    timeout=self.timeout_s)
            return
        self.members = self._wait_for_all_replicas()
        plan = self.learners.weight_plan()
        host, port = self.learners.rendezvous_address()
        joins = self.engines.open_weight_group(host, port, plan, self.learners.backend)
        sender = self.learners.connect_sender("collective", group_address=(host, port),
                                              group_size=1 + len(self.engines.replicas))
        ray.get([sender, *joins], timeout=self.timeout_s)

    def push(self, version: int, replicas: Optional[Sequence[int]] = None) -> list[Optional[int]]:
        """Send the learners' weights to the replicas (default: all); returns every replica's version
        (None: down, to be repaired when it is back)."""
        import ray

        receives = []
        if self.transport == "collective":
            replicas = None  # a broadcast reaches every member of the group
            if self.engines.pids() != self.members:  # a replica restarted: its workers left the group
                self.connect()
            receives = self.engines.receive_weights(version)
        self.learners.wait(self.learners.push_weights(version, replicas))
        ray.get(receives, timeout=self.timeout_s)
        versions = self.engines.versions(allow_unavailable=True)
        pushed = range(len(versions)) if replicas is None else replicas
        # None: down; AWAITING_WEIGHTS: came back during the push. Both are repaired when they answer.
        if any(versions[i] not in (version, None, AWAITING_WEIGHTS) for i in pushed):
            raise RuntimeError(f"weight sync to version {version} left engines at versions {versions}")
        return versions

    def repair(self, version: int) -> list[int]:
        """Push ``version`` to every replica that is up but behind it; returns the replicas repaired.
        A replica still restarting (no answer yet) is left for the next call."""
        versions = self.engines.versions(allow_unavailable=True)
        behind = [i for i, v in enumerate(versions) if v is not None and v != version]
        if not behind:
            return []
        if self.transport == "collective" and None in versions:
            return []  # the group can only re-form with every replica up; push() re-forms it
        self.push(version, behind)
        return behind

    def _wait_for_all_replicas(self) -> list[Optional[int]]:
        """The replicas' pids once every one answers (a restarting replica is waited for)."""
        deadline = time.monotonic() + self.timeout_s
        while None in (pids := self.engines.pids()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"engine replicas did not come back within {self.timeout_s:g}s: {pids}")
            time.sleep(1.0)
        return pids
