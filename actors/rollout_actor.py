"""RolloutActor: a Ray actor that turns rollout requests into scored records and writes them to the
replay store. The logic is conductor/rollout.py; this file only places it in the cluster. It also says which
requests have drawn their Conductor completions (``sampled``), so that a replayable run publishes new weights
only after the requests in flight were sampled at the old ones (cluster/rollout_feed.py).

It may die at any point (``max_restarts``): the driver issues its request again, with the same batch
id, so the records get the same ids and the store keeps one copy whichever attempt wrote first.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from typing import Any, Optional

import ray

from conductor.config import Config
from conductor.metrics import Families
from conductor.replay_store import ReplayStore
from conductor.rollout import RolloutReceipt, RolloutRequest, RolloutRunner
from conductor.run_output import local_copy

SAMPLED_KEPT = 4096  # far more requests than are ever in flight at once


@ray.remote(num_cpus=0.25, max_restarts=-1, max_task_retries=0)
class RolloutActor:
    def __init__(self, config: Config, model_path: str, engines: Any, store_path: Optional[str] = None,
                 seed: int = 0):
        from transformers import AutoTokenizer

        from actors.worker_pool import RayPool

        if ray.get_runtime_context().was_current_actor_reconstructed:
            seed += 1_000_003 * os.getpid()  # a restarted actor must not replay its predecessor's samples
        store_options = config.store()[1]
        tokenizer = AutoTokenizer.from_pretrained(local_copy(model_path, config.output.storage_options))
        pool = RayPool(config.pool, seed=seed, run_name=config.run_name)
        self.runner = RolloutRunner(config, tokenizer, engines, pool, seed=seed)
        self.store = ReplayStore(store_path, storage_options=store_options or None) if store_path else None
        self.sampled_ids: OrderedDict[str, None] = OrderedDict()  # the latest SAMPLED_KEPT batch ids
        self.runner.on_sampled = self._sampled
        actor = ray.get_runtime_context().get_actor_id()[-8:]  # the same after a restart
        self.metrics = Families("conductor_rollout", run=config.run_name, actor=actor)

    async def run(self, request: RolloutRequest) -> RolloutReceipt:
        records = await self.runner.run_request(request)
        self._report(records)
        group_ids = tuple(sorted({r.group_id for r in records}))
        stored = request.write and self.store is not None
        if stored:
            self.store.write(records)
        return RolloutReceipt(batch_id=request.batch_id, groups=len(group_ids),
                              versions=tuple(sorted({r.policy_version for r in records})),
                              records=records if request.return_records else None,
                              stored=group_ids if stored else ())

    def sampled(self, batch_ids: list[str]) -> list[bool]:
        """Whether each request has drawn its Conductor completions."""
        return [batch_id in self.sampled_ids for batch_id in batch_ids]

    def _sampled(self, batch_id: str) -> None:
        self.sampled_ids[batch_id] = None
        while len(self.sampled_ids) > SAMPLED_KEPT:
            self.sampled_ids.popitem(last=False)

    def _report(self, records: list) -> None:
        for record in records:
            outcome = ("infra_error" if record.infra_error else "format_error" if not record.format_ok
                       else "correct" if record.correct else "wrong")
            self.metrics.inc("conductor_rollouts_total", outcome=outcome)
            self.metrics.observe("conductor_rollout_episode_seconds", record.workers_s + record.verify_s)
        if records:
            self.metrics.set("conductor_rollout_format_rate", sum(r.format_ok for r in records) / len(records))

    def pid(self) -> int:
        return os.getpid()
