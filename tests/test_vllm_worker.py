"""A real engine as a worker: vLLM's OpenAI server on a tiny model, called through the pool."""

import asyncio

import pytest

from conductor.config import PoolConfig, ProviderSpec, SamplingParams, WorkerSpec
from conductor.local_pool import LocalPool
from learner.tiny_policy import build_tiny_policy
from tests.support.vllm_server import VllmServer

pytestmark = pytest.mark.slow


def test_vllm_server_answers_through_the_pool_with_usage_and_cost(tmp_path):
    model_dir = build_tiny_policy(tmp_path / "tiny")
    with VllmServer(model_dir, "tiny-worker", tmp_path) as server:
        config = PoolConfig(
            providers=[ProviderSpec(id="local-vllm", base_url=server.base_url, rpm=600, timeout_s=60)],
            workers=[WorkerSpec(id="tiny", model="tiny-worker", provider="local-vllm", description="a tiny model",
                                price_in_per_m=2.0, price_out_per_m=8.0,
                                sampling=SamplingParams(temperature=0.0, max_tokens=12))])
        pool = LocalPool(config)

        async def main():
            try:
                return await asyncio.gather(*(pool.chat("tiny", [{"role": "user", "content": f"Question {i}: 2+2?"}])
                                              for i in range(4)))
            finally:
                await pool.close()

        results = asyncio.run(main())
    for result in results:
        assert result.text and 0 < result.completion_tokens <= 12 and result.prompt_tokens > 5
        assert result.cost_usd == pytest.approx((result.prompt_tokens * 2.0 + result.completion_tokens * 8.0) / 1e6)
        assert result.retries == 0
    assert pool.stats()["local-vllm"]["calls"] == 4
