"""LearnerGroup: the DeepSpeed ZeRO learner ranks as Ray actors in one placement group, driven as one.

The driver hands it scored records; it builds the GRPO sequences once, deals them to the ranks and cuts
each rank's share into the same number of mini-batches (optimizer steps), passing each mini-batch's
global token (or sequence) count so every rank normalises its loss the same way. Every call fans out to
all ranks and waits: ranks run the same collectives in the same order or they hang.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from conductor.config import LearnerConfig
from conductor.rollout_record import RolloutRecord
from learner.train_batch import BatchStats, build_sequences, shard, split
from learner.weight_sync import free_port


def learner_bundles(config: LearnerConfig) -> list[dict[str, float]]:
    bundle = {"CPU": config.num_cpus_per_rank}
    if config.num_gpus_per_rank > 0:
        bundle["GPU"] = config.num_gpus_per_rank
    return [dict(bundle) for _ in range(config.ranks)]


def accumulation_steps(config: LearnerConfig, sequences_per_step: int) -> int:
    """Micro-batches per optimizer step per rank, sized for a full step's sequences."""
    per_rank_mini = math.ceil(sequences_per_step / (config.ranks * config.mini_batches))
    return max(1, math.ceil(per_rank_mini / config.micro_batch_size))


class LearnerGroup:
    def __init__(self, model_path: str, config: LearnerConfig, total_steps: int, sequences_per_step: int,
                 seed: int = 0, timeout_s: float = 600.0):
        from learner.learner_worker import LearnerWorker

        self.config, self.timeout_s = config, timeout_s
        self.backend = "nccl" if config.num_gpus_per_rank > 0 else "gloo"
        self.placement: PlacementGroup = placement_group(learner_bundles(config), strategy="PACK",
                                                         name=f"conductor-learners-{free_port()}")
        ready, _ = ray.wait([self.placement.ready()], timeout=timeout_s)
        if not ready:
            remove_placement_group(self.placement)
            raise RuntimeError(f"cluster cannot place {config.ranks} learner ranks with "
                               f"{learner_bundles(config)[0]} each within {timeout_s:g}s")
        port = free_port()
        steps = accumulation_steps(config, sequences_per_step)
        self.workers = [
            LearnerWorker.options(
                num_cpus=config.num_cpus_per_rank, num_gpus=config.num_gpus_per_rank,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.placement, placement_group_bundle_index=rank),
            ).remote(rank, config.ranks, port, model_path, config, total_steps, steps, seed)
            for rank in range(config.ranks)]
        self._all(lambda w: w.ready.remote())

    def _all(self, call) -> list[Any]:
        return ray.get([call(worker) for worker in self.workers], timeout=self.timeout_s)

    def train_step(self, records: list[RolloutRecord]) -> tuple[dict[str, float], BatchStats]:
        sequences, stats = build_sequences(records, filter_zero_spread=self.config.filter_zero_spread)
        if not sequences:
            return {"loss": 0.0, "skipped": 1.0}, stats
        per_rank = [split(share, self.config.mini_batches) for share in shard(sequences, self.config.ranks)]
        normalisers = [sum(_count(per_rank[r][m], self.config.aggregation) for r in range(self.config.ranks))
                       for m in range(self.config.mini_batches)]
        results = ray.get([w.train_step.remote(per_rank[r], normalisers) for r, w in enumerate(self.workers)],
                          timeout=self.timeout_s)
        merged = {key: sum(r[key] for r in results) / len(results) for key in results[0]}
        merged["loss"] = sum(r["loss"] for r in results)  # each rank reports its share of the batch loss
        return merged, stats

    def logprobs(self, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
        return self._all(lambda w: w.logprobs.remote(prompt_ids, completion_ids))[0]

    def save_checkpoint(self, directory: str, tag: str, client_state: dict[str, Any]) -> str:
        return self._all(lambda w: w.save_checkpoint.remote(directory, tag, client_state))[0]

    def load_checkpoint(self, directory: str, tag: str) -> dict[str, Any]:
        return self._all(lambda w: w.load_checkpoint.remote(directory, tag))[0]

    def export_hf(self, directory: str, tokenizer_from: Optional[str] = None) -> str:
        return self._all(lambda w: w.export_hf.remote(directory, tokenizer_from))[0]

    def full_state_dict(self) -> dict[str, Any]:
        return self._all(lambda w: w.full_state_dict.remote())[0]

    # -- the learner side of learner/weight_sync.py ----------------------------------------------------

    def weight_plan(self) -> list:
        return ray.get(self.workers[0].weight_plan.remote(), timeout=self.timeout_s)

    def rendezvous_address(self) -> tuple[str, int]:
        """Where rank 0 hosts the weight group's TCP store (its node, a free port there)."""
        return ray.get(self.workers[0].rendezvous_address.remote(), timeout=self.timeout_s)

    def connect_sender(self, transport: str, **kwargs: Any) -> Any:
        return self.workers[0].connect_sender.remote(transport, **kwargs)

    def push_weights(self, version: int) -> list[Any]:
        return [w.push_weights.remote(version) for w in self.workers]

    def shutdown(self) -> None:
        for worker in self.workers:
            ray.kill(worker)
        remove_placement_group(self.placement)


def _count(sequences, how: str) -> float:
    if how == "token":
        return float(sum(len(s.completion_ids) for s in sequences))
    return float(len(sequences))
