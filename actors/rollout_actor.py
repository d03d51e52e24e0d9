"""RolloutWorker: a Ray actor that turns batches of tasks into scored records and writes them to the
replay store. The logic is conductor/rollout.py; this file only places it in the cluster."""

from __future__ import annotations

from typing import Any, Optional

import ray

from conductor.config import Config
from conductor.replay_store import ReplayStore
from conductor.rollout import RolloutRunner, SamplingSettings
from conductor.rollout_record import RolloutRecord
from conductor.tasks.task import Task


@ray.remote(num_cpus=0.25)
class RolloutWorker:
    def __init__(self, config: Config, model_path: str, engines: Any, store_path: Optional[str] = None,
                 seed: int = 0):
        from transformers import AutoTokenizer

        from actors.worker_pool import RayPool

        tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.runner = RolloutRunner(config, tokenizer, engines, RayPool(config.pool, seed=seed), seed=seed)
        self.store = (ReplayStore(store_path, storage_options=config.rollout.storage_options or None)
                      if store_path else None)

    async def run(self, tasks: list[Task], write: bool = True, group_size: Optional[int] = None,
                  sampling: Optional[SamplingSettings] = None) -> list[RolloutRecord]:
        records = await self.runner.run(tasks, group_size, sampling)
        if write and self.store is not None:
            self.store.write(records)
        return records
