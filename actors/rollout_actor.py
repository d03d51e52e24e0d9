"""RolloutActor: a Ray actor that turns rollout requests into scored records and writes them to the
replay store. The logic is conductor/rollout.py; this file only places it in the cluster.

It may die at any point (``max_restarts``): the driver issues its request again, with the same batch
id, so the records get the same ids and the store keeps one copy whichever attempt wrote first.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import ray

from conductor.config import Config
from conductor.replay_store import ReplayStore
from conductor.rollout import RolloutReceipt, RolloutRequest, RolloutRunner
from conductor.run_output import local_copy


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
        self.runner = RolloutRunner(config, tokenizer, engines, RayPool(config.pool, seed=seed), seed=seed)
        self.store = ReplayStore(store_path, storage_options=store_options or None) if store_path else None

    async def run(self, request: RolloutRequest) -> RolloutReceipt:
        records = await self.runner.run_request(request)
        if request.write and self.store is not None:
            self.store.write(records)
        return RolloutReceipt(batch_id=request.batch_id, groups=len({r.group_id for r in records}),
                              versions=tuple(sorted({r.policy_version for r in records})),
                              records=records if request.return_records else None)

    def pid(self) -> int:
        return os.getpid()
