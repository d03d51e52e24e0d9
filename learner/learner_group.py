"""LearnerGroup: the DeepSpeed ZeRO learner ranks as Ray actors in one placement group, driven as one.

The driver hands it scored records; it builds the GRPO sequences once, deals them to the ranks and cuts
each rank's share into the same number of mini-batches (optimizer steps), passing each mini-batch's
global token (or sequence) count so every rank normalises its loss the same way. Every call fans out to
all ranks and waits: ranks run the same collectives in the same order or they hang.

A rank that dies leaves the others blocked in a collective, so waiting is done rank by rank: the first
dead rank raises ``LearnerGroupFailed`` at once (not after the collective's timeout), and the driver
rebuilds the group from the newest checkpoint.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Optional

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from conductor.config import LearnerConfig
from conductor.rollout_record import RolloutRecord
from conductor.run_output import RunOutput
from conductor.weight_transfer import free_port
from learner.train_batch import BatchStats, LearnerStats, accumulation_steps, build_sequences, plan_step

RENDEZVOUS_ATTEMPTS = 3


class LearnerGroupFailed(RuntimeError):
    """A learner rank died or stopped answering; the group cannot go on."""


def learner_bundles(config: LearnerConfig) -> list[dict[str, float]]:
    bundle = {"CPU": config.num_cpus_per_rank}
    if config.num_gpus_per_rank > 0:
        bundle["GPU"] = config.num_gpus_per_rank
    return [dict(bundle) for _ in range(config.ranks)]


class LearnerGroup:
    def __init__(self, model_path: str, config: LearnerConfig, total_steps: int, sequences_per_step: int,
                 seed: int = 0, timeout_s: float = 600.0, storage_options: Optional[dict[str, Any]] = None,
                 run_name: str = ""):
        from learner.learner_rank import LearnerRank

        self.config, self.timeout_s = config, timeout_s
        self.plan_texts = None  # to mark the plan-line tokens kept out of the loss (``train_plan_line`` false)
        if not config.train_plan_line:
            from transformers import AutoTokenizer

            from conductor.worker_choice_tokens import TokenTexts
            self.plan_texts = TokenTexts(AutoTokenizer.from_pretrained(model_path))
        self.backend = "nccl" if config.num_gpus_per_rank > 0 else "gloo"
        self.placement: PlacementGroup = placement_group(learner_bundles(config), strategy="PACK",
                                                         name=f"conductor-learners-{free_port()}")
        ready, _ = ray.wait([self.placement.ready()], timeout=timeout_s)
        if not ready:
            remove_placement_group(self.placement)
            raise RuntimeError(f"cluster cannot place {config.ranks} learner ranks with "
                               f"{learner_bundles(config)[0]} each within {timeout_s:g}s")
        steps = accumulation_steps(config, sequences_per_step)
        for attempt in range(1, RENDEZVOUS_ATTEMPTS + 1):
            self.ranks = [
                LearnerRank.options(
                    num_cpus=config.num_cpus_per_rank, num_gpus=config.num_gpus_per_rank,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(self.placement,
                                                                         placement_group_bundle_index=rank),
                ).remote(rank, config.ranks, config, storage_options, run_name)
                for rank in range(config.ranks)]
            try:  # the process group meets at rank 0's node (any node of a multi-node cluster), on a port free there
                master = self.wait([self.ranks[0].rendezvous_address.remote()])[0]
                self.wait([rank.setup.remote(master, model_path, total_steps, steps, seed) for rank in self.ranks])
                break
            except BaseException as exc:
                if attempt < RENDEZVOUS_ATTEMPTS and "EADDRINUSE" in str(exc):
                    # The port was free when rank 0 looked and taken before the store bound it: new ranks,
                    # a new port, the same placement.
                    for rank in self.ranks:
                        ray.kill(rank)
                    continue
                self.shutdown()  # no ranks or reserved CPUs left behind by a group that never started
                raise

    def wait(self, calls: list[Any]) -> list[Any]:
        """Results of one call per rank; the first rank to die (or all to stall past the timeout) raises
        ``LearnerGroupFailed`` without waiting for the survivors."""
        pending, deadline = list(calls), time.monotonic() + self.timeout_s
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not done:
                raise LearnerGroupFailed(f"learner ranks did not answer within {self.timeout_s:g}s")
            try:
                ray.get(done[0])
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
                raise LearnerGroupFailed(f"a learner rank died: {type(exc).__name__}") from exc
            except ray.exceptions.RayTaskError as exc:
                if len(self.ranks) == 1:
                    raise
                # With several ranks, a survivor's collective fails when a peer dies (often before the dead
                # rank's own error arrives): the group is broken either way.
                raise LearnerGroupFailed(f"a learner rank failed: {exc.cause!r}") from exc
        return ray.get(list(calls))

    def _all(self, call) -> list[Any]:
        return self.wait([call(rank) for rank in self.ranks])

    def train_step(self, records: list[RolloutRecord]) -> tuple[LearnerStats, BatchStats]:
        sequences, stats = build_sequences(records, filter_zero_spread=self.config.filter_zero_spread,
                                           advantage_scale=self.config.advantage_scale,
                                           first_round_weight=self.config.first_round_weight)
        if not sequences:
            return LearnerStats.skipped_step(), stats
        if self.plan_texts is not None:  # marked once, here: the loss's normaliser counts without them too
            sequences = [dataclasses.replace(s, untrained=self.plan_texts.plan_positions(s.completion_ids))
                         for s in sequences]
        plan = plan_step(sequences, self.config.ranks, self.config.mini_batches, self.config.aggregation)
        results = self.wait([rank.train_step.remote(plan.per_rank[r], plan.normalisers, plan.tokens)
                             for r, rank in enumerate(self.ranks)])
        return LearnerStats.merge(results), stats

    def logprobs(self, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
        return self._all(lambda rank: rank.logprobs.remote(prompt_ids, completion_ids))[0]

    def save_checkpoint(self, out: RunOutput, tag: str, client_state: dict[str, Any]) -> str:
        return self._all(lambda rank: rank.save_checkpoint.remote(out, tag, client_state))[0]

    def load_checkpoint(self, out: RunOutput, tag: str) -> dict[str, Any]:
        return self._all(lambda rank: rank.load_checkpoint.remote(out, tag))[0]

    def export_hf(self, out: RunOutput, tokenizer_from: Optional[str] = None) -> str:
        return self._all(lambda rank: rank.export_hf.remote(out, tokenizer_from))[0]

    def full_state_dict(self) -> dict[str, Any]:
        return self._all(lambda rank: rank.full_state_dict.remote())[0]

    # -- the learner side of learner/weight_sync.py ----------------------------------------------------

    def weight_plan(self) -> list:
        return self.wait([self.ranks[0].weight_plan.remote()])[0]

    def rendezvous_address(self) -> tuple[str, int]:
        """Where rank 0 hosts the weight group's TCP store (its node, a free port there)."""
        return self.wait([self.ranks[0].rendezvous_address.remote()])[0]

    def connect_sender(self, transport: str, **kwargs: Any) -> Any:
        return self.ranks[0].connect_sender.remote(transport, **kwargs)

    def push_weights(self, version: int, replicas: Optional[list[int]] = None) -> list[Any]:
        return [rank.push_weights.remote(version, replicas) for rank in self.ranks]

    def shutdown(self) -> None:
        """Kill the ranks and free their placement group (idempotent)."""
        ranks, self.ranks = self.ranks, []
        for rank in ranks:
            ray.kill(rank)
        if ranks:
            remove_placement_group(self.placement)

